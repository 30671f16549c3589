"""`nodeconsole place --gpus N [--with-nic] [--vm VM] [--memory-factor F] [--json]`: the best set of N GPUs
on this host for a training VM and why, with its NUMA node(s), vCPUs and their CPUs, emulator CPUs,
memory, the hugepages that needs against what is free, the VF beside each GPU and the runners-up
(actions/placement.py). Read-only: it changes nothing. Exit status: 0 a set found, 1 none (the reason
says what stands in the way), 2 bad arguments (N < 1, a factor that is not positive, an unknown VM).
"""
from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING

from nodeconsole.console.argtypes import count
from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.hosttext import lines as host_lines
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:
    from nodeconsole.actions.host import ActionHost
    from nodeconsole.actions.placement import Placement
    from nodeconsole.console.model import HostSnapshot


def factor(text: str) -> float:
    """An argparse type: a positive, finite number (the memory factor)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not text.strip().isascii() or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text.strip()!r}: expected a positive number (e.g. 2 or 2.5)")
    return value


@subcommand("place", "the best set of N GPUs for a training VM, its CPUs, memory and hugepages (changes nothing)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", metavar="N", required=True, type=count(1, what="GPU count"),
                   help="how many GPUs the VM gets")
    p.add_argument("--with-nic", action="store_true", help="a free NIC VF beside each GPU (PIX), or the nearest")
    p.add_argument("--vm", metavar="VM", help="place for this VM: its own GPUs and CPU pins count as free")
    p.add_argument("--memory-factor", metavar="F", type=factor, default=2.0,
                   help="VM memory as F times the GPUs' VRAM (default 2)")
    p.add_argument("--json", action="store_true", help="print the placement as JSON")
    p.set_defaults(func=run_place)


def run_place(args: argparse.Namespace) -> int:
    from nodeconsole.actions.host import ActionHost
    from nodeconsole.actions.placement import PlacementError, place

    host = ActionHost.from_seams(seams_from_args(args))
    snap = host.snapshot()
    configs = vm_definitions(host, snap)
    try:
        placement = place(snap, host.root, args.gpus, with_nic=args.with_nic, vm=args.vm,
                          memory_factor=args.memory_factor, configs=configs)
    except PlacementError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(json.dumps(placement.to_dict(), indent=2))
    else:
        print(host_lines("\n".join(placement_lines(placement, args.gpus))))
    return 0 if placement.ok else 1


def vm_definitions(host: ActionHost, snap: HostSnapshot) -> dict[str, set[str]]:
    """VM → the PCI functions it holds: what the snapshot shows (a shut-off VM's definition, a running one's
    live devices) and, where the backend keeps the two apart (libvirt), the persistent definition of each
    running or paused VM too (a device added to its config only is its at the next start). A definition
    that cannot be read leaves what the snapshot shows."""
    from dataclasses import replace

    from nodeconsole.actions.pin_planner import INACTIVE
    from nodeconsole.actions.placement_sets import snapshot_configs
    from nodeconsole.actions.targets import vms_with

    out = snapshot_configs(snap)
    if host.vms is None or host.vms.one_state:
        return out
    live = replace(snap, vms=tuple(v for v in snap.vms if v.state not in INACTIVE))
    for name, have in vms_with(host, live, {d.address for d in snap.pci_devices}, {}).items():
        out.setdefault(name, set()).update(have)
    return out


def placement_lines(p: Placement, wanted: int) -> list[str]:
    """The placement as an admin reads it."""
    if not p.ok and p.blocked:
        head = p.refusal.split(". The others: ")[0]
        return [f"no set of {wanted} GPU(s): {head}"] + [f"  {label}: {'; '.join(why)}" for label, why in p.blocked]
    if not p.ok:
        return [f"no set of {wanted} GPU(s): {p.refusal}"] + [f"  - {r}" for r in p.reasons]
    out = [f"GPUs {', '.join(p.gpus) or 'none'}"] + [f"  - {r}" for r in p.reasons]
    out.append(f"NUMA node(s)  {', '.join(map(str, p.nodes))}")
    out.append(f"vCPUs         {p.vcpus} on CPU {format_cpulist(p.cpus)}" +
               (" (vCPU 2k and 2k+1 are sibling threads of one core)" if p.threads_per_core == 2 else ""))
    out.append(f"emulator      CPU {format_cpulist(p.emulator) or 'none kept: unpinned'}")
    out.append(f"memory        {p.memory_kib / 1048576:.1f} GiB")
    pages = p.hugepages
    if pages.size_kib:
        size = f"{pages.size_kib // 1048576} GiB" if pages.size_kib >= 1048576 else f"{pages.size_kib // 1024} MiB"
        for node, need in sorted(pages.per_node.items()):
            free = pages.free.get(node, 0)
            out.append(f"hugepages     node {node}: {need} x {size} needed, {free} free of "
                       f"{pages.reserved.get(node, 0)} reserved" + (f" ({need - free} to reserve)" if need > free else ""))
    else:
        out.append("hugepages     none (not backed by hugepages)")
    if p.nics:
        out += [f"NIC VF        {vf or 'none free'} for {gpu}" for gpu, vf in zip(p.gpus, p.nics)]
        out += [f"  note: {n}" for n in p.nic_notes]
    if p.alternatives:
        out.append("runners-up")
        out += [f"  {', '.join(a.gpus)}: {a.worse}" for a in p.alternatives]
    return out
