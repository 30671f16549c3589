"""The fleet console renders what console/fleet.py reports: one row per host, drift marked, the selected
host's details with the command that opens its own console; a failed read keeps the last answer and
says why."""
from __future__ import annotations

from textual.widgets import Static

from nodeconsole.screens.fleet import FleetApp
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until


def _host(instance: str, hostname: str, driver: str, drift: list, bad: list, vms: list, worn: list = (),
          drained: list = ()) -> dict:
    return {"instance": instance, "hostname": hostname,
            "versions": {"driver": driver, "kernel": "6.8.0-45-generic", "libvirt": ""},
            "gpus_by_owner": {"host": 3, "vfio": 2}, "unhealthy_gpus": bad, "degraded_gpus": list(worn),
            "drained_gpus": list(drained), "misaligned_vms": vms,
            "failing_checks": [], "mig_layout": {"3g.40gb": 1}, "sources_down": [], "drift": drift,
            "console": f"ssh -t {instance.split(':')[0]} nodeconsole"}


REPORT = {"majority": {"driver": "550.90.07", "kernel": "6.8.0-45-generic", "libvirt": None, "mig": "3g.40gb=1"},
          "hosts": [_host("node-a:9842", "gpu-a", "535.183.01",
                          [{"field": "driver", "value": "535.183.01", "majority": "550.90.07"}], [], []),
                    _host("node-b:9842", "gpu-b[bold]x", "550.90.07", [],
                          [{"address": "0000:18:00.0", "index": 0, "model": "H100", "state": "unhealthy",
                            "reasons": ["uncorrectable AER error (fatal) at 2026-12-02 09:58:45"]}], [],
                          [{"address": "0000:bb:00.0", "index": 7, "model": "H100", "state": "degraded",
                            "reasons": ["PCIe link x8 of x16"]}],
                          [{"address": "0000:ba:00.0", "index": 6, "model": "H100"}]),
                    _host("node-c:9842", "gpu-c", "550.90.07", [], [], ["train-b"])]}


async def test_fleet_rows_drift_and_the_console_command():
    answers = [REPORT, RuntimeError("Prometheus did not answer")]

    def report():
        got = answers.pop(0) if answers else REPORT
        if isinstance(got, Exception):
            raise got
        return got

    app = FleetApp(report, "http://prom:9090", interval=3600)
    async with app.run_test(size=(120, 30)) as pilot:
        assert await wait_until(pilot, lambda: app.reads == 1)
        table = app.query_one("#fleet-hosts", KeyedTable)
        assert [table.get_row_at(i)[0].plain for i in range(table.row_count)] == \
            ["node-a:9842", "node-b:9842", "node-c:9842"]
        assert table.get_row_at(0)[7].plain == "driver" and table.get_row_at(2)[5].plain == "train-b"
        assert [table.get_row_at(1)[i].plain for i in (3, 4)] == ["1", "1"]  # unhealthy, degraded
        assert table.get_row_at(1)[1].plain == "gpu-b[bold]x"  # host text, not markup
        panel = str(app.query_one("#fleet-panel", Static).content)
        assert "ssh -t node-a nodeconsole" in panel and "drift: driver 535.183.01 (majority 550.90.07)" in panel
        await pilot.press("down")
        await pilot.pause(0.1)
        panel = str(app.query_one("#fleet-panel", Static).content)
        assert "unhealthy GPU 0 0000:18:00.0: uncorrectable AER error (fatal) at 2026-12-02 09:58:45" in panel
        assert "degraded GPU 7 0000:bb:00.0: PCIe link x8 of x16" in panel and "ssh -t node-b nodeconsole" in panel
        assert "drained GPU 6 0000:ba:00.0: no new work until `nodeconsole gpu undrain`" in panel
        await pilot.press("r")  # the next read fails: the rows stay, the reason shows
        assert await wait_until(pilot, lambda: app.error != "")
        assert "Prometheus did not answer" in str(app.query_one("#fleet-summary", Static).content)
        assert table.row_count == 3


async def test_hostile_labels_are_shown_as_data_and_a_malformed_answer_as_the_reason():
    """Instances with brackets, a newline and an ssh option, through the real report builder: the rows
    and the panel show them as visible text, the ssh line is quoted or withheld; a malformed answer
    after that keeps the rows and shows the reason (no crash)."""
    from nodeconsole.console.fleet import AnswerError, fleet_report

    instances = ["-oproxycommand=touch pwned;x:9842", "evil\nnode:9842", "gpu[01]:9842"]
    info = [{"metric": {"instance": i, "hostname": "h\x1b]0;t\x07"}, "value": [0, "1"]} for i in instances]
    calls = {"n": 0}

    def report():
        calls["n"] += 1
        if calls["n"] > 1:
            raise AnswerError("the answer to 'nodeconsole_host_info', series 0: no label set (metric)")
        return fleet_report(lambda q: info if q == "nodeconsole_host_info" else [])

    app = FleetApp(report, "http://prom:9090", interval=3600)
    async with app.run_test(size=(140, 30)) as pilot:
        assert await wait_until(pilot, lambda: app.reads == 1)
        table = app.query_one("#fleet-hosts", KeyedTable)
        cells = [table.get_row_at(i)[0].plain for i in range(table.row_count)]
        assert "evil\\x0anode:9842" in cells and "gpu[01]:9842" in cells
        assert table.get_row_at(0)[1].plain == "h\\x1b]0;t\\x07"
        panels = []
        for _ in instances:
            panels.append(str(app.query_one("#fleet-panel", Static).content))
            await pilot.press("down")
            await pilot.pause(0.1)
        text = "\n".join(panels)
        assert "open its console: ssh -t 'gpu[01]' nodeconsole" in text
        assert "\x1b" not in text and "evil\\x0anode:9842 (h\\x1b]0;t\\x07)" in text
        assert text.count("open its console: none") == 2 and "ssh -t -o" not in text
        await pilot.press("r")
        assert await wait_until(pilot, lambda: app.error != "")
        assert "no label set" in str(app.query_one("#fleet-summary", Static).content)
        assert table.row_count == 3
