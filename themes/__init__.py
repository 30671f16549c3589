"""nodeconsole's Textual themes and stylesheet.

The names (and `resolve`, which checks a --theme argument) need no Textual: the launcher validates the
argument before anything is started, and Textual's import is left to the console's start-up. The
Theme objects (`all_themes()`) import Textual when first asked for."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.theme import Theme

CSS_PATH = Path(__file__).with_name("nodeconsole.tcss")

NAMES = ("nodeconsole-dark", "nodeconsole-light", "nodeconsole-contrast")
ALIASES = {"dark": NAMES[0], "light": NAMES[1], "contrast": NAMES[2], "high-contrast": NAMES[2]}


def _themes() -> tuple[Theme, Theme, Theme]:
    from textual.theme import Theme

    dark = Theme(name=NAMES[0], primary="#4fa3e0", secondary="#2d5f8a", accent="#f0a030",
                 warning="#f0b429", error="#e5534b", success="#57ab5a", foreground="#d8dee9",
                 background="#101418", surface="#161b22", panel="#1f2630", dark=True)
    light = Theme(name=NAMES[1], primary="#0b5cad", secondary="#5a7fa8", accent="#b35c00",
                  warning="#9a6700", error="#cf222e", success="#1a7f37", foreground="#1f2328",
                  background="#ffffff", surface="#f6f8fa", panel="#eaeef2", dark=False)
    # Pure, saturated colours that map cleanly onto a 16-colour terminal palette.
    contrast = Theme(name=NAMES[2], primary="#ffff00", secondary="#00ffff", accent="#ff00ff",
                     warning="#ffff00", error="#ff0000", success="#00ff00", foreground="#ffffff",
                     background="#000000", surface="#000000", panel="#000080", dark=True,
                     luminosity_spread=0.0)
    return dark, light, contrast


_made: tuple[Theme, Theme, Theme] | None = None


def all_themes() -> tuple[Theme, Theme, Theme]:
    """The Theme objects (dark, light, contrast), made on first use."""
    global _made
    if _made is None:
        _made = _themes()
    return _made


def resolve(name: str | None) -> str:
    """Theme name from the CLI (`dark`, `nodeconsole-light`, ...); ValueError on unknown."""
    if name is None:
        return NAMES[0]
    full = ALIASES.get(name, name)
    if full not in NAMES:
        raise ValueError(f"unknown theme {name!r} (choose from {', '.join(ALIASES)})")
    return full
