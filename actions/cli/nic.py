"""`nodeconsole nic`: the host's NICs and their SR-IOV VFs.

- `nic list [--json]`: each NIC's physical function (driver, NUMA node, link layer, RDMA devices and
  ports, netdevs), its VFs with the VM that holds each, and the closest GPUs (PIX/PXB/PHB/NODE/SYS).
- `nic vfs PF COUNT [--persist]`: create or remove VFs (a plan with undo; --apply makes it).
- `nic passthrough VF --vm VM`: one VF to vfio-pci and the VM's definition.
Exit status as every change command (actions/cli/change.py): 0 done or nothing to do, 1 refused /
failed, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json

from nodeconsole.actions.cli.change import change_args, run_request
from nodeconsole.console.argtypes import count
from nodeconsole.console.cli_base import host_args, seams_from_args, subcommand
from nodeconsole.console.hosttext import show
from nodeconsole.console.model import Nic, to_jsonable

MAX_VFS = 4096


@subcommand("nic", "the host's NICs and their SR-IOV VFs: list, create/remove VFs, pass a VF through")
def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="nic_command", parser_class=type(p), metavar="ACTION", required=True)
    common = host_args()
    sl = sub.add_parser("list", parents=[common], help="NICs, their VFs and the GPUs beside them",
                        description="Each NIC's physical function and VFs: driver, NUMA node, link layer, RDMA "
                                    "devices and ports, netdevs, which VM holds each VF, the closest GPUs.")
    sl.add_argument("--json", action="store_true", help="print the NICs as JSON (the snapshot's `nics`)")
    sl.set_defaults(func=run_list)

    sv = sub.add_parser("vfs", parents=[common], help="create or remove a NIC's SR-IOV VFs",
                        description="Set the number of SR-IOV VFs of a NIC's physical function (0 removes them). "
                                    "New VFs stay off the host's driver (sriov_drivers_autoprobe=0): they are "
                                    "meant for VMs.")
    sv.add_argument("pf", metavar="PF", help="the physical function's PCI address (nodeconsole nic list)")
    sv.add_argument("count", metavar="COUNT", type=count(0, MAX_VFS, "VF count"), help="VFs it should have")
    sv.add_argument("--persist", action="store_true",
                    help="keep the count across reboots (a udev rule in /etc/udev/rules.d)")
    sv.add_argument("--host-driver", action="store_true",
                    help="let the host's driver take the new VFs (default: they stay without a driver, for VMs)")
    change_args(sv)
    sv.set_defaults(func=run_vfs)

    sp = sub.add_parser("passthrough", parents=[common], help="give one VF to a VM (vfio-pci and its definition)",
                        description="Bind one NIC VF to vfio-pci and add it to a VM's definition.")
    sp.add_argument("vf", metavar="VF", help="the VF's PCI address (nodeconsole nic list)")
    sp.add_argument("--vm", metavar="VM", required=True, help="the VM to give it to")
    change_args(sp)
    sp.set_defaults(func=run_passthrough)


def run_list(args: argparse.Namespace) -> int:
    from nodeconsole.console.collector import Collector

    snap = Collector(seams_from_args(args)).collect()
    if args.json:
        print(json.dumps(to_jsonable(snap.nics), indent=2))
        return 0
    if not snap.nics:
        print("no network controllers found")
        return 0
    for n in snap.nics:
        print("\n".join(nic_lines(n)))
    return 0


def _port_text(n: Nic) -> str:
    ports = [f"{show(p.device)} port {p.port} {show(p.state or '?')} {show(p.rate or '?')}" for p in n.ports]
    return "; ".join(ports) or "no RDMA device"


def nic_lines(n: Nic) -> list[str]:
    """A NIC as `nic list` prints it: host text (names, driver, netdevs) shown with visible escapes."""
    node = "?" if n.numa_node is None else str(n.numa_node)
    lines = [f"{n.label} {n.address}  {show(n.name, 40)}  {show(n.driver or 'no driver')}  node {node}  "
             f"{n.link_layer or 'link layer unknown'}",
             f"    {_port_text(n)}  netdev {', '.join(show(x) for x in n.netdevs) or '-'}"]
    if n.sriov_totalvfs:
        probe = {True: "on", False: "off", None: "?"}[n.sriov_drivers_autoprobe]
        lines.append(f"    VFs {n.sriov_numvfs or 0} of {n.sriov_totalvfs} (autoprobe {probe})")
    else:
        lines.append("    no SR-IOV")
    if n.vm:
        lines.append(f"    held whole by VM {show(n.vm)}")
    near = n.closest
    if near:
        lines.append(f"    closest GPUs: {', '.join(str(g.index) for g in near)} ({near[0].distance})")
    for v in n.vfs:
        held = f"VM {show(v.vm)} ({show(v.vm_state or '?')})" if v.vm else "free"
        extra = "  ".join(x for x in (", ".join(show(r) for r in v.rdma), ", ".join(show(d) for d in v.netdevs)) if x)
        lines.append(f"    VF{v.index:<3} {v.address}  {show(v.driver or 'no driver'):10} {extra + '  ' if extra else ''}"
                     f"→ {held}")
    return lines


def run_vfs(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import NicVfs

    return run_request(args, NicVfs(args.pf, args.count, persist=args.persist, host_driver=args.host_driver))


def run_passthrough(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import NicPassthrough

    return run_request(args, NicPassthrough(args.vf, args.vm))
