"""`nodeconsole vgpu`: list the vGPU types a GPU can still create, create one (optionally into a VM's
config), remove one.

    nodeconsole vgpu list [GPU] [--json]
    nodeconsole vgpu create GPU TYPE [--vm VM] [--uuid UUID] [--apply] [--yes]
    nodeconsole vgpu remove UUID|VF [--apply] [--yes]

TYPE is an mdev type (nvidia-1103), an SR-IOV type id (1113) or a type name (NVIDIA H100XM-10C, or
H100XM-10C). Changes print their plan and need --apply, as every change does.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from nodeconsole.actions.cli.change import allow_unhealthy_arg, change_args, run_request, session_for
from nodeconsole.console.cli_base import host_args, subcommand
from nodeconsole.console.usage import UsageError


@subcommand("vgpu", "list, create and remove vGPUs (mdev or SR-IOV VF), attached to a VM's config")
def configure_vgpu(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="vgpu_command", metavar="ACTION", parser_class=type(p))
    sub.required = True
    ls = sub.add_parser("list", parents=[host_args()], help="vGPU types with available counts, and vGPUs")
    ls.add_argument("gpu", nargs="?", metavar="GPU", help="only this GPU (index, PCI address, UUID or smi:N)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=run_list)
    mk = sub.add_parser("create", parents=[host_args()], help="create a vGPU, optionally into a VM's config")
    mk.add_argument("gpu", metavar="GPU", help="console index, PCI address, UUID or smi:N (nvidia-smi's index)")
    mk.add_argument("type", metavar="TYPE", help="nvidia-N (mdev), an SR-IOV type id, or the type's name")
    mk.add_argument("--vm", metavar="VM", help="add the vGPU to VM's config")
    mk.add_argument("--uuid", metavar="UUID", help="the mdev's UUID (default: a new one)")
    allow_unhealthy_arg(mk)
    change_args(mk)
    mk.set_defaults(func=run_create)
    rm = sub.add_parser("remove", parents=[host_args()], help="remove a vGPU and take it out of VM configs")
    rm.add_argument("vgpu", metavar="UUID|VF", help="mdev UUID, or the PCI address of the VF holding it")
    change_args(rm)
    rm.set_defaults(func=run_remove)


def run_list(args: argparse.Namespace) -> int:
    from nodeconsole.actions.passthrough import resolve_gpu
    from nodeconsole.actions.plan import RequestError
    from nodeconsole.actions.vgpu import offers

    snap = session_for(args).host.snapshot()
    try:
        gpus = [resolve_gpu(snap, args.gpu)] if args.gpu else list(snap.gpus)
    except RequestError as e:
        raise UsageError(str(e)) from None
    rows: list[dict[str, Any]] = []  # printed as JSON with --json
    for g in gpus:
        got = offers(snap, g)
        if not got and not g.vgpu.instances and args.gpu is None:
            continue
        rows.append({"gpu": g.address, "index": g.index, "name": g.name,
                     "types": [o.__dict__ | {"parents": list(o.parents)} for o in got],
                     "vgpus": [{"id": i.uuid, "type": i.type_name, "parent": i.parent, "vm": i.vm}
                               for i in g.vgpu.instances]})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no GPU offers vGPU types (no mdev types, no SR-IOV VF with creatable types)")
        return 0
    for r in rows:
        print(f"GPU {r['index']} ({r['gpu']}, {r['name']})")
        if not r["types"]:
            print("  offers no vGPU type")
        for t in r["types"]:
            where = "" if t["via"] == "mdev" else f" on VF {', '.join(t['parents'])}" if t["parents"] else ""
            why = f"  ({t['why_none']})" if t["why_none"] else ""
            print(f"  {t['type_id']:<12} {t['name']:<24} {t['via']:<5} {t['available']} available{where}{why}")
        for v in r["vgpus"]:
            print(f"  vGPU {v['id']}  {v['type']}  → VM {v['vm'] or '-'}")
    return 0


def run_create(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import VgpuCreate

    return run_request(args, VgpuCreate(args.gpu, args.type, vm=args.vm, uuid=args.uuid,
                                        allow_unhealthy=args.allow_unhealthy))


def run_remove(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import VgpuRemove

    return run_request(args, VgpuRemove(args.vgpu))
