"""1 Overview: GPUs, VMs and the most important problems."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static

from nodeconsole.console.hosttext import LINE_MAX, show, visible
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.xid import RESET_COMMAND
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.messages import PlanChange, ShowRow
from nodeconsole.screens.widgets.details import gpu_details, vm_details
from nodeconsole.screens.widgets.drain_text import owner_cell
from nodeconsole.screens.widgets.gpu_text import link_text, memory_text, short_name
from nodeconsole.screens.widgets.keyed_table import Col, KeyedTable
from nodeconsole.screens.widgets.sparks import Sparks
from nodeconsole.screens.widgets.text import SPARK_WIDTH, metric, plain_text, severity_text, spark
from nodeconsole.screens.widgets.vm_facts import VmFacts, facts_of

if TYPE_CHECKING:
    from nodeconsole.actions.session import Request

# priority: the columns that keep their full text longest when the terminal is narrow (keyed_table.py);
# a PCI address is never cut (its minimum width is its length)
GPU_COLS = [Col("idx", "#", 3), Col("smi", "smi", 1), Col("addr", "Address", 1, 12), Col("name", "Model", 2),
            Col("owner", "Owner", 2), Col("util", "Util", 1, 7), Col("mem", "Mem", 0, 6), Col("temp", "Temp"),
            Col("link", "Link", 0, 6)]  # x8/16↓: a downtrained link keeps its mark
VM_COLS = [Col("name", "VM", 3), Col("state", "State", 1), Col("vcpus", "vCPU", 1), Col("cpu", "CPU%", 1),
           Col("hist", "History", 0, 4, SPARK_WIDTH, keep_end=True), Col("numa", "NUMA", 1, 7), Col("gpus", "GPUs", 2)]


def gpu_rows(snap: HostSnapshot):
    for g in snap.gpus:
        util = metric(g.utilization_gpu, "%")
        if g.owner.kind == "vfio":
            running = any(v.state == "running" and any(h.gpu == g.address for h in v.hostdevs) for v in snap.vms)
            util = "(in VM)" if running else "(vfio)"
        yield g.address, (str(g.index), g.smi, g.address, short_name(g.name), owner_cell(g),
                          util, memory_text(g), metric(g.temperature_c, "C"), link_text(g))


_MARKS = {"cross-numa": "✖ cross", "aligned": "ok", "unpinned": "unpinned"}


def vm_rows(snap: HostSnapshot, history: Mapping[str, Sequence[float | None]], sparks: Sparks | None = None,
            facts: VmFacts | None = None, memo: dict[str, tuple] | None = None):
    """(name, cells) of each VM. `memo`: each VM's last row and what it was made from; an unchanged VM
    gets the very same row (the table then sees at once that nothing moved). With `facts`, a VM whose
    record and sparkline are the very objects of the last poll (the collector hands an unchanged VM on
    as it was) on an unchanged host gets its row without working anything out."""
    draw = sparks or (lambda _name, values: spark(values))
    facts_for = facts or facts_of
    host = facts.host(snap) if facts is not None else None
    kept = {} if memo is None else memo
    for v in snap.vms:
        bars = history.get(v.name, ())
        hit = kept.get(v.name)
        if hit is not None and hit[2] is v and hit[3] is bars and host is not None and hit[4] is host:
            yield v.name, hit[1]
            continue
        f = facts_for(snap, v)
        cpu = metric(v.cpu_percent, "", 0)
        made_of = (v.state, v.vcpus, cpu, bars, f)
        if hit is not None and hit[0] == made_of:
            kept[v.name] = (made_of, hit[1], v, bars, host)
            yield v.name, hit[1]
            continue
        row = (v.name, v.state, str(v.vcpus), cpu, draw(v.name, bars), _MARKS.get(f.alignment, ""), f.gpus)
        kept[v.name] = (made_of, row, v, bars, host)
        yield v.name, row


def host_info(snap: HostSnapshot) -> str:
    """Host, kernel, driver, IOMMU and the sources that are unavailable, with the reason."""
    h = snap.host
    parts = [show(h.hostname or "?"), f"kernel {show(h.kernel or '?')}",
             f"driver {show(snap.nvml_driver_version)}" if snap.nvml_driver_version else "no NVIDIA driver",
             "IOMMU on" if snap.iommu.enabled else "IOMMU OFF"]
    for n in ("sysfs", "nvml", "libvirt", "psutil"):
        v = getattr(snap.sources, n)
        if v.lost:
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


def one_line(text: str | Text) -> Text:
    """One line, cut with … where the screen ends: host text (a str) plain with visible escapes, or a
    Text the screen made."""
    t = text if isinstance(text, Text) else Text(show(text, LINE_MAX))
    t.no_wrap, t.overflow = True, "ellipsis"
    return t


def _page(kib: int) -> str:
    return f"{kib // 1048576}G" if kib >= 1048576 else f"{kib // 1024}M"


MORE_HINT = "Tab to the list, j/k scroll, Enter details, f goes to the fix"


def fix_target(snap: HostSnapshot, p) -> tuple[str, str, str] | None:
    """Where a problem is fixed: (mode, key, label). A problem the doctor covers: the Setup screen on
    its check (the check, what was read and the fix); about a GPU: the GPUs screen on that GPU (its
    actions); about a VM: the VMs screen on that VM (pinning)."""
    if getattr(p, "check", ""):
        return ("setup", p.check, f"Setup, check {p.check}")
    subject = getattr(p, "subject", "")
    g = snap.gpu(subject) if subject else None
    if g is not None:
        return ("gpus", g.address, f"GPUs screen, GPU {g.index}")
    if subject and snap.vm(subject) is not None:
        return ("vms", subject, f"VMs screen, VM {show(subject)}")
    return None


def reset_request(snap: HostSnapshot, p) -> Request | None:
    """The GPU reset a problem's advice offers (`nodeconsole gpu reset ADDR`: the VM holding the GPU stopped
    and started around it), as a request; None when its advice offers none."""
    subject = getattr(p, "subject", "")
    if subject and snap.gpu(subject) is not None and f"{RESET_COMMAND} {subject}" in (getattr(p, "fix", "") or ""):
        from nodeconsole.actions.session import Reset

        return Reset(subject)
    return None


def problem_details(p, target: str | None) -> str:
    """The whole problem, its fix and where the console fixes it (the details modal's body)."""
    lines = [p.message, "", f"fix: {getattr(p, 'fix', '') or 'no fix known'}"]
    if getattr(p, "check", ""):
        lines.append(f"doctor check: {p.check} (nodeconsole doctor; the Setup screen, s)")
    if f"{RESET_COMMAND} " in (getattr(p, "fix", "") or ""):
        lines.append("f on the Overview plans that reset")
    elif target:
        lines.append(f"f on the Overview opens the {target}")
    return "\n".join(lines)


def problems_fit(n: int, height: int) -> tuple[int, int]:
    """(lines per problem, problems shown) for `n` problems in `height` lines: two lines each (the fix
    below) when all fit or the view has 8 lines, else one; the last line counts the rest when cut."""
    height = max(1, height)
    per = 2 if 2 * n <= height or height >= 8 else 1
    return per, (n if per * n <= height else (height - 1) // per)


def problems_view(problems, height: int = 7, cursor: int = -1, top: int = 0, targets=()):
    """At most `height` lines from problem `top` on: each problem, and on a dim line below it its fix and
    where `f` goes, when that fits (all of them, or at least four); else one line each. When the
    problems do not all fit, the last line says how many more there are and how to see them. The
    problem at `cursor` is highlighted. Returns the renderable (the top problem is `top_of(...)`)."""
    from rich.console import Group

    if not problems:
        return "nothing to report"
    height, n = max(1, height), len(problems)
    per, count = problems_fit(n, height)
    top = top_of(n, count, cursor, top)
    items = []
    for i in range(top, top + count):
        p = problems[i]
        # a problem the doctor covers names its check first: `s` or `f` opens the Setup screen on it
        t = one_line(severity_text(p.severity, f"[{p.check}] {p.message}" if p.check else p.message))
        if i == cursor:
            t.stylize("reverse")
        items.append(t)
        if per == 2:
            target = targets[i] if i < len(targets) else None
            fix = getattr(p, "fix", "") or "no fix known"
            line = Text("  ↳ fix: ", style="dim")
            line.append(visible(fix), style="dim")
            if target:
                line.append(f"  · f: {target}", style="dim italic")
            items.append(one_line(line))
    if count < n:
        items.append(one_line(severity_text("info", f"{n - count} more: {MORE_HINT}")))
    return Group(*items)


def top_of(n: int, count: int, cursor: int, top: int) -> int:
    """The first problem shown, `count` at a time: `top`, moved just enough to show the cursor."""
    if cursor >= 0:
        top = min(top, cursor)
        top = max(top, cursor - count + 1)
    return max(0, min(top, n - count))


class ProblemList(Static, can_focus=True):
    """The Overview's problems, as many as its height holds; the last line counts the rest. Focused
    (Tab), j/k move the highlight, Enter opens the problem with its fix, f goes where it is fixed."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "move(1)", "Down", show=False),
        Binding("k,up", "move(-1)", "Up", show=False),
        Binding("pagedown", "move(5)", "Page down", show=False),
        Binding("pageup", "move(-5)", "Page up", show=False),
        Binding("g,home", "move(-100000)", "First", show=False),
        Binding("G,end", "move(100000)", "Last", show=False),
        Binding("enter", "open", "Details", show=False),
    ]

    class Open(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.problems: tuple | None = None
        self.targets: tuple = ()
        self.cursor = 0
        self._top = 0
        self._height = 0

    def show(self, problems, targets=()) -> None:
        problems, targets = tuple(problems), tuple(targets)
        if problems != self.problems or targets != self.targets:
            # the highlight stays on its problem when others come or go before it (a kernel event's
            # problem is put first), else on the same place
            was = self.problems[self.cursor] if self.problems and self.cursor < len(self.problems) else None
            self.problems, self.targets = problems, targets
            self.cursor = problems.index(was) if was in problems else min(self.cursor, max(0, len(problems) - 1))
            self._redraw()

    def selected(self) -> int | None:
        """The highlighted problem; the first while the list is not focused (no highlight shown)."""
        if not self.problems:
            return None
        return self.cursor if self.has_focus else 0

    def on_resize(self) -> None:
        if self.content_size.height != self._height:
            self._redraw()

    def on_focus(self) -> None:
        self._redraw()

    def on_blur(self) -> None:
        self._redraw()

    def action_move(self, step: int) -> None:
        if self.problems:
            self.cursor = max(0, min(len(self.problems) - 1, self.cursor + step))
            self._redraw()

    def action_open(self) -> None:
        if self.problems:
            self.post_message(self.Open(self.cursor))

    def _redraw(self) -> None:
        if self.problems is None:
            return
        self._height = self.content_size.height
        height = self._height or 7
        cursor = self.cursor if self.has_focus else -1
        view = problems_view(self.problems, height, cursor, self._top, self.targets)
        if not isinstance(view, str):
            _, count = problems_fit(len(self.problems), height)
            self._top = top_of(len(self.problems), count, cursor, self._top)
        self.update(view)


class OverviewScreen(SnapshotScreen):
    TITLE = "Overview"
    BINDINGS = [Binding("s", "setup", "Setup"), Binding("f", "fix", "Fix")]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._more: dict[str, tuple[int, int]] = {}  # table id -> rows (above, below) out of sight
        self._problems: tuple | None = None
        self._targets: tuple = ()
        self._sparks = Sparks()
        self._facts = VmFacts()
        self._vm_rows: dict[str, tuple] = {}

    def action_setup(self) -> None:
        """Open the Setup screen on the first problem's doctor check (the check's fix is there)."""
        snap = self.snapshot
        check = next((p.check for p in snap.problems if p.check), None) if snap is not None else None
        self._go("setup", check)

    def action_fix(self) -> None:
        """Go where the highlighted problem (the first, until the list is focused) is fixed: the Setup
        screen on its doctor check, the GPUs screen on its GPU or the VMs screen on its VM."""
        snap = self.snapshot
        if snap is None or not snap.problems:
            self.app.notify("no problem to fix", timeout=3)
            return
        i = self.query_one("#problems", ProblemList).selected() or 0
        if (request := reset_request(snap, snap.problems[i])) is not None:
            self.app.post_message(PlanChange(request))  # the advice's one-plan recovery: its plan modal
            return
        target = fix_target(snap, snap.problems[i])
        if target is None:
            self.app.notify(f"no screen fixes this one: {snap.problems[i].fix or 'no fix known'}", timeout=6)
            return
        self._go(target[0], target[1])

    def _go(self, mode: str, key: str | None) -> None:
        self.app.post_message(ShowRow(mode, key))

    def on_problem_list_open(self, message: ProblemList.Open) -> None:
        snap = self.snapshot
        if snap is None or message.index >= len(snap.problems):
            return
        from nodeconsole.screens.modals.details import DetailsModal

        p = snap.problems[message.index]
        target = fix_target(snap, p)
        self.app.push_screen(DetailsModal("Problem", problem_details(p, target[2] if target else None)))

    def compose_body(self) -> ComposeResult:
        yield Static(id="host-info")
        yield Static(id="pressure")
        yield Static("GPUs", classes="section", id="gpus-title")
        yield KeyedTable(GPU_COLS, id="gpus")
        with Vertical(id="overview-lower"):
            yield Static("VMs", classes="section", id="vms-title")
            yield KeyedTable(VM_COLS, id="vms")
            yield Static("Problems", classes="section", id="problems-title")
            yield ProblemList(id="problems")

    def render_snapshot(self, snap: HostSnapshot) -> None:
        info = host_info(snap)
        self.set_static("#host-info", lambda: plain_text(info, limit=LINE_MAX), info)
        pressure = pressure_line(snap)
        self.set_static("#pressure", lambda: one_line(pressure), pressure)
        self.query_one("#gpus", KeyedTable).sync(gpu_rows(snap))
        self._sparks.keep(len(snap.vms))
        if len(self._vm_rows) > 2 * len(snap.vms) + 64:  # VMs gone
            self._vm_rows.clear()
        self.query_one("#vms", KeyedTable).sync(vm_rows(snap, self.history, self._sparks, self._facts,
                                                        self._vm_rows))
        self._titles()
        if snap.problems != self._problems:  # where each problem is fixed: worked out when they change
            self._problems = snap.problems
            self._targets = tuple((t[2] if t else None) for t in (fix_target(snap, p) for p in snap.problems))
        self.query_one("#problems", ProblemList).show(snap.problems, self._targets)

    def _titles(self) -> None:
        """Each section's title counts its rows; a table cut short says how many more and how to see them."""
        snap = self.snapshot
        if snap is None:
            return
        for tid, name, count, screen in (("gpus", "GPUs", len(snap.gpus), "4"), ("vms", "VMs", len(snap.vms), "5")):
            above, below = self._more.get(tid, (0, 0))
            title = f"{name} ({count})"
            if above or below:
                title += f" · {above + below} more: Tab to the table, j/k scroll; {screen} lists them all"
            self.set_static(f"#{tid}-title", lambda t=title: one_line(Text(t)), title)
        n = len(snap.problems)
        self.set_static("#problems-title", lambda: f"Problems ({n})", ("p", n))

    def on_keyed_table_more(self, message: KeyedTable.More) -> None:
        self._more[message.table.id or ""] = (message.above, message.below)
        self._titles()

    def details_for(self, table: KeyedTable, key: str) -> tuple[str, str] | None:
        snap = self.snapshot
        if snap is None:
            return None
        if table.id == "gpus" and (g := snap.gpu(key)) is not None:
            return f"GPU {g.index} {key}", gpu_details(snap, g)
        if table.id == "vms" and (v := snap.vm(key)) is not None:
            return f"VM {key}", vm_details(snap, v)
        return None
