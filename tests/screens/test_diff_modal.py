"""The console's "Diff against a capture…" (palette): the path of a capture taken earlier, then the list of
what changed on the host since, as `nodeconsole diff FILE --live` gives it, in plain text."""
from __future__ import annotations

import contextlib
import io

from textual.widgets import Input, Static

from nodeconsole.actions.cli import main
from nodeconsole.console.capture.take import take_capture
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.diff import DiffModal
from tests.screens.helpers import wait_until


async def test_diff_against_a_capture_lists_what_changed_since(demo_seams, tmp_path):
    archive = tmp_path / "before.tar.gz"
    archive.write_bytes(take_capture(demo_seams).data)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["passthrough", "4", "--vm", "build-1", "--demo", "--apply", "--yes"]) == 0
    app = NodeConsoleApp(demo_seams, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.snapshot is not None)
        (command,) = [c for c in app.get_system_commands(app.screen) if c.title == "Diff against a capture…"]
        command.callback()
        assert await wait_until(pilot, lambda: isinstance(app.screen, DiffModal))
        modal = app.screen
        status = modal.query_one("#diff-status", Static)
        # a path that is not there: said, the dialog stays open
        modal.query_one("#diff-path", Input).value = str(tmp_path / "missing.tar.gz")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: "missing.tar.gz: no such file" in str(status.render()))
        modal.query_one("#diff-path", Input).value = str(archive)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: modal.result is not None, tries=200)
        assert str(status.render()) == "8 changes"
        body = modal.query_one("#diff-body", Static).render()
        text = body.plain if hasattr(body, "plain") else str(body)
        assert "  GPU 4 0000:9a:00.0 driver: nvidia → vfio-pci" in text
        assert "  build-1 hostdevs: +pci 0000:9a:00.0, +pci 0000:9a:00.1" in text
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, DiffModal))
