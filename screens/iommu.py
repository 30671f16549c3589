"""3 IOMMU: groups, their devices and drivers, and the passthrough verdict with its reason."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from console.model import HostSnapshot
from screens.base import SnapshotScreen
from screens.details import group_details
from screens.widgets.keyed_table import KeyedTable

COLS = [("id", "Group"), ("verdict", "Verdict"), ("devices", "Devices"), ("reason", "Reason")]


def group_rows(snap: HostSnapshot):
    gpu_addrs = {g.address for g in snap.gpus}
    for grp in sorted(snap.iommu.groups, key=lambda g: g.id):
        names = []
        for a in grp.devices:
            d = snap.pci(a)
            if d is not None and d.is_bridge:
                continue
            tag = "GPU " if a in gpu_addrs else ""
            names.append(f"{tag}{a}[{d.driver if d and d.driver else '-'}]")
        verdict = "viable" if grp.viable else "NOT viable"
        yield str(grp.id), (str(grp.id), verdict, " ".join(names), grp.reason)


class IommuScreen(SnapshotScreen):
    TITLE = "IOMMU"

    def compose_body(self) -> ComposeResult:
        yield Static(id="iommu-state")
        yield KeyedTable(COLS, id="groups")

    def render_snapshot(self, snap: HostSnapshot) -> None:
        state = self.query_one("#iommu-state", Static)
        if not snap.iommu.enabled:
            state.update(f"[b]IOMMU is OFF[/b]: no device can be passed through.\n{snap.iommu.how_to_enable}")
        else:
            bad = sum(1 for g in snap.iommu.groups if not g.viable)
            flags = " ".join(snap.iommu.cmdline_flags) or "none"
            state.update(f"IOMMU on, {len(snap.iommu.groups)} groups, {bad} not viable for passthrough; "
                         f"kernel flags: {flags}")
        self.query_one("#groups", KeyedTable).sync(group_rows(snap))

    def details_for(self, table, key):
        snap = self.app.snapshot
        grp = snap.group(int(key))
        return (f"IOMMU group {key}", group_details(snap, grp)) if grp else None
