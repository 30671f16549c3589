"""4 GPUs: ownership, MIG state with the slice bar, vGPU types and instances, processes, health."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from nodeconsole.console.hosttext import LINE_MAX, show, visible
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.messages import GpuSelected
from nodeconsole.screens.widgets.details import gpu_details
from nodeconsole.screens.widgets.drain_text import drain_text, owner_cell
from nodeconsole.screens.widgets.gpu_text import (
    clocks_text,
    ecc_text,
    fabric_text,
    gpu_group_text,
    link_text,
    nvlink_text,
    owner_text,
)
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable
from nodeconsole.screens.widgets.slice_bar import slice_bar
from nodeconsole.screens.widgets.text import metric

COLS = [Col("idx", "#", 3), Col("smi", "smi", 1), Col("addr", "Address", 1, 12), Col("owner", "Owner", 2),
        Col("mig", "MIG", 2), Col("vgpu", "vGPU"), Col("ecc", "ECC v/a"), Col("proc", "Procs"), Col("link", "Link", 0, 6)]


def mig_text(g) -> str:
    m = g.mig
    if m.mode == "enabled" or m.pending_mode == "enabled":
        pend = "" if m.pending_mode == m.mode else f"→{m.pending_mode}"
        return f"{m.mode}{pend} {len(m.instances)}GI"
    return m.mode if m.mode != "disabled" else "off"


def gpu_rows(snap: HostSnapshot):
    for g in snap.gpus:
        yield g.address, (str(g.index), g.smi, g.address, owner_cell(g), mig_text(g),
                          str(len(g.vgpu.instances)) if g.vgpu.instances or g.vgpu.types else "-",
                          ecc_text(g), str(len(g.processes)), link_text(g))


def gpu_panel(snap: HostSnapshot, address: str | None):
    g = snap.gpu(address) if address else None
    if g is None:
        return Text("select a GPU")
    # host text (names, drivers, VMs, processes) is plain Text with visible escapes, each value capped at
    # LINE_MAX (the panel has the screen's width: NVLink errors, owners and MIG UUIDs in full)
    parts: list = [Text(f"GPU {g.index} (nvidia-smi {g.smi}) {g.address}  {show(g.name, LINE_MAX)}  owner "
                        f"{show(owner_text(g), LINE_MAX)}", style="bold"), health_text(g)]
    parts[1:1] = [t for t in (drain_text(g),) if t is not None]  # drained before the health verdict
    parts += event_lines(g)
    if g.nvml_index is None:
        parts.append(Text(f"NVML does not see it (driver {show(g.driver or 'none', LINE_MAX)}): identity and link from sysfs"))
    if g.mig.mode in ("enabled",) or g.mig.pending_mode == "enabled":
        parts.append(Text(f"MIG {g.mig.mode} (pending {g.mig.pending_mode})"))
        parts.append(slice_bar(g.mig))
        for i in g.mig.instances:
            parts.append(Text(f"  {show(i.profile, LINE_MAX):9} slices {i.start}-{i.start + i.size - 1}  util N/A  "
                              f"{show(i.uuid or '-', LINE_MAX)}  VM {show(i.vm or '-', LINE_MAX)}"))
    if g.vgpu.types or g.vgpu.instances:
        avail = ", ".join(f"{show(t.name, LINE_MAX)} ({metric(t.available)} free)" for t in g.vgpu.types[:4])
        parts.append(Text(f"vGPU types: {avail or '-'}"))
        for v in g.vgpu.instances:
            parts.append(Text(f"  vGPU {show(v.type_name, LINE_MAX)} {show(v.uuid, LINE_MAX)} "
                              f"→ VM {show(v.vm or '-', LINE_MAX)}"))
    if g.processes:
        parts.append(Text("processes: " + ", ".join(f"{p.pid} {show(p.name, LINE_MAX)} {metric(p.used_memory_mib)}MiB"
                                                    for p in g.processes)))
    if g.nvml_index is not None:
        parts.append(Text(f"clocks {clocks_text(g)}  PCIe replays {metric(g.pcie_replay_count)}"))
        parts.append(Text(f"NVLink {show(nvlink_text(g), LINE_MAX)}  fabric {show(fabric_text(g), LINE_MAX)}"))
    parts.append(Text(f"ECC uncorrected {metric(g.ecc_volatile_uncorrected)} (lifetime "
                      f"{metric(g.ecc_aggregate_uncorrected)}) corrected {metric(g.ecc_volatile_corrected)} "
                      f"(lifetime {metric(g.ecc_aggregate_corrected)})  retired pages "
                      f"{metric(g.retired_pages)}  remapped rows pending {metric(g.remapped_rows_pending)} "
                      f"failed {metric(g.remapped_rows_failure)}  temp {metric(g.temperature_c, 'C')}  "
                      f"power {metric(g.power_w, 'W')}"))
    group = gpu_group_text(snap, g)
    if group:
        parts.append(Text(visible(group)))
    return Group(*parts)


HEALTH_STYLE = {"healthy": "green", "degraded": "yellow", "unhealthy": "bold red"}
PANEL_EVENTS = 5  # the newest events the panel lists (Enter shows more)


def health_text(g) -> Text:
    """The GPU's health verdict (console/health.py) and its reasons."""
    t = Text("health ")
    t.append(g.health.state, style=HEALTH_STYLE.get(g.health.state, ""))
    if g.health.reasons:
        t.append(": " + show("; ".join(g.health.reasons), LINE_MAX))
    return t


def event_lines(g) -> list[Text]:
    """The GPU's newest events, newest first, each with its local time, the VM and the first action."""
    mine = g.events[-PANEL_EVENTS:]
    if not mine:
        return []
    out = [Text(f"events ({len(g.events)}, newest first):")]
    for ev in reversed(mine):
        out.append(Text(f"  {ev.when}  {ev.what} {ev.severity}  VM {show(ev.vm or '-', LINE_MAX)}  "
                        f"{show(ev.text, LINE_MAX)}  → {ev.action}"))
    return out


class GpusScreen(SnapshotScreen):
    TITLE = "GPUs"
    SELECTION_TABLE = "gpu-table"
    SELECTION = GpuSelected

    def compose_body(self) -> ComposeResult:
        yield KeyedTable(COLS, id="gpu-table")
        yield Static(id="gpu-table-more", classes="more")  # rows out of sight, when some are
        with VerticalScroll(id="gpu-panel-scroll"):
            yield Static(id="gpu-panel")

    def render_snapshot(self, snap: HostSnapshot) -> None:
        table = self.query_one("#gpu-table", KeyedTable)
        table.sync(gpu_rows(snap))
        key = table.selected_key()
        g = snap.gpu(key) if key else None
        self.set_static("#gpu-panel", lambda: gpu_panel(snap, key), (key, g, snap.group(g.iommu_group) if g else None))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        snap = self.snapshot
        if snap is not None and event.row_key is not None:
            self.forget_static("#gpu-panel")
            self.query_one("#gpu-panel", Static).update(gpu_panel(snap, event.row_key.value))

    def details_for(self, table, key):
        snap = self.snapshot
        if snap is None:
            return None
        g = snap.gpu(key)
        return (f"GPU {g.index} {key}", gpu_details(snap, g)) if g else None
