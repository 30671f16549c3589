"""1 Overview: GPUs, VMs and the most important problems."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from nodeconsole.console.checks import vm_alignment
from nodeconsole.console.hosttext import LINE_MAX, show
from nodeconsole.console.model import HostSnapshot
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.widgets.details import gpu_details, vm_details
from nodeconsole.screens.widgets.gpu_text import link_text, memory_text, owner_text, short_name
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from nodeconsole.screens.widgets.text import metric, plain_text, severity_text, spark

GPU_COLS = [("idx", "#"), ("smi", "smi"), ("addr", "Address"), ("name", "Model"), ("owner", "Owner"), ("util", "Util"),
            ("mem", "Mem"), ("temp", "Temp"), ("link", "Link")]
VM_COLS = [("name", "VM"), ("state", "State"), ("vcpus", "vCPU"), ("cpu", "CPU%"), ("hist", "History"),
           ("numa", "NUMA"), ("gpus", "GPUs")]


def gpu_rows(snap: HostSnapshot):
    for g in snap.gpus:
        util = metric(g.utilization_gpu, "%")
        if g.owner.kind == "vfio":
            running = any(v.state == "running" and any(h.gpu == g.address for h in v.hostdevs) for v in snap.vms)
            util = "(in VM)" if running else "(vfio)"
        yield g.address, (str(g.index), g.smi, g.address, short_name(g.name), owner_text(g, 16),
                          util, memory_text(g), metric(g.temperature_c, "C"), link_text(g))


def vm_rows(snap: HostSnapshot, history: dict[str, list]):
    for v in snap.vms:
        align = vm_alignment(snap, v)
        mark = {"cross-numa": "✖ cross", "aligned": "ok", "unpinned": "unpinned"}.get(align, "")
        gpus = sorted({f"GPU{snap.gpu(h.gpu).index}" for h in v.hostdevs if h.gpu and snap.gpu(h.gpu)})
        yield v.name, (v.name, v.state, str(v.vcpus), metric(v.cpu_percent, "", 0),
                       spark(history.get(v.name, [])), mark, ",".join(gpus))


def host_info(snap: HostSnapshot) -> str:
    """Host, kernel, driver, IOMMU and the sources that are unavailable, with the reason."""
    h = snap.host
    parts = [show(h.hostname or "?"), f"kernel {show(h.kernel or '?')}",
             f"driver {show(snap.nvml_driver_version)}" if snap.nvml_driver_version else "no NVIDIA driver",
             "IOMMU on" if snap.iommu.enabled else "IOMMU OFF"]
    for n in ("sysfs", "nvml", "libvirt", "psutil"):
        v = getattr(snap.sources, n)
        if v not in ("ok", "pending"):
            parts.append(f"{n} {v}")
    return " · ".join(parts)


def pressure_line(snap: HostSnapshot) -> str:
    """One compact line per host: each NUMA node's CPU use, memory used of total and huge pages free,
    (free of total, by page size) and the VM with the most vCPU steal:
    `node0 cpu 33% mem 164/512G 1G 16/144 · … · steal max web-2 7.4%`."""
    parts = []
    for n in snap.load.nodes:
        pages = " ".join(f"{_page(h.size_kib)} {h.free}/{h.total}" for h in n.hugepages if h.total)
        parts.append(f"node{n.node} cpu {metric(n.cpu_percent, '%')} mem {n.memory_used_kib / 1048576:.0f}/"
                     f"{n.memory_total_kib / 1048576:.0f}G" + (f" {pages}" if pages else ""))
    stolen = [v for v in snap.vms if v.steal_percent is not None]
    if stolen:
        top = max(stolen, key=lambda v: v.steal_percent or 0.0)
        parts.append(f"steal max {show(top.name)} {top.steal_percent:.1f}%")
    return " · ".join(parts) or "host pressure: not read"


def one_line(text: str) -> Text:
    """Plain text on one line, cut with … where the screen ends."""
    t = Text(show(text, LINE_MAX), no_wrap=True, overflow="ellipsis")
    return t


def _page(kib: int) -> str:
    return f"{kib // 1048576}G" if kib >= 1048576 else f"{kib // 1024}M"


MORE_HINT = "GPUs (4), VMs (5) and Setup (s) screens"


def problems_view(problems, height: int = 7):
    """At most `height` lines: when the problems do not all fit, the last line says how many more
    there are and where to see them."""
    from rich.console import Group

    if not problems:
        return "nothing to report"
    height = max(1, height)
    shown = problems if len(problems) <= height else problems[:height - 1]
    items = []
    for p in shown:  # one line each, so several fit at 80x24 (Enter on a GPU/VM shows the whole text)
        # a problem the doctor covers names its check first: `s` opens the Setup screen on it (the
        # check, what was read and the fix)
        t = severity_text(p.severity, f"[{p.check}] {p.message}" if p.check else p.message)
        t.no_wrap, t.overflow = True, "ellipsis"
        items.append(t)
    if len(problems) > len(shown):
        more = severity_text("info", f"{len(problems) - len(shown)} more: {MORE_HINT}")
        more.no_wrap, more.overflow = True, "ellipsis"
        items.append(more)
    return Group(*items)


class ProblemList(Static):
    """The Overview's problems, as many as its height holds; the last line counts the rest."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.problems: tuple | None = None
        self._height = 0

    def show(self, problems) -> None:
        problems = tuple(problems)
        if problems != self.problems:
            self.problems = problems
            self._redraw()

    def on_resize(self) -> None:
        if self.content_size.height != self._height:
            self._redraw()

    def _redraw(self) -> None:
        if self.problems is None:
            return
        self._height = self.content_size.height
        self.update(problems_view(self.problems, self._height or 7))


class OverviewScreen(SnapshotScreen):
    TITLE = "Overview"
    BINDINGS = [Binding("s", "setup", "Setup")]

    def action_setup(self) -> None:
        """Open the Setup screen on the first problem's doctor check (the check's fix is there)."""
        snap = self.snapshot
        check = next((p.check for p in snap.problems if p.check), None) if snap is not None else None
        self.app.switch_mode("setup")
        if check:
            from nodeconsole.screens.setup import SetupScreen

            screen = self.app.screen
            if isinstance(screen, SetupScreen):
                screen.show_check(check)

    def compose_body(self) -> ComposeResult:
        yield Static(id="host-info")
        yield Static(id="pressure")
        yield Static("GPUs", classes="section", id="gpus-title")
        yield KeyedTable(GPU_COLS, id="gpus")
        yield Static("VMs", classes="section", id="vms-title")
        yield KeyedTable(VM_COLS, id="vms")
        yield Static("Problems", classes="section")
        yield ProblemList(id="problems")

    def render_snapshot(self, snap: HostSnapshot) -> None:
        info = host_info(snap)
        self.set_static("#host-info", lambda: plain_text(info, limit=LINE_MAX), info)
        pressure = pressure_line(snap)
        self.set_static("#pressure", lambda: one_line(pressure), pressure)
        counts = (len(snap.gpus), len(snap.vms))
        self.set_static("#gpus-title", lambda: f"GPUs ({counts[0]})", ("g", counts[0]))
        self.set_static("#vms-title", lambda: f"VMs ({counts[1]})", ("v", counts[1]))
        self.query_one("#gpus", KeyedTable).sync(gpu_rows(snap))
        self.query_one("#vms", KeyedTable).sync(vm_rows(snap, self.history))
        self.query_one("#problems", ProblemList).show(snap.problems)

    def details_for(self, table, key):
        snap = self.snapshot
        if snap is None:
            return None
        if table.id == "gpus" and snap.gpu(key):
            events = getattr(self.app.collector, "gpu_events", ())
            return f"GPU {snap.gpu(key).index} {key}", gpu_details(snap, snap.gpu(key), events)
        if table.id == "vms" and snap.vm(key):
            return f"VM {key}", vm_details(snap, snap.vm(key))
        return None
