"""The VMs screen's `P`: prepare the selected VM for training. A small form (GPU count, a NIC VF beside
each GPU, memory as a factor of the GPUs' VRAM) with `place`'s recommendation for that VM under it (the
GPUs, NUMA node, vCPUs, memory and hugepages, or what stands in the way), worked out again off the UI
thread whenever a field changes. Enter hands back the answer (`PrepareChoice`); the app plans
`Prepare` from it, shows the plan and applies it as every change. Esc: None, nothing planned.

The modal reads nothing itself: `placer(count, with_nic, memory_factor)` (made by the app, run here in a
thread worker) gives the recommendation.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Static

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.hosttext import LINE_MAX, show, visible

MAX_GPUS = 64
Placer = Callable[[int, bool, float], Any]  # count, with_nic, memory_factor → actions/placement.Placement


@dataclass(frozen=True)
class PrepareChoice:
    count: int
    with_nic: bool
    memory_factor: float


def parse_fields(count: str, factor: str) -> tuple[int, float] | str:
    """The form's numbers, or one line saying what is wrong with them."""
    try:
        n = int(count.strip())
    except ValueError:
        return f"GPU count: a whole number from 0 to {MAX_GPUS}, not {show(count, 20)!r}"
    if not 0 <= n <= MAX_GPUS:
        return f"GPU count: a whole number from 0 to {MAX_GPUS}, not {n}"
    try:
        f = float(factor.strip())
    except ValueError:
        return f"memory factor: a number above 0 (2 means twice the GPUs' VRAM), not {show(factor, 20)!r}"
    if not math.isfinite(f) or not 0 < f <= 64:
        return f"memory factor: a number above 0 and at most 64, not {show(factor, 20)}"
    return n, f


def _gib(kib: int) -> str:
    gib = kib / 1048576
    return f"{gib:.0f} GiB" if gib == int(gib) else f"{gib:.1f} GiB"


def _pages_line(p: Any) -> Text:
    pages = p.hugepages
    if not pages.size_kib:
        return Text("memory not backed by hugepages")
    size = "1 GiB" if pages.size_kib == 1048576 else f"{pages.size_kib // 1024} MiB"
    need = ", ".join(f"node {n} needs {k}, {pages.free.get(n, 0)} free" for n, k in sorted(pages.per_node.items()))
    short = any(k > pages.free.get(n, 0) for n, k in pages.per_node.items())
    t = Text(f"{size} hugepages: {need}")
    if short:
        t.append("  (the plan reserves the rest)", style="yellow")
    return t


def placement_text(p: Any, labels: Mapping[str, str] | None = None) -> Text:
    """`place`'s recommendation as the form shows it (`labels`: a GPU address → its console name, e.g.
    "GPU 8"); host text made visible, never markup."""
    names = labels or {}
    t = Text()
    if not p.ok:
        t.append("cannot place: ", style="bold red")
        t.append(show(p.refusal, LINE_MAX * 2))
        for r in p.reasons:
            t.append(f"\n· {show(r, LINE_MAX)}", style="dim")
        return t
    t.append("GPUs: ", style="bold")
    t.append(", ".join(f"{names[a]} ({visible(a)})" if a in names else visible(a) for a in p.gpus) or "none")
    if p.nics:
        t.append("\nNIC VFs: ", style="bold")
        t.append(", ".join(visible(a) or "none" for a in p.nics))
    nodes = ", ".join(str(n) for n in p.nodes) or "-"
    t.append(f"\nnode {nodes} · {p.vcpus} vCPUs on CPUs {format_cpulist(p.cpus) or '-'} · emulator on "
             f"{format_cpulist(p.emulator) or '-'}")
    t.append(f"\nmemory {_gib(p.memory_kib)} · ")
    t.append_text(_pages_line(p))
    for r in (*p.reasons, *p.nic_notes):
        t.append(f"\n· {show(r, LINE_MAX)}", style="dim")
    for a in p.alternatives[:2]:
        t.append(f"\nrunner-up {', '.join(visible(g) for g in a.gpus)}: {show(a.worse, LINE_MAX)}", style="dim")
    return t


class PrepareModal(ModalScreen[PrepareChoice | None]):
    """The prepare form; see the module docstring. Tab moves between the fields, Space ticks the NIC box,
    Enter plans, Esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("enter", "plan", "Plan", priority=True)]
    DEFAULT_CSS = """
    PrepareModal { align: center middle; }
    #prep { width: 90%; max-width: 110; height: auto; max-height: 100%; border: round $primary;
            background: $surface; padding: 0 1; }
    #prep-fields { height: 1; margin-top: 1; }
    #prep-fields Input { width: 5; margin-right: 2; }
    #prep-fields Static { width: auto; }
    #prep-nic { margin-bottom: 1; }
    #prep-scroll { height: auto; max-height: 10; }
    #prep-status { color: $error; }
    """

    def __init__(self, vm: str, state: str, placer: Placer, labels: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.vm, self.state, self.placer = vm, state, placer
        self.labels = dict(labels or {})  # GPU address → its console name
        self.generation = 0  # the recommendation shown is the latest asked for; older answers are dropped
        self.shown: Any = None  # the Placement shown (None: being worked out, or the fields are wrong)
        self.asked: PrepareChoice | str | None = None  # the fields the recommendation is (being) made for

    def compose(self) -> ComposeResult:
        with Vertical(id="prep"):
            title = Text(f"Prepare VM {visible(self.vm)} for training ({visible(self.state)})", style="bold")
            if self.state != "shut off":
                title.append("  only a shut-off VM is prepared: the plan says how to shut it down", style="yellow")
            yield Static(title, id="prep-title")
            with Horizontal(id="prep-fields"):
                yield Static("GPUs ")
                yield Input("2", id="prep-count", compact=True, max_length=3)
                yield Static("memory ")
                yield Input("2", id="prep-factor", compact=True, max_length=6)
                yield Static("× the GPUs' VRAM")
            yield Checkbox("a NIC VF beside each GPU (GPUDirect RDMA)", True, id="prep-nic", compact=True)
            with VerticalScroll(id="prep-scroll"):
                yield Static(Text("working out where it goes…", style="dim"), id="prep-place")
            yield Static("", id="prep-status")
            yield Static(Text("Enter: see the plan · Tab: next field · Esc: cancel", style="dim"), id="prep-help")

    def on_mount(self) -> None:
        self.query_one("#prep-count", Input).focus()
        self.refresh_place()

    # -- the recommendation (a thread worker; the newest request wins) -------------------------------------
    def fields(self) -> PrepareChoice | str:
        parsed = parse_fields(self.query_one("#prep-count", Input).value,
                              self.query_one("#prep-factor", Input).value)
        if isinstance(parsed, str):
            return parsed
        return PrepareChoice(parsed[0], self.query_one("#prep-nic", Checkbox).value, parsed[1])

    def refresh_place(self) -> None:
        choice = self.fields()
        if choice == self.asked:
            return  # the same question (a field set to what it was): its answer is shown or on its way
        self.asked = choice
        self.generation += 1
        self.shown = None
        status = self.query_one("#prep-status", Static)
        place = self.query_one("#prep-place", Static)
        if isinstance(choice, str):
            status.update(Text(choice))
            place.update(Text("(fix the fields to see where it goes)", style="dim"))
            return
        status.update("")
        place.update(Text("working out where it goes…", style="dim"))
        self._place(self.generation, choice)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.is_mounted:
            self.refresh_place()

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        self.refresh_place()

    @work(thread=True, exclusive=True, group="prepare-place", exit_on_error=False)
    def _place(self, generation: int, choice: PrepareChoice) -> None:
        try:
            result: Any = self.placer(choice.count, choice.with_nic, choice.memory_factor)
        except Exception as exc:  # a bad request or a host that cannot be read: said in the form
            self.app.call_from_thread(self._placed, generation, None, str(exc))
            return
        self.app.call_from_thread(self._placed, generation, result, "")

    def _placed(self, generation: int, result: Any, error: str) -> None:
        if generation != self.generation or not self.is_mounted:
            return  # a field changed since: a newer answer is on its way
        self.shown = result
        place = self.query_one("#prep-place", Static)
        if result is None:
            place.update(Text(f"cannot work out a placement: {show(error, LINE_MAX)}", style="bold red"))
        else:
            place.update(placement_text(result, self.labels))

    # -- answers -----------------------------------------------------------------------------------
    def action_plan(self) -> None:
        choice = self.fields()
        if isinstance(choice, str):
            self.query_one("#prep-status", Static).update(Text(choice))
            return
        self.dismiss(choice)

    def action_cancel(self) -> None:
        self.dismiss(None)
