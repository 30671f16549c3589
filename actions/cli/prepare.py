"""`nodeconsole prepare VM --gpus N|LIST`: a shut-off VM sized and wired for training in one plan
(actions/prepare.py): GPUs (place's choice or the list) and a NIC VF beside each, vCPUs pinned on their
NUMA node, memory backed by hugepages there, the guest's NCCL files. Prints the plan; nothing changes
without --apply; exit status as for every change (0 done, 1 refused / failed, 2 bad arguments)."""
from __future__ import annotations

import argparse

from nodeconsole.actions.cli.change import change_args, run_request
from nodeconsole.console.argtypes import count, positive_factor, size_kib
from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.usage import UsageError


@subcommand("prepare", "size and wire a shut-off VM for training: GPUs, NIC VFs, pinned vCPUs, hugepage memory")
def configure_prepare(p: argparse.ArgumentParser) -> None:
    p.add_argument("vm", metavar="VM", help="the VM (shut off)")
    p.add_argument("--gpus", required=True, metavar="N|LIST",
                   help="how many GPUs (place picks the best set: `nodeconsole place --gpus N`), or which: "
                        "console indices or PCI addresses, comma separated (a single one as `3,`)")
    p.add_argument("--with-nic", action="store_true", help="a free NIC VF beside each GPU (PIX first), for "
                                                           "GPUDirect RDMA; far VFs the VM holds are taken out")
    p.add_argument("--vcpus", type=count(1, 4096, "vCPU count"), metavar="N",
                   help="vCPUs (default: 70%% of the free CPUs of the GPUs' node(s), the host's kept cores aside)")
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--memory", type=size_kib, metavar="SIZE", help="memory, like 320G (default: 2× the GPUs' VRAM)")
    mem.add_argument("--memory-factor", type=positive_factor, metavar="F",
                     help="memory as F × the GPUs' VRAM (default 2; 2–3 is recommended)")
    p.add_argument("--hugepages", choices=("1G", "2M", "none"), default=None,
                   help="back the memory with hugepages of this size (default: 1G where the host offers them, else 2M)")
    change_args(p)
    p.set_defaults(func=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Prepare

    if not args.gpus.strip():
        raise UsageError("--gpus: give a count (2) or GPUs (0,1)")
    return run_request(args, Prepare(args.vm, args.gpus, with_nic=args.with_nic, vcpus=args.vcpus,
                                     memory_kib=args.memory, memory_factor=args.memory_factor,
                                     hugepages=args.hugepages))
