"""Key hints match the keys: every hint in the package's text that names a key for a screen — "(P on
the NCCL screen)", "the GPUs screen (4)", "8 Changes → u undoes it", "f on the Overview" — names a key
that screen binds. The NCCL hint said "(g on the NCCL screen)" while the key is `P` (g moves to the top
of a table). The hints are found in the source, so a new one is checked without a new test."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.commands import COMMANDS
from tests.screens.conftest import FrozenCollector, make_frozen_seams

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("console", "actions", "screens")  # the package's subpackages (tests/test_packaging.py)
SCREENS = {c.title: re.fullmatch(r"show\('(\w+)'\)", c.action)[1] for c in COMMANDS
           if re.fullmatch(r"show\('(\w+)'\)", c.action)}  # "GPUs" → "gpus"
DIGITS = {c.key: c.title for c in COMMANDS if c.key.isdigit()}  # "4" → "GPUs"

# (pattern, key group, screen group, digit group or None)
HINTS = (
    (re.compile(r"\((\S{1,8}) on the (\w+) screen\)"), 1, 2, None),
    (re.compile(r"the (\w+) screen \((\d)\)"), None, 1, 2),
    (re.compile(r"(\d) (\w+) → \"?[^\w]*(\w) "), 3, 2, 1),
    (re.compile(r"\b(\w) on the (Overview)\b"), 1, 2, None),
)


def _hints() -> list[tuple[str, str | None, str, str | None]]:
    """(where, key, screen title, digit) of every hint in the package's Python source."""
    out = []
    for path in sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py")):
        if "demo" in path.parts or path.name.startswith("test_"):
            continue
        text = path.read_text(encoding="utf-8")
        for pattern, key, screen, digit in HINTS:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                whole = text.splitlines()[line - 1].strip()
                out.append((f"{path.relative_to(REPO)}:{line}: {whole}", m[key] if key else None, m[screen],
                            m[digit] if digit else None))
    return out


def test_the_hints_are_found():
    found = {h[0].split(": ", 1)[1] for h in _hints()}
    assert any("on the NCCL screen)" in h for h in found)  # the one that was wrong
    assert any("the GPUs screen (4)" in h for h in found)
    assert any("Changes →" in h for h in found)
    assert any("on the Overview" in h for h in found)


# What a hint's sentence asks the key to do (a word of its line → the action the key must run there): a
# hint whose key is bound to something else (g: the top of a table) is as wrong as an unbound one.
INTENTS = (("--gpus", "pick_gpus"), ("{key} undoes", "undo"), ("{key} redoes", "redo"),
           ("{key} on the Overview opens", "fix"), ("{key} on the Overview plans", "fix"))


def _intent(where: str, key: str) -> str:
    for phrase, action in INTENTS:
        if phrase.format(key=key) in where:
            return action
    raise AssertionError(f"{where}: a key hint whose purpose the test does not know: add it to INTENTS")


def _bound(app, mode: str) -> dict[str, set[str]]:
    """Key → the actions it runs on the screen of `mode`: its own bindings and its widgets', and the
    app's commands that work there."""
    keys: dict[str, set[str]] = {}
    for node in (app.screen, *app.screen.query("*")):
        for key, bindings in node._bindings.key_to_bindings.items():
            keys.setdefault(key, set()).update(b.action for b in bindings)
    for c in COMMANDS:
        if c.global_key and c.key != "enter" and (not c.screens or mode in c.screens):
            keys.setdefault(c.key, set()).add(c.action)
    return keys


@pytest.fixture(scope="module")
def seams(tmp_path_factory):
    return make_frozen_seams(tmp_path_factory.mktemp("hints") / "demo")


async def test_every_key_hint_names_a_key_bound_on_that_screen(seams):
    hints = _hints()
    app = NodeConsoleApp(seams, interval=60, collector=FrozenCollector(seams))
    wrong = []
    async with app.run_test(size=(120, 40)) as pilot:
        for where, key, title, digit in hints:
            if title not in SCREENS:
                wrong.append(f"{where}: no screen is called {title}")
                continue
            if digit is not None and DIGITS.get(digit) != title:
                wrong.append(f"{where}: {digit} opens {DIGITS.get(digit)}, not {title}")
            if key is not None:
                await app.switch_mode(SCREENS[title])
                await pilot.pause()
                actions = _bound(app, SCREENS[title]).get(key, set())
                intent = _intent(where, key)
                if not any(intent in a for a in actions):
                    wrong.append(f"{where}: {key} on the {title} screen runs {sorted(actions) or 'nothing'}, "
                                 f"not {intent}")
    assert not wrong, "\n".join(wrong)
