"""5 VMs: live load with history, vCPU pins drawn against host CPUs, emulator pins, memory policy,
hostdevs; VMs whose vCPUs sit on another NUMA node than their GPU are marked."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from nodeconsole.console.checks import vm_alignment
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.hosttext import show
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.topology import vm_gpus, vm_paths
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.messages import VmSelected
from nodeconsole.screens.overview import one_line, pressure_line
from nodeconsole.screens.pin_view import rebalance_map
from nodeconsole.screens.widgets.cpu_map import cpu_map
from nodeconsole.screens.widgets.details import vm_details
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable
from nodeconsole.screens.widgets.sparks import Sparks
from nodeconsole.screens.widgets.text import SPARK_WIDTH, metric, spark
from nodeconsole.screens.widgets.vm_facts import VmFacts, facts_of

COLS = [Col("name", "VM", 3), Col("state", "State", 1), Col("vcpus", "vCPU", 1), Col("cpu", "CPU%", 1),
        Col("steal", "Steal"), Col("hist", "History", 0, 4, SPARK_WIDTH, keep_end=True), Col("pins", "Pinned to", 2),
        Col("numa", "NUMA", 1, 7), Col("hostdevs", "Devs")]


def vm_rows(snap: HostSnapshot, history, sparks: Sparks | None = None, facts: VmFacts | None = None):
    draw = sparks or (lambda _name, values: spark(values))
    facts_for = facts or facts_of
    for v in snap.vms:
        f = facts_for(snap, v)
        mark = {"cross-numa": "✖ CROSS", "aligned": "ok", "unpinned": "unpinned"}.get(f.alignment, "")
        yield v.name, (v.name, v.state, str(v.vcpus), metric(v.cpu_percent), metric(v.steal_percent, "", 1),
                       draw(v.name, history.get(v.name, ())),
                       f.pins or "-", mark, str(len(v.hostdevs)))


def vm_panel(snap: HostSnapshot, name: str | None):
    v = snap.vm(name) if name else None
    if v is None:
        return Text("select a VM")
    head = Text(f"{show(v.name)}  {show(v.state)}  {v.memory_kib / 1048576:.0f} GiB  memory policy {v.numa_mode or 'none'} "
                f"{format_cpulist(v.numa_nodeset)}  emulator {format_cpulist(v.emulator_pins) or '-'}",
                style="bold")
    if vm_alignment(snap, v) == "cross-numa":
        head.append("  ✖ vCPUs not on the GPU's NUMA node", style="bold red")
    paths = vm_paths(snap, v)
    gpus = Text("GPUs: " + (", ".join(f"GPU{g.index} (smi {g.smi}, node {'-' if g.numa_node is None else g.numa_node})"
                                     for g in vm_gpus(snap, v)) or "-")
                + ("  paths: " + ", ".join(f"{p.a}↔{show(p.b)} {p.level}" for p in paths) if paths else ""))
    devs = Text("hostdevs: " + (", ".join(
        show(h.address or h.uuid or "?") + (f"→GPU{hg.index}" if h.gpu and (hg := snap.gpu(h.gpu)) is not None else "")
        for h in v.hostdevs) or "-"))
    return Group(head, gpus, devs, cpu_map(snap, v))


class VmsScreen(SnapshotScreen):
    TITLE = "VMs"
    SELECTION_TABLE = "vm-table"
    SELECTION = VmSelected

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._sparks = Sparks()
        self._facts = VmFacts()

    def compose_body(self) -> ComposeResult:
        yield KeyedTable(COLS, id="vm-table")
        yield Static(id="vm-table-more", classes="more")  # rows out of sight, when some are
        with VerticalScroll(id="vm-panel-scroll"):
            yield Static(id="vm-pressure")
            yield Static(id="vm-panel")
            yield Static(id="vm-rebalance")

    def render_snapshot(self, snap: HostSnapshot) -> None:
        table = self.query_one("#vm-table", KeyedTable)
        self._sparks.keep(len(snap.vms))
        table.sync(vm_rows(snap, self.history, self._sparks, self._facts))
        key = table.selected_key()
        pressure = pressure_line(snap)
        self.set_static("#vm-pressure", lambda: one_line(pressure), pressure)
        # the CPU map depends on every VM's pins, not on their load
        pins = tuple((v.name, v.state, v.pins, v.emulator_pins, v.hostdevs, v.numa_mode) for v in snap.vms)
        self.set_static("#vm-panel", lambda: vm_panel(snap, key), (key, pins))
        self.set_static("#vm-rebalance", lambda: rebalance_map(snap), pins)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        snap = self.snapshot
        if snap is not None and event.row_key is not None:
            self.forget_static("#vm-panel")
            self.query_one("#vm-panel", Static).update(vm_panel(snap, event.row_key.value))

    def details_for(self, table, key):
        snap = self.snapshot
        if snap is None:
            return None
        v = snap.vm(key)
        return (f"VM {key}", vm_details(snap, v)) if v else None
