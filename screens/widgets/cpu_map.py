"""Host CPUs grouped by NUMA node and package, with the pins of one VM (or all VMs) marked."""
from __future__ import annotations

from rich.text import Text

from nodeconsole.console.model import HostSnapshot, Vm


def cpu_map(snap: HostSnapshot, vm: Vm | None, per_line: int = 32) -> Text:
    """One block per NUMA node/package: each CPU is a cell; the VM's vCPU pins are highlighted
    (cyan on the GPU's node, red elsewhere), emulator pins marked 'e', other VMs' pins dimmed 'o'."""
    from nodeconsole.console.checks import vm_gpu_nodes

    mine: dict[int, list[int]] = {}
    emu: set[int] = set()
    gpu_nodes: set[int] = set()
    if vm is not None:
        for p in vm.pins:
            for c in p.cpus:
                mine.setdefault(c, []).append(p.vcpu)
        emu = set(vm.emulator_pins)
        gpu_nodes = vm_gpu_nodes(snap, vm)
    others = {c for v in snap.vms if v is not vm and v.state == "running" for p in v.pins for c in p.cpus}
    groups: dict[tuple, list] = {}
    for cpu in snap.cpus:
        groups.setdefault((cpu.numa_node, cpu.package), []).append(cpu)
    out = Text()
    for (node, pkg), cpus in sorted(groups.items(), key=lambda kv: (kv[0][0] is None, kv[0])):
        gpus = [f"GPU{g.index}" for g in snap.gpus if g.numa_node == node]
        out.append(f"node {node if node is not None else '?'} package {pkg}"
                   f"{'  (' + ' '.join(gpus) + ')' if gpus else ''}\n", style="bold")
        for i, c in enumerate(sorted(cpus, key=lambda c: c.id)):
            if i and i % per_line == 0:
                out.append("\n")
            if not c.online:
                out.append("x", style="dim strike")
            elif c.id in mine:
                ok = not gpu_nodes or node in gpu_nodes
                out.append("#", style="bold cyan" if ok else "bold white on red")
            elif c.id in emu:
                out.append("e", style="bold yellow")
            elif c.id in others:
                out.append("o", style="dim")
            else:
                out.append("·", style="dim")
        out.append("\n")
    out.append("# this VM's vCPUs (red: off its GPU's node)  e emulator  o other VMs  · free  x offline",
               style="dim")
    return out
