"""The fleet console (`nodeconsole --fleet URL`): every host that exports nodeconsole metrics to a
Prometheus, read back through its HTTP API (console/fleet.py) — GPUs by owner, unhealthy and degraded GPUs
(each host's own health verdict, with its reasons), misaligned
VMs, failing doctor checks and drift from the majority. The selected host's panel gives the command that
opens its own console (`ssh -t HOST nodeconsole`).

Prometheus is queried in a thread worker every `interval` seconds, never on the UI thread; a failed
query keeps the last answer on screen with the reason above it. Host text is plain text, never markup.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Footer, Static

from nodeconsole.console.hosttext import visible
from nodeconsole.screens.base import more_text
from nodeconsole.screens.widgets.hinted_scroll import put_hint
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import plain_text
from nodeconsole.themes import CSS_PATH, all_themes, resolve

COLS = [("host", "Host"), ("name", "Name"), ("gpus", "GPUs by owner"), ("bad", "Unhealthy"), ("worn", "Degraded"),
        ("vms", "Misaligned VMs"), ("checks", "Failing checks"), ("drift", "Drift")]
Report = dict[str, Any]


def host_rows(report: Report):
    for h in report["hosts"]:  # str cells are shown through the host-text boundary by KeyedTable
        owners = " ".join(f"{k}:{v}" for k, v in h["gpus_by_owner"].items()) or "-"
        drift = visible(", ".join(d["field"] for d in h["drift"]) or "-")
        bad, worn = (str(len(h[k]) or "-") for k in ("unhealthy_gpus", "degraded_gpus"))
        yield h["instance"], (h["instance"], h["hostname"] or "?", owners, bad, worn,
                              ", ".join(h["misaligned_vms"]) or "-", ", ".join(h["failing_checks"]) or "-",
                              Text(drift, style="bold yellow" if h["drift"] else ""))


def host_panel(report: Report, instance: str | None) -> str:
    h = next((h for h in report["hosts"] if h["instance"] == instance), None)
    if h is None:
        return ""
    v = h["versions"]
    lines = [f"{h['instance']} ({h['hostname'] or '?'}): driver {v['driver'] or '-'}, kernel {v['kernel'] or '-'}, "
             f"libvirt {v['libvirt'] or '-'}; MIG {', '.join(f'{p} {n}' for p, n in h['mig_layout'].items()) or 'none'}"]
    for g in h["unhealthy_gpus"]:
        lines.append(f"unhealthy GPU {g['index']} {g['address']}: {'; '.join(g['reasons'])}")
    for g in h["degraded_gpus"]:
        lines.append(f"degraded GPU {g['index']} {g['address']}: {'; '.join(g['reasons'])}")
    for g in h["drained_gpus"]:
        lines.append(f"drained GPU {g['index']} {g['address']}: no new work until `nodeconsole gpu undrain`")
    for d in h["drift"]:
        lines.append(f"drift: {d['field']} {d['value']} (majority {d['majority']})")
    if h["sources_down"]:
        lines.append(f"sources down: {', '.join(h['sources_down'])}")
    lines.append(f"open its console: {h['console'] or 'none (the instance names no ssh host)'}")
    return "\n".join(visible(line) for line in lines)  # a newline in a label is shown, not a new line


class FleetApp(App):
    TITLE = "nodeconsole fleet"
    CSS_PATH = CSS_PATH
    BINDINGS = [Binding("r", "refresh", "Refresh"), Binding("q", "quit", "Quit")]

    def __init__(self, report_fn: Callable[[], Report], source: str, interval: float = 15.0,
                 theme: str | None = None) -> None:
        super().__init__()
        self.report_fn, self.source, self.interval = report_fn, source, interval
        self.report: Report | None = None
        self.error = ""
        self.reads = 0
        self._theme_name = resolve(theme)

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-summary")
        yield KeyedTable(COLS, id="fleet-hosts")
        yield Static(id="fleet-hosts-more", classes="more")  # rows out of sight, when some are
        with VerticalScroll(id="fleet-panel-scroll"):
            yield Static(id="fleet-panel")
        yield Footer()

    def on_keyed_table_more(self, message: KeyedTable.More) -> None:
        put_hint(self, "fleet-hosts", more_text(message.above, message.below))

    def on_mount(self) -> None:
        for t in all_themes():
            self.register_theme(t)
        self.theme = self._theme_name
        self.query_one("#fleet-summary", Static).update(plain_text(f"reading {self.source}…"))
        self.action_refresh()
        self.set_interval(self.interval, self.action_refresh)

    @work(thread=True, exclusive=True, group="fleet", exit_on_error=False)
    def action_refresh(self) -> None:
        try:
            report = self.report_fn()
        except Exception as exc:  # Prometheus down or answering nonsense: keep the last answer, say why
            self.call_from_thread(self._failed, str(exc))
            return
        self.call_from_thread(self._show, report)

    def _failed(self, why: str) -> None:
        self.error = why
        self._render()

    def _show(self, report: Report) -> None:
        self.report, self.error = report, ""
        self.reads += 1
        self._render()

    def _render(self) -> None:
        summary = Text()
        if self.error:
            summary.append_text(plain_text(f"{self.source}: {self.error}", style="bold red"))
            summary.append("\n")
        if self.report is not None:
            hosts = self.report["hosts"]
            maj = self.report["majority"]
            drifted = sum(1 for h in hosts if h["drift"])
            summary.append_text(plain_text(
                f"{len(hosts)} host(s) in {self.source}; {drifted} drifted from the majority (driver "
                f"{maj.get('driver') or '-'}, kernel {maj.get('kernel') or '-'}); Enter: the host's details"))
            self.query_one("#fleet-hosts", KeyedTable).sync(host_rows(self.report))
            self._panel(self.query_one("#fleet-hosts", KeyedTable).selected_key())
        self.query_one("#fleet-summary", Static).update(summary)

    def _panel(self, instance: str | None) -> None:
        text = host_panel(self.report, instance) if self.report is not None else ""
        self.query_one("#fleet-panel", Static).update(plain_text(text))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None:
            self._panel(event.row_key.value)


def run_fleet(url: str, interval: float = 15.0, theme: str | None = None, timeout: float = 10.0) -> int:
    from nodeconsole.console.fleet import FleetError, check_url, fleet_report, http_fetch
    from nodeconsole.console.usage import UsageError

    try:
        base = check_url(url)
        resolve(theme)
    except (FleetError, ValueError) as e:
        raise UsageError(str(e).replace("--prometheus", "--fleet")) from None
    # a new fetch per report: `timeout` is the deadline of each whole report
    FleetApp(lambda: fleet_report(http_fetch(base, timeout=timeout)), base, interval=max(interval, 5.0),
             theme=theme).run()
    return 0
