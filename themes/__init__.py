"""nodeconsole's Textual themes and stylesheet."""
from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

CSS_PATH = Path(__file__).with_name("nodeconsole.tcss")

DARK = Theme(name="nodeconsole-dark", primary="#4fa3e0", secondary="#2d5f8a", accent="#f0a030",
             warning="#f0b429", error="#e5534b", success="#57ab5a", foreground="#d8dee9",
             background="#101418", surface="#161b22", panel="#1f2630", dark=True)
LIGHT = Theme(name="nodeconsole-light", primary="#0b5cad", secondary="#5a7fa8", accent="#b35c00",
              warning="#9a6700", error="#cf222e", success="#1a7f37", foreground="#1f2328",
              background="#ffffff", surface="#f6f8fa", panel="#eaeef2", dark=False)
# Pure, saturated colours that map cleanly onto a 16-colour terminal palette.
CONTRAST = Theme(name="nodeconsole-contrast", primary="#ffff00", secondary="#00ffff", accent="#ff00ff",
                 warning="#ffff00", error="#ff0000", success="#00ff00", foreground="#ffffff",
                 background="#000000", surface="#000000", panel="#000080", dark=True, luminosity_spread=0.0)

THEMES = (DARK, LIGHT, CONTRAST)
NAMES = tuple(t.name for t in THEMES)
ALIASES = {"dark": DARK.name, "light": LIGHT.name, "contrast": CONTRAST.name, "high-contrast": CONTRAST.name}


def resolve(name: str | None) -> str:
    """Theme name from the CLI (`dark`, `nodeconsole-light`, ...); ValueError on unknown."""
    if name is None:
        return DARK.name
    full = ALIASES.get(name, name)
    if full not in NAMES:
        raise ValueError(f"unknown theme {name!r} (choose from {', '.join(ALIASES)})")
    return full
