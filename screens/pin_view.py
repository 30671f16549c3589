"""The rebalance view of the VMs screen: which VM's vCPUs are pinned to which host CPUs, host-wide, for
every defined VM: running ones, and paused and shut-off ones (drawn apart: their CPUs are held for
them, and a pin plan avoids them too). CPUs pinned by two VMs and vCPUs off their GPU's NUMA node are
marked. `n` plans pinning the selected VM, `N` one plan for every unpinned GPU VM. Rendering only
(rich): no Textual, no host access."""
from __future__ import annotations

import string
from dataclasses import dataclass

from rich.text import Text

from nodeconsole.console.checks import vm_alignment, vm_gpu_nodes
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.hosttext import show
from nodeconsole.console.model import Cpu, HostSnapshot

LETTERS = string.ascii_uppercase + string.ascii_lowercase
_INACTIVE = ("shut off", "crashed")
RUNNING_STYLE = "bold cyan"
PAUSED_STYLE = "bold yellow"
STOPPED_STYLE = "italic blue"  # shut off or crashed: no thread runs, the pins wait for the next start


@dataclass(frozen=True)
class Placement:
    """One defined VM as the map shows it."""
    vm: str
    mark: str  # its letter on the map ("+" when the letters ran out)
    cpus: tuple[int, ...]  # host CPUs its vCPUs are pinned to
    nodes: tuple[int, ...]  # NUMA nodes of those CPUs
    gpu_nodes: tuple[int, ...]
    status: str  # vm_alignment(): "aligned", "cross-numa", "unpinned" or "" (no GPU)
    state: str = "running"  # libvirt's state: running, paused, shut off, ...

    @property
    def stopped(self) -> bool:
        """No thread runs (shut off, crashed): its pins hold CPUs for its next start."""
        return self.state in _INACTIVE

    @property
    def style(self) -> str:
        return STOPPED_STYLE if self.stopped else PAUSED_STYLE if self.state == "paused" else RUNNING_STYLE


def placements(snap: HostSnapshot) -> list[Placement]:
    """Every defined VM (running, paused, shut off), by name: where its vCPUs are pinned (a pin to every
    online CPU is no pin)."""
    online = {c.id for c in snap.cpus if c.online}
    node = snap.cpu_node()
    out: list[Placement] = []
    for v in sorted(snap.vms, key=lambda v: v.name):
        cpus = sorted({c for p in v.pins if not online <= set(p.cpus) for c in p.cpus})
        mark = LETTERS[len(out)] if len(out) < len(LETTERS) else "+"
        out.append(Placement(vm=v.name, mark=mark, cpus=tuple(cpus),
                             nodes=tuple(sorted({n for c in cpus if (n := node.get(c)) is not None})),
                             gpu_nodes=tuple(sorted(vm_gpu_nodes(snap, v))), status=vm_alignment(snap, v),
                             state=v.state))
    return out


def overlaps(places: list[Placement]) -> dict[int, tuple[str, ...]]:
    """CPU → the VMs whose vCPUs are pinned to it, when two or more are (stopped VMs too: they get
    their CPUs back when they start)."""
    users: dict[int, list[str]] = {}
    for p in places:
        for c in p.cpus:
            users.setdefault(c, []).append(p.vm)
    return {c: tuple(names) for c, names in sorted(users.items()) if len(names) > 1}


def rebalance_map(snap: HostSnapshot, per_line: int = 32) -> Text:
    """The host-wide map: one block per NUMA node, one cell per CPU (the VM's letter: cyan running,
    yellow paused, blue italic shut off; `!` for a CPU two VMs are pinned to, `·` free, `x` offline;
    red: a vCPU off its GPU's node), then one line per VM and the legend."""
    places = placements(snap)
    shared = overlaps(places)
    out = Text("Rebalance: VMs' vCPU pins", style="bold")
    out.append("  n: pin VM · N: pin all unpinned\n", style="dim")
    _node_blocks(out, snap, places, shared, per_line)
    for p in places:
        _vm_line(out, p)
    if shared:
        out.append("shared CPUs: " + "; ".join(f"{c} {'+'.join(map(show, names))}" for c, names in shared.items()) + "\n",
                   style="bold red")
    out.append("letter: a VM's vCPUs, ", style="dim")
    out.append("running", style=RUNNING_STYLE)
    out.append(", ", style="dim")
    out.append("paused", style=PAUSED_STYLE)
    out.append(" or ", style="dim")
    out.append("shut off", style=STOPPED_STYLE)
    out.append(" (its CPUs held for its next start)  ! two VMs pinned  red: off its GPU's node  · free  "
               "x offline", style="dim")
    return out


def _node_blocks(out: Text, snap: HostSnapshot, places: list[Placement], shared: dict[int, tuple[str, ...]],
                 per_line: int) -> None:
    """One block per NUMA node (its GPUs named), one cell per CPU, `per_line` cells a line."""
    owner: dict[int, Placement] = {}
    for p in places:
        for c in p.cpus:
            owner.setdefault(c, p)
    by_node: dict[int | None, list[Cpu]] = {}
    for cpu in snap.cpus:
        by_node.setdefault(cpu.numa_node, []).append(cpu)
    for node, cpus in sorted(by_node.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        gpus = " ".join(f"GPU{g.index}" for g in snap.gpus if g.numa_node == node)
        out.append(f"node {node if node is not None else '?'}" + (f"  ({gpus})" if gpus else "") + "\n",
                   style="bold")
        for i, cpu in enumerate(sorted(cpus, key=lambda c: c.id)):
            if i and i % per_line == 0:
                out.append("\n")
            held = owner.get(cpu.id)
            if not cpu.online:
                out.append("x", style="dim strike")
            elif cpu.id in shared:
                out.append("!", style="bold white on red")
            elif held is not None:
                off = bool(held.gpu_nodes) and node not in held.gpu_nodes
                out.append(held.mark, style=("italic white on red" if held.stopped else "bold white on red") if off
                           else held.style)
            else:
                out.append("·", style="dim")
        out.append("\n")


def _vm_line(out: Text, p: Placement) -> None:
    """The VM's letter and name, its pinned CPUs and their nodes, and whether they are off its GPU's node."""
    out.append(p.mark, style=p.style)
    out.append(f" {show(p.vm)}", style="bold")
    if p.state != "running":
        out.append(f"  ({p.state})", style=p.style)
    if not p.cpus:
        line = "  unpinned" + ("  (GPU VM: n proposes a pinning)" if p.gpu_nodes else "")
        out.append(line + "\n", style="yellow" if p.gpu_nodes else "dim")
        return
    where = f"  CPU {format_cpulist(p.cpus)} on node {format_cpulist(p.nodes)}"
    if p.status == "cross-numa":
        out.append(where)
        out.append(f"  ✖ GPU on node {format_cpulist(p.gpu_nodes)}\n", style="bold red")
    else:
        out.append(where + ("  ok" if p.status == "aligned" else "") + "\n")
