"""The Setup screen carries a bare demo host to ready: the doctor's checks in setup order, the cursor on
the next step, `F` plans every plannable fix at once (one plan, confirmed in the plan modal), the fixes
are marked pending until the (simulated) reboot, and the console started after the reboot opens at the
Setup screen, where every check passes or warns with its reason."""
from __future__ import annotations

from textual.widgets import Button, Static

from nodeconsole.console.seams import demo_host, reboot_demo, reset_demo
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.setup import SetupScreen
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until


def _report(app):
    screen = app.screen
    return screen.report if isinstance(screen, SetupScreen) else None


async def test_setup_screen_takes_a_bare_demo_to_ready_with_one_reboot(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    reset_demo(bare=True)
    app = NodeConsoleApp(demo_host(), interval=0.3)
    async with app.run_test(size=(100, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1, tries=200)
        assert app.current_mode == "overview"  # nothing was set up yet: the usual start
        shown = app.screen.query_one("#problems", Static).content
        problems = [t.plain for t in shown.renderables]
        assert any("[iommu] IOMMU is off" in p for p in problems), problems  # the Overview names the doctor's check…
        await pilot.press("s")  # …and `s` opens the Setup screen on it
        assert await wait_until(pilot, lambda: app.current_mode == "setup")
        assert await wait_until(pilot, lambda: _report(app) is not None, tries=200)
        screen = app.screen
        report = screen.report
        assert report.check("iommu").status == "fail" and report.check("nouveau").status == "fail"
        table = screen.query_one("#setup-steps", KeyedTable)
        assert table.selected_key() == "iommu"  # the first step not done, in setup order
        panel = str(screen.query_one("#setup-panel", Static).content)
        assert "Why it matters" in panel and "intel_iommu=on" in panel and "update-grub" in panel
        summary = str(screen.query_one("#setup-summary", Static).content)
        assert "reboot once" in summary

        await pilot.press("F")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        body = str(app.screen.query_one("#plan-body", Static).content)
        assert "/etc/default/grub" in body and "update-grub" in body
        app.screen.query_one("#yes", Button).press()  # a long plan: the button is below the fold
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=400)
        result = app.action_results[0]
        assert result.ok, result.message
        # the screen runs the doctor again after a change: the fixes now wait for the reboot
        assert await wait_until(pilot, lambda: _report(app) is not None and _report(app).check("iommu")
                                .pending.startswith("pending reboot"), tries=400)
        summary = str(app.screen.query_one("#setup-summary", Static).content)
        assert "Reboot the host" in summary

    reboot_demo()
    app = NodeConsoleApp(demo_host(), interval=0.3)
    async with app.run_test(size=(100, 40)) as pilot:
        # the console started after the reboot opens where the setup was left
        assert await wait_until(pilot, lambda: app.current_mode == "setup", tries=200)
        assert await wait_until(pilot, lambda: _report(app) is not None, tries=200)
        report = _report(app)
        bad = {c.id: c.finding for c in report.checks if c.status == "fail"}
        assert not bad, bad
        assert report.check("iommu").status == "pass"
        assert report.check("iommu").pending.startswith("took effect")
        warns = {c.id for c in report.checks if c.status == "warn"}
        assert warns <= {"acs", "pcie-link"}, warns  # hardware: explained, fixed by hand
        assert all(report.check(i).fix is not None for i in warns)


async def test_a_console_left_open_across_a_reboot_shows_the_new_boots_iommu(tmp_path, monkeypatch):
    """The top line's IOMMU state is one of the facts read once per boot: after `demo reboot` under a
    running console it follows the new boot (as the Setup screen's doctor does), not the cache of the last."""
    from nodeconsole.actions.session import ActionSession, DoctorFix

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    reset_demo(bare=True)
    session = ActionSession.from_seams(demo_host())
    plan = session.plan(DoctorFix(("iommu",)))
    result = session.apply(plan)
    assert result.ok, result.message
    app = NodeConsoleApp(demo_host(), interval=0.3)
    async with app.run_test(size=(160, 40)) as pilot:
        def top() -> str:
            return str(app.screen.query_one("#hostline", Static).content)

        assert await wait_until(pilot, lambda: app.polls >= 2 and "IOMMU OFF" in top(), tries=200), top()
        reboot_demo()
        assert await wait_until(pilot, lambda: "IOMMU on" in top(), tries=200), top()
        assert app.snapshot is not None and app.snapshot.iommu.enabled
