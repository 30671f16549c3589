"""3 IOMMU: groups, their devices and drivers, and the passthrough verdict with its reason."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from nodeconsole.console.hosttext import show
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.widgets.details import group_details
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable
from nodeconsole.screens.widgets.text import plain_text

COLS = [Col("id", "Group", 3), Col("verdict", "Verdict", 3), Col("devices", "Devices [driver]", 1)]


def _members(snap: HostSnapshot, grp) -> list[str]:
    gpu_addrs = {g.address for g in snap.gpus}
    names = []
    for a in grp.devices:
        d = snap.pci(a)
        if d is not None and d.is_bridge:
            continue  # bridges never block passthrough; they are listed in the details
        tag = "GPU " if a in gpu_addrs else ""
        # an unbound device says so: a bare "-" reads as a value that could not be read
        names.append(f"{tag}{a}[{show(d.driver) if d and d.driver else 'no driver'}]")
    return names


def group_rows(snap: HostSnapshot):
    """Groups with at least one endpoint, the non-viable ones first, then by id."""
    groups = [g for g in snap.iommu.groups if _members(snap, g)]
    for grp in sorted(groups, key=lambda g: (g.viable, g.id)):
        verdict = "viable" if grp.viable else "✖ NOT viable"
        # plain Text (not a str, which the table would cap short): `addr[driver]` is data, not markup
        yield str(grp.id), (str(grp.id), verdict, Text(" ".join(_members(snap, grp))))


class IommuScreen(SnapshotScreen):
    TITLE = "IOMMU"

    def compose_body(self) -> ComposeResult:
        yield Static(id="iommu-state")
        yield KeyedTable(COLS, id="groups")
        yield Static(id="groups-more", classes="more")  # rows out of sight, when some are
        with VerticalScroll(id="group-panel-scroll"):
            yield Static(id="group-panel")

    def render_snapshot(self, snap: HostSnapshot) -> None:
        state = self.query_one("#iommu-state", Static)
        if not snap.iommu.enabled:
            off = Text("IOMMU is OFF", style="bold")
            off.append_text(plain_text(f": no device can be passed through.\n{snap.iommu.how_to_enable}"))
            state.update(off)
        else:
            bad = sum(1 for g in snap.iommu.groups if not g.viable)
            flags = " ".join(snap.iommu.cmdline_flags) or "none"
            bridges = sum(1 for g in snap.iommu.groups if not _members(snap, g))
            state.update(plain_text(f"IOMMU on: {len(snap.iommu.groups)} groups, {bad} not viable for passthrough "
                                    f"({bridges} bridge-only groups not listed); kernel flags: {flags}"))
        table = self.query_one("#groups", KeyedTable)
        table.sync(group_rows(snap))
        self._show_group(snap, table.selected_key())

    def _show_group(self, snap: HostSnapshot, key: str | None) -> None:
        grp = snap.group(int(key)) if key else None
        text = f"group {grp.id}: " + group_details(snap, grp) if grp else ""
        self.set_static("#group-panel", lambda: plain_text(text), text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.snapshot is not None and event.row_key is not None:
            self._show_group(self.snapshot, event.row_key.value)

    def details_for(self, table, key):
        snap = self.snapshot
        if snap is None:
            return None
        grp = snap.group(int(key))
        return (f"IOMMU group {key}", group_details(snap, grp)) if grp else None
