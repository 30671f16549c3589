"""`nodeconsole pin VM` / `nodeconsole pin --all`: NUMA-aware vCPU pinning as a guided change.

Prints the plan (with the before/after map of vCPU → host CPU) and changes nothing without --apply;
--apply asks on the terminal unless --yes. Exit status as for every change: 0 done or nothing to do,
1 refused / cancelled / failed, 2 bad arguments (unknown VM, bad CPU list).
"""
from __future__ import annotations

import argparse

from nodeconsole.console.cli import UsageError, subcommand
from nodeconsole.console.commands.change import change_args, run_request


@subcommand("pin", "pin a VM's vCPUs, emulator threads and memory to its GPUs' NUMA node")
def configure_pin(p: argparse.ArgumentParser) -> None:
    p.add_argument("vm", nargs="?", metavar="VM", help="the VM to pin (or --all)")
    p.add_argument("--all", action="store_true", help="one plan pinning every GPU VM that has no vCPU pins")
    p.add_argument("--cpus", metavar="LIST",
                   help="host CPUs to pin the vCPUs to (e.g. 34-41,98-105) instead of the proposal")
    p.add_argument("--reserve", metavar="LIST",
                   help="host CPUs kept for the host and the emulator threads "
                        "(default: the first core of each NUMA node and its hyperthread siblings)")
    change_args(p)
    p.set_defaults(func=run_pin)


def run_pin(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Pin, PinAll

    if args.all == (args.vm is not None):
        raise UsageError("name one VM, or --all for every unpinned GPU VM")
    if args.all and args.cpus is not None:
        raise UsageError("--cpus chooses the CPUs of one VM: it does not go with --all")
    if args.all:
        return run_request(args, PinAll(reserve=args.reserve))
    return run_request(args, Pin(args.vm, cpus=args.cpus, reserve=args.reserve))
