"""`nodeconsole snapshot`: one collection, printed as a readable summary or as JSON."""
from __future__ import annotations

import argparse
import json

from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.hosttext import LINE_MAX, show, visible
from nodeconsole.console.model import HostSnapshot, Vm, format_metric


@subcommand("snapshot", "read the host once and print a summary (or --json)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the whole snapshot as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from nodeconsole.console.collector import Collector
    from nodeconsole.console.guest_watch import WAIT_S

    collector = Collector(seams_from_args(args))
    collector.guest_wait_s = WAIT_S  # the guests' logs (GPU events) are read once, with a bound
    collector.collect()  # CPU load and VM CPU % are deltas: prime them, then read for real
    time.sleep(0.25)
    snap = collector.collect()
    print(json.dumps(snap.to_dict(), indent=2) if args.json else summary(snap))
    return 0


def summary(snap: HostSnapshot) -> str:
    """The readable summary; host text is shown with visible escapes and capped (--json has it whole)."""
    h = snap.host
    online = sum(1 for c in snap.cpus if c.online)
    cores = len({(c.package, c.core) for c in snap.cpus if c.online and c.core >= 0})
    pkgs = len({c.package for c in snap.cpus if c.package >= 0})
    lines = [
        f"host {show(h.hostname or '?', LINE_MAX)}  kernel {show(h.kernel or '?')}  "
        f"IOMMU {'on' if snap.iommu.enabled else 'off'}",
        f"cpus {online} online of {len(snap.cpus)}, {cores} cores, {pkgs} packages; "
        f"NUMA nodes {', '.join(f'{n.id} ({len(n.cpus)} cpus, {n.memory_kib // 1048576} GiB)' for n in snap.numa_nodes) or '-'}",
        f"pci functions {len(snap.pci_devices)}, iommu groups {len(snap.iommu.groups)} "
        f"({sum(1 for g in snap.iommu.groups if not g.viable)} not viable)",
        "sources " + "  ".join(f"{k}: {visible(getattr(snap.sources, k))}" for k in ("sysfs", "nvml", "libvirt", "psutil")),
        "",
        f"GPUs ({len(snap.gpus)})",
    ]
    for g in snap.gpus:
        owner = g.owner.kind + (f"→{','.join(show(v) for v in g.owner.vms)}" if g.owner.vms else "")
        mig = ""
        if g.mig.mode == "enabled":
            mig = "  MIG " + " ".join(f"{show(i.profile)}@{i.start}" for i in g.mig.instances)
        lines.append(f"  {g.index:>2} {g.address} {show(g.name, 28):28} node {format_metric(g.numa_node)}  "
                     f"{owner:20} util {format_metric(g.utilization_gpu, '%')} temp {format_metric(g.temperature_c, 'C')}{mig}")
    lines += ["", f"VMs ({len(snap.vms)})"]
    for v in snap.vms:
        gpus = sorted({hd.gpu for hd in v.hostdevs if hd.gpu})
        lines.append(f"  {show(v.name):20} {show(v.state):9} vcpus {v.vcpus:>3}  cpu {format_metric(v.cpu_percent, '%'):>5}  "
                     f"pinned {'yes' if v.pins else 'no '}  gpus {','.join(gpus) or '-'}{_proxmox_notes(v)}")
    if snap.problems:
        lines += ["", "Problems"]
        lines += [f"  [{p.severity}] {visible(p.message)}" for p in snap.problems]
    return "\n".join(lines)


def _proxmox_notes(v: Vm) -> str:
    """A Proxmox VM's vmid, template, lock and the changes waiting for its restart."""
    if v.vmid is None:
        return ""
    notes = [f"vmid {v.vmid}"] + (["template"] if v.template else []) + \
        ([f"locked ({show(v.lock)})"] if v.lock else [])
    waiting = [show(k) for k in v.pending] + [f"-{show(k)}" for k in v.pending_delete]
    return "  " + ", ".join(notes + ([f"pending {' '.join(waiting)}"] if waiting else []))
