"""Toasts of a change end with the change: the reproduction (a bare demo host, `7` Setup, `F` fix all,
Tab, Enter) left a step's progress toast ("[2/4] verify: Boot-time modules…") over the screen long after
the change. While a change runs one progress toast shows its current step; when it ends none is left,
neither among the app's notifications nor as a toast on the screen, and the summary toast replaces it."""
from __future__ import annotations

import re

from textual.widgets._toast import Toast

from nodeconsole.console.seams import demo_host, reset_demo
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.change_toasts import ChangeToasts
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.setup import SetupScreen
from tests.screens.helpers import wait_until

PROGRESS = re.compile(r"^\[\d+/\d+\] ")


def _progress(app) -> list[str]:
    """Progress messages still alive: among the app's notifications, and as toasts on the screen."""
    notes = [n.message for n in app._notifications if PROGRESS.match(n.message)]
    toasts = [t._notification.message for t in app.screen.query(Toast) if PROGRESS.match(t._notification.message)]
    return notes + toasts


async def test_no_progress_toast_outlives_the_change(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    reset_demo(bare=True)
    app = NodeConsoleApp(demo_host(), interval=0.3)
    seen: list[int] = []  # how many progress notifications there are after each step's report
    show = ChangeToasts.show

    def counting(self, text: str) -> None:
        show(self, text)
        seen.append(len([n for n in app._notifications if PROGRESS.match(n.message)]))

    monkeypatch.setattr(ChangeToasts, "show", counting)
    async with app.run_test(size=(100, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1, tries=200)
        await pilot.press("7")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SetupScreen) and app.screen.report is not None,
                                tries=200)
        await pilot.press("F")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        await pilot.press("tab", "enter")  # as the admin did: Tab to "Yes, apply", Enter

        assert await wait_until(pilot, lambda: bool(app.action_results), tries=600)
        result = app.action_results[0]
        assert result.ok, result.message
        assert await wait_until(pilot, lambda: any(n.message.startswith("doctor") for n in app._notifications))
        await pilot.pause(0.1)
        assert _progress(app) == []  # the change ended: its progress toasts with it
        summary = [n for n in app._notifications if n.message.startswith("doctor")]
        assert summary and summary[0].timeout == 10  # the outcome stays, with an ordinary timeout
        assert len(seen) >= 8 and set(seen) == {1}  # two reports per step; one step's toast at a time
