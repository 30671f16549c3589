"""Screens talk to the app through messages (screens/messages.py) and Textual's own App API: no screen
reads the console app's state or calls its methods, private or not."""
from __future__ import annotations

import ast
from pathlib import Path

from textual.app import App

import nodeconsole.screens as screens_pkg

SCREENS = Path(screens_pkg.__file__).parent
# the app itself; ChangeToasts (Textual's notification internals, kept with the app)
NOT_SCREENS = {"app.py", "app_polling.py", "app_changes.py", "app_commands.py", "change_toasts.py"}


def _app_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each `….app.<name>` and `app.<name>` read, and each getattr on the app."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            if (isinstance(base, ast.Attribute) and base.attr == "app") or (
                    isinstance(base, ast.Name) and base.id == "app"):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"}:
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Attribute) and target.attr == "app":
                found.append((node.lineno, f"{node.func.id}(app, …)"))
    return found


def test_screens_use_only_textuals_public_app_api_and_talk_to_the_console_app_in_messages() -> None:
    public = {n for n in (*dir(App), *vars(App())) if not n.startswith("_")}  # the class's and an instance's
    wrong = []
    for path in sorted(SCREENS.rglob("*.py")):
        if path.name in NOT_SCREENS and path.parent == SCREENS:
            continue
        for line, name in _app_uses(ast.parse(path.read_text(), str(path))):
            if name not in public:
                wrong.append(f"{path.relative_to(SCREENS)}:{line}: app.{name}")
    assert wrong == []


def test_the_boundary_check_sees_a_back_door() -> None:
    src = "def f(self):\n    self.app._plan_worker(1)\n    self.app.new_session()\n    getattr(self.app, 'x', 0)\n"
    assert sorted(name for _, name in _app_uses(ast.parse(src))) == ["_plan_worker", "getattr(app, …)", "new_session"]
