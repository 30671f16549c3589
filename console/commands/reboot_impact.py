"""`nodeconsole reboot-impact`: the VMs a reboot of this host stops, and the GPUs each holds."""
from __future__ import annotations

import argparse
import json

from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.hosttext import LINE_MAX, show


@subcommand("reboot-impact", "the running VMs a reboot stops, and the GPUs they hold")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print {vms: [{vm, state, gpus}], libvirt}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.reboot_impact import reboot_impact

    collector = Collector(seams_from_args(args))
    try:
        snap = collector.collect()
    finally:
        collector.close()
    hit = reboot_impact(snap)
    if args.json:
        print(json.dumps({"vms": [h.to_dict() for h in hit], "libvirt": snap.sources.libvirt}, indent=2))
        return 0 if snap.sources.libvirt.ok else 1
    if not snap.sources.libvirt.ok:
        print(f"nodeconsole: which VMs run is unknown: libvirt {show(snap.sources.libvirt, LINE_MAX)}")
        return 1
    if not hit:
        print("no VM is running: a reboot stops none")
        return 0
    index = {g.address: g.index for g in snap.gpus}
    print(f"a reboot stops {len(hit)} VM{'s' if len(hit) != 1 else ''}:")
    for h in hit:
        gpus = ", ".join(f"GPU {index[a]} {a}" for a in h.gpus) or "no GPU"
        print(f"  {show(h.name, LINE_MAX)}  {h.state}  {gpus}")
    return 0
