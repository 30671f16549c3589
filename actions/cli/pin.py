"""`nodeconsole pin VM` / `nodeconsole pin --all`: NUMA-aware vCPU pinning as a guided change.

Prints the plan (with the before/after map of vCPU → host CPU) and changes nothing without --apply;
--apply asks on the terminal unless --yes. A plan never puts a vCPU on a CPU another defined VM is pinned
to (running, paused or shut off): with no room left it is refused, naming those VMs, unless
--allow-overlap asks to share their CPUs on purpose. Exit status as for every change: 0 done or nothing
to do, 1 refused / cancelled / failed, 2 bad arguments (unknown VM, bad CPU list).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nodeconsole.actions.cli.change import change_args, run_request
from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:
    from nodeconsole.actions.session import Request


@subcommand("pin", "pin a VM's vCPUs, emulator threads and memory to its GPUs' NUMA node")
def configure_pin(p: argparse.ArgumentParser) -> None:
    p.add_argument("vm", nargs="?", metavar="VM", help="the VM to pin (or --all)")
    p.add_argument("--all", action="store_true", help="one plan pinning every GPU VM that has no vCPU pins")
    p.add_argument("--cpus", metavar="LIST",
                   help="host CPUs to pin the vCPUs to (e.g. 34-41,98-105) instead of the proposal")
    p.add_argument("--reserve", metavar="LIST",
                   help="host CPUs kept for the host and the emulator threads (default: the CPUs the host "
                        "keeps, from isolcpus=/nohz_full= or systemd CPUAffinity=, and the first core of "
                        "each NUMA node where it keeps none)")
    p.add_argument("--allow-overlap", action="store_true",
                   help="when no placement avoids every other VM's pins, share their CPUs on purpose (the "
                        "plan names those VMs) instead of refusing")
    change_args(p)
    p.set_defaults(func=run_pin)


def run_pin(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Pin, PinAll

    if args.all == (args.vm is not None):
        raise UsageError("name one VM, or --all for every unpinned GPU VM")
    if args.all and args.cpus is not None:
        raise UsageError("--cpus chooses the CPUs of one VM: it does not go with --all")
    request: Request = PinAll(reserve=args.reserve, allow_overlap=args.allow_overlap) if args.all else \
        Pin(args.vm, cpus=args.cpus, reserve=args.reserve, allow_overlap=args.allow_overlap)
    return run_request(args, request)
