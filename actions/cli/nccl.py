"""`nodeconsole nccl`: the quick NCCL checks from the command line.

- `nccl parse FILE`: read a saved all_reduce_perf output (exit 1 when it shows corrupted results or
  no result rows at all).
- `nccl check`: preflight for the host's GPUs (by default the idle, healthy ones; the rest skipped with
  their reasons) and the command a check would run; with --run, run it with progress row by row, a
  notice when it looks stalled, and judge the result against the topology (exit 1 on an error finding).
  With --vm, the check runs inside that VM (over ssh or the guest agent), for GPUs the host cannot use.
- `nccl command`: the mpirun / torchrun line of a multi-node check (printed, never launched); with --vm,
  the environment NCCL needs inside that VM's guest.
- `nccl topo --vm VM [-o FILE]`: the NCCL topology file for the VM (actions/nccl/topo_xml.py).
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from typing import TYPE_CHECKING

from nodeconsole.console.argtypes import count, seconds
from nodeconsole.console.cli_base import host_args, subcommand
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:  # the NCCL checks are imported when a command runs
    pass

from nodeconsole.actions.cli.nccl_check import run_check
from nodeconsole.actions.cli.nccl_command import run_command, run_topo
from nodeconsole.actions.cli.nccl_text import (
    _finding_dict,
    _num,
    _oob,
    _print_findings,
    _sweep_options,
    _transports,
    parsed_dict,
)


@subcommand("nccl", "quick NCCL checks: parse an all_reduce_perf output, preflight and run, multi-node commands")
def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="nccl_command", parser_class=type(p), metavar="ACTION", required=True)
    common = host_args()

    sp = sub.add_parser("parse", parents=[common], help="read a saved all_reduce_perf output",
                        description="Read a saved all_reduce_perf output ('-' for stdin): rows, average and "
                                    "peak bus bandwidth, corruption, NCCL version and transports. Exit 1 when "
                                    "the output shows wrong results.")
    sp.add_argument("file", metavar="FILE")
    sp.add_argument("--json", action="store_true", help="print the reading as JSON")
    sp.set_defaults(func=run_parse)

    sc = sub.add_parser("check", parents=[common], help="preflight, and with --run the check itself",
                        description="Lint the NCCL setup for this host's GPUs and show the command of the "
                                    "check; with --run, run it and judge the result.")
    sc.add_argument("--gpus", metavar="LIST", help="GPUs, like 0,1 or smi:0,smi:3 (console indices, PCI addresses, "
                                                   "UUIDs or nvidia-smi's smi:N), taken as given (default: the "
                                                   "idle, healthy GPUs the host drives; the others are skipped)")
    sc.add_argument("--run", action="store_true", help="run all_reduce_perf (or the PyTorch benchmark)")
    sc.add_argument("--allow-unhealthy", action="store_true",
                    help="take named GPUs whose health verdict is unhealthy (refused otherwise)")
    sc.add_argument("--binary", metavar="PATH", help="all_reduce_perf to run (default: $NODECONSOLE_ALL_REDUCE_PERF, "
                                                     "else from PATH, else the PyTorch benchmark)")
    sc.add_argument("--timeout", type=seconds, default=600.0, metavar="S", help="stop the run after S seconds (600)")
    sc.add_argument("--stall", type=seconds, default=20.0, metavar="S",
                    help="say the run looks stalled after no new row for 3× the longest gap between rows, at "
                         "least S seconds (20); it keeps running")
    sc.add_argument("--vm", metavar="NAME", help="run the check inside this VM, on its GPUs (over ssh, or the "
                                                 "guest agent with --via agent)")
    sc.add_argument("--via", choices=("ssh", "agent"), default=None,
                    help="with --vm: ssh to the guest (default) or the QEMU guest agent (virsh qemu-agent-command)")
    sc.add_argument("--ssh", metavar="USER@ADDR", dest="ssh_dest",
                    help="with --vm: the guest to ssh to (default: its address from libvirt, as the current user)")
    sc.add_argument("--nvlink", action="store_true", default=None,
                    help="the GPUs are connected by NVLink (default: as NVML reports their links; not when it cannot tell)")
    sc.add_argument("--json", action="store_true", help="print findings and results as JSON")
    _sweep_options(sc)
    sc.set_defaults(func=run_check)

    _configure_command(sub, common)


def _configure_command(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`nccl command` and `nccl topo`."""
    sm = sub.add_parser("command", parents=[common], help="print the command line of a multi-node check",
                        description="Build (never launch) the mpirun or torchrun command of a multi-node check; "
                                    "with --vm, print the environment NCCL needs inside that VM, or with --hosts "
                                    "too, put that environment into the command.")
    sm.add_argument("--hosts", metavar="H1,H2", help="host names, comma separated (required without --vm)")
    sm.add_argument("--gpus-per-host", type=count(1, 1024, "GPU count"), metavar="N",
                    help="GPUs per host (required without --vm; with --vm: the VM's GPU count)")
    sm.add_argument("--vm", metavar="NAME", help="the NCCL environment of this VM's guest: printed, or with --hosts "
                                                 "carried into every rank's command")
    sm.add_argument("--topo-path", metavar="PATH", default=None,
                    help="with --vm: where the guest keeps the topology file (default /etc/nccl/topo.xml)")
    sm.add_argument("--launcher", choices=("mpirun", "torchrun"), default="mpirun")
    sm.add_argument("--binary", default=None, metavar="PATH",
                    help="all_reduce_perf path on the hosts (mpirun only; default all_reduce_perf)")
    sm.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment for every rank, e.g. NCCL_SOCKET_IFNAME==eth0 (repeatable)")
    sm.add_argument("--json", action="store_true", help="print the command(s) as JSON")
    _sweep_options(sm)
    sm.set_defaults(func=run_command)

    st = sub.add_parser("topo", parents=[common], help="write the NCCL topology file of a VM",
                        description="The NCCL topology XML (NCCL_TOPO_FILE) of a VM: its GPUs and NICs as the "
                                    "host sees them (NUMA nodes, PCIe switches, links), at the PCI addresses the "
                                    "guest sees them.")
    st.add_argument("--vm", required=True, metavar="NAME", help="the VM")
    st.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (mode 0644; a symlink is refused) "
                                                           "instead of printing it")
    st.set_defaults(func=run_topo)



# -- parse -----------------------------------------------------------------------------------------------
MAX_OUTPUT = 64 << 20  # a long all_reduce_perf log with NCCL_DEBUG=INFO is a few MiB


def _read_output(name: str) -> str:
    """An output file's text: a regular file of at most MAX_OUTPUT bytes (never blocks on a FIFO, never
    reads /dev/zero); anything else is a UsageError."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file") from None
    except OSError as e:
        raise UsageError(f"{name}: cannot read it ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise UsageError(f"{name}: is a directory, not an output file")
        raise UsageError(f"{name}: not a regular file (give a file, or - for standard input)")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_OUTPUT + 1)
        except OSError as e:
            raise UsageError(f"{name}: cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_OUTPUT:
        raise UsageError(f"{name}: larger than {MAX_OUTPUT >> 20} MiB, not an all_reduce_perf output")
    return data.decode("utf-8", "replace")


def run_parse(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.expect import verdict
    from nodeconsole.actions.nccl.parse import parse_text

    if args.file == "-":
        text = sys.stdin.read(MAX_OUTPUT + 1)
        if len(text) > MAX_OUTPUT:
            raise UsageError(f"standard input: larger than {MAX_OUTPUT >> 20} MiB, not an all_reduce_perf output")
    else:
        text = _read_output(args.file)
    parsed = parse_text(text)
    findings = verdict(parsed)
    if args.json:
        print(json.dumps({"file": args.file, **parsed_dict(parsed),
                          "findings": [_finding_dict(f) for f in findings]}, indent=2))
    else:
        print(f"file: {args.file}")
        print(f"rows: {len(parsed.rows)}{'' if parsed.complete or not parsed.rows else ' (no summary: cut off)'}")
        print(f"avg bus bandwidth: {_num(parsed.avg_busbw)} GB/s")
        # nccl-tests prints busbw cells with two decimals: report the peak as the file has it
        peak = parsed.peak_busbw
        print(f"peak bus bandwidth: {peak:.2f} GB/s" if isinstance(peak, float) else f"peak bus bandwidth: {_num(peak)}")
        print(f"out of bounds: {_oob(parsed)}")
        bad = f"DATA CORRUPTION, #wrong total {parsed.wrong_total}" if parsed.corrupted else "none"
        print(f"corruption: {bad}")
        print(f"NCCL version: {parsed.version or '-'}")
        print(f"network: {', '.join(parsed.networks) or '-'}")
        print(f"transports: {_transports(parsed)}")
        if findings:
            print("findings:")
            _print_findings(findings)
    # corrupted data, or nothing that reads as all_reduce_perf output at all: not a passing result
    return 1 if parsed.corrupted or not parsed.rows else 0


# -- check -----------------------------------------------------------------------------------------------
