"""`nodeconsole gpu drain GPU --reason TEXT` / `gpu undrain GPU`: the admin's "no new work" mark on a GPU
(actions/drain.py); `gpu reset GPU [--force]`: the GPU reset whatever holds it (actions/reset.py). Both
are planned, audited and undoable like every change: nothing changes without --apply; --apply asks
unless --yes. A drained GPU is refused by passthrough, MIG, vGPU, NIC pairing and the NCCL
pick until `gpu undrain` (--allow-unhealthy does not lift it). Exit status: 0 done or nothing to do,
1 refused / cancelled / failed, 2 bad arguments (a missing, blank, over-long or multi-line reason).
"""
from __future__ import annotations

import argparse

from nodeconsole.actions.cli.change import change_args, run_request
from nodeconsole.console.cli_base import host_args, subcommand
from nodeconsole.console.drains import reason_problem
from nodeconsole.console.usage import UsageError

GPU_HELP = "console index, PCI address (DDDD:BB:DD.F), UUID or smi:N (nvidia-smi's index)"


@subcommand("gpu", "drain a GPU (no new work goes on it), lift its drain, or reset it")
def configure_gpu(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="gpu_command", metavar="ACTION", parser_class=type(p))
    sub.required = True
    dr = sub.add_parser("drain", parents=[host_args()],
                        help="mark a GPU drained: passthrough, MIG, vGPU, NIC pairing and NCCL refuse it")
    dr.add_argument("gpu", metavar="GPU", help=GPU_HELP)
    dr.add_argument("--reason", metavar="TEXT", required=True,
                    help="why (one line, e.g. a ticket): shown with the drain everywhere")
    change_args(dr)
    dr.set_defaults(func=run_drain)
    un = sub.add_parser("undrain", parents=[host_args()], help="lift a GPU's drain")
    un.add_argument("gpu", metavar="GPU", help=GPU_HELP)
    change_args(un)
    un.set_defaults(func=run_undrain)
    rs = sub.add_parser("reset", parents=[host_args()],
                        help="reset a GPU: the VMs holding it are shut down and started again around the reset")
    rs.add_argument("gpu", metavar="GPU", help=GPU_HELP)
    rs.add_argument("--force", action="store_true",
                    help="destroy a VM that has not shut down after the wait (its guest loses what it did not save)")
    change_args(rs)
    rs.set_defaults(func=run_reset)


def run_drain(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Drain

    problem = reason_problem(args.reason)
    if problem:  # before the host is read
        raise UsageError(f"--reason: {problem}")
    return run_request(args, Drain(args.gpu, args.reason))


def run_undrain(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Undrain

    return run_request(args, Undrain(args.gpu))


def run_reset(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import Reset

    return run_request(args, Reset(args.gpu, force=args.force))
