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
import dataclasses
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO

from nodeconsole.console.argtypes import MAX_COUNT, count, seconds
from nodeconsole.console.cli import UsageError, host_args, seams_from_args, subcommand

if TYPE_CHECKING:  # the NCCL checks are imported when a command runs
    from nodeconsole.actions.nccl.commands import LocalCommand
    from nodeconsole.actions.nccl.expect import Topology
    from nodeconsole.actions.nccl.finding import Finding
    from nodeconsole.actions.nccl.guest import GuestPlan
    from nodeconsole.actions.nccl.parse import ParsedOutput
    from nodeconsole.actions.nccl.preflight import PreflightReport
    from nodeconsole.actions.nccl.run import Progress, RunResult, Stall
    from nodeconsole.actions.nccl.snapshot_topology import LocalPlan
    from nodeconsole.console.model import HostSnapshot
    from nodeconsole.console.seams import Seams


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

    sm = sub.add_parser("command", parents=[common], help="print the command line of a multi-node check",
                        description="Build (never launch) the mpirun or torchrun command of a multi-node check; "
                                    "with --vm, print the environment NCCL needs inside that VM.")
    sm.add_argument("--hosts", metavar="H1,H2", help="host names, comma separated (required without --vm)")
    sm.add_argument("--gpus-per-host", type=count(1, 1024, "GPU count"), metavar="N",
                    help="GPUs per host (required without --vm)")
    sm.add_argument("--vm", metavar="NAME", help="print the NCCL environment for this VM's guest instead")
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


def _sweep_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--min-bytes", default="8", metavar="SIZE", help="smallest message (8; K/M/G suffixes)")
    p.add_argument("-e", "--max-bytes", default="1G", metavar="SIZE", help="largest message (1G)")
    p.add_argument("-f", "--factor", type=count(1, MAX_COUNT, "factor"), default=2, metavar="N", help="size step factor (2)")


def _sweep(args: argparse.Namespace) -> list[str]:
    from nodeconsole.actions.nccl.commands import sweep_args

    try:
        return sweep_args(args.min_bytes, args.max_bytes, args.factor)
    except ValueError as e:
        raise UsageError(str(e)) from None


# -- formatting ----------------------------------------------------------------------------------------
def _num(v: float | None) -> str:
    """A parsed number as the parser read it (repr round-trips the float exactly)."""
    if v is None:
        return "-"
    return "N/A" if math.isnan(v) else repr(v)


def _json_num(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


def size_label(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _finding_dict(f: Finding) -> dict[str, str]:
    return dataclasses.asdict(f)


def _print_findings(findings: Iterable[Finding], out: TextIO | None = None) -> None:
    out = out or sys.stdout  # looked up per call: tests and pagers swap it
    marks = {"error": "✖", "warning": "▲", "info": "•"}
    for f in findings:
        print(f"  {marks.get(f.severity, '•')} [{f.severity}] {f.message}", file=out)
        print(f"      why: {f.reason}", file=out)
        print(f"      fix: {f.fix}", file=out)


def _transports(parsed: ParsedOutput) -> str:
    kinds = parsed.transport_kinds
    return ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items())) or "-"


def _oob(parsed: ParsedOutput) -> str:
    if parsed.oob_ok is None:
        return "not reported"
    return f"{parsed.oob_count} {'OK' if parsed.oob_ok else 'FAILED'}"


def parsed_dict(parsed: ParsedOutput) -> dict[str, object]:
    """The reading of an output as plain data (rows included)."""
    return {
        "rows": len(parsed.rows), "avg_busbw": _json_num(parsed.avg_busbw), "peak_busbw": parsed.peak_busbw,
        "complete": parsed.complete, "oob_count": parsed.oob_count, "oob_ok": parsed.oob_ok,
        "corrupted": parsed.corrupted, "wrong_total": parsed.wrong_total, "nccl_version": parsed.version,
        "networks": list(parsed.networks), "transports": dict(sorted(parsed.transport_kinds.items())),
        "devices": [dataclasses.asdict(d) for d in parsed.devices], "errors": list(parsed.errors),
        "table": [dataclasses.asdict(r) for r in parsed.rows],
    }


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
def _progress_line(p: Progress) -> str:
    r = p.row
    total = "?" if p.total is None else str(p.total)
    halves = [c for c in (r.out_of_place, r.in_place) if c is not None]
    algbw = "/".join(_num(c.algbw) for c in halves)
    busbw = "/".join(_num(c.busbw) for c in halves)
    wrong = "/".join("N/A" if c.wrong is None else str(c.wrong) for c in halves)
    return (f"[{p.done:>{len(total)}}/{total}] {size_label(r.size):>6} B  algbw {algbw} GB/s  "
            f"busbw {busbw} GB/s  #wrong {wrong}")


def _named_gpus(snap, names: list[str]) -> list[int]:
    """Console indices of GPUs named by index, PCI address, UUID or smi:N; UsageError for an unknown
    name or a GPU named twice."""
    from nodeconsole.actions.passthrough import resolve_gpu
    from nodeconsole.actions.plan import RequestError

    out: list[int] = []
    for name in names:
        try:
            g = resolve_gpu(snap, name)
        except RequestError as e:
            raise UsageError(f"--gpus: {e}") from None
        if g.index in out:
            raise UsageError(f"--gpus: GPU {g.index} is listed twice")
        out.append(g.index)
    return out


def run_check(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.snapshot_topology import (
        local_check_command,
        local_plan,
        parse_gpu_list,
        select_gpus,
        snapshot_preflight,
    )
    from nodeconsole.console.collector import Collector

    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise UsageError("--timeout must be a positive number of seconds")
    if args.vm is None and (args.via is not None or args.ssh_dest is not None):
        raise UsageError(f"{'--via' if args.via is not None else '--ssh'} goes with --vm NAME")
    if args.vm is not None and args.gpus is not None:
        raise UsageError("--gpus and --vm are exclusive (--vm tests the VM's own GPUs)")
    sweep = _sweep(args)
    named: list[str] | None = None  # GPUs named otherwise than by console index (smi:N, address, UUID)
    try:
        indices = parse_gpu_list(args.gpus) if args.gpus is not None else None
    except ValueError as e:
        named = [item.strip() for item in args.gpus.split(",")]
        if not all(named) or not all(item.isascii() for item in named):
            raise UsageError(f"--gpus: {e}") from None
        indices = None
    seams = seams_from_args(args)
    snap = Collector(seams).collect()
    if args.vm is not None:
        return _vm_check(args, snap, seams, sweep)
    if named is not None:
        indices = _named_gpus(snap, named)
    try:
        gpus = None if indices is None else select_gpus(snap, indices)
    except ValueError as e:
        raise UsageError(f"--gpus: {e}") from None
    plan = local_plan(snap, gpus, seams.root, nvlink=args.nvlink, allow_unhealthy=args.allow_unhealthy)
    env = dict(os.environ)
    report = snapshot_preflight(snap, seams.root, env, plan)
    try:
        cmd = local_check_command(plan, args.binary, sweep, env, preview=not args.run,
                                  this_machine=seams.is_this_machine)
        cmd_error = ""
    except ValueError as e:
        cmd, cmd_error = None, str(e)
    out = _plan_dict(plan, report, cmd, cmd_error)
    if not args.json:
        _print_plan(plan, report, cmd, cmd_error, will_run=args.run)
    if not args.run:
        if args.json:
            print(json.dumps(out, indent=2))
        return 1 if any(f.severity == "error" for f in report.findings) else 0

    blocking = [f for f in report.findings if f.code in ("nccl.no_gpu", "nccl.gpu_not_host", "nccl.gpu_mig",
                                                         "nccl.gpu_vgpu", "nccl.gpu_drained")
                or (f.code == "nccl.gpu_unhealthy" and f.severity == "error")]
    if blocking:
        raise UsageError(f"--run: {blocking[0].message}; {blocking[0].fix}")
    if cmd is None:
        if args.binary or env.get("NODECONSOLE_ALL_REDUCE_PERF"):
            raise UsageError(f"--binary: {cmd_error}")
        print(f"nodeconsole: cannot run the check: {cmd_error}", file=sys.stderr)
        return 1
    return _run_check(args, plan, cmd, out)


def _plan_dict(plan: LocalPlan, report: PreflightReport, cmd: LocalCommand | None,
               cmd_error: str) -> dict[str, object]:
    """The check's plan, preflight and command as --json prints them."""
    from nodeconsole.actions.nccl.commands import format_command

    out: dict[str, object] = {**plan.to_dict(), "preflight": [_finding_dict(f) for f in report.findings],
                              "libraries": [dataclasses.asdict(lib) for lib in report.libraries],
                              "command": None if cmd is None else {
                                  "argv": cmd.argv, "env": cmd.env, "kind": cmd.kind,
                                  "shell": format_command(cmd.argv, cmd.env)},
                              "command_error": cmd_error or None}
    return out


def _stall_printer(out: TextIO) -> Callable[[Stall], None]:
    def show(stall: Stall) -> None:
        print(f"  … {stall.message()} (Ctrl-C stops it)", file=out, flush=True)
    return show


def _run_check(args: argparse.Namespace, plan: LocalPlan, cmd: LocalCommand, out: dict[str, object]) -> int:
    """--run: run the check, printing progress, then its result (added to `out` with --json) and verdict."""
    from nodeconsole.actions.nccl.run import NcclRun

    progress_out = sys.stderr if args.json else sys.stdout
    run = NcclRun(cmd.argv, cmd.env, timeout=args.timeout,
                  on_progress=lambda p: print(_progress_line(p), file=progress_out, flush=True),
                  stall_after=args.stall, on_stall=_stall_printer(progress_out))
    try:
        result = run.run()
    except KeyboardInterrupt:
        run.cancel()  # Ctrl-C: nothing of the check may outlive us
        raise
    return _report_run(args, result, plan.topology, out)


def _report_run(args: argparse.Namespace, result: RunResult, topo: Topology, out: dict[str, object]) -> int:
    """The result of a run and its verdict (into `out` with --json); the exit status of the check."""
    from nodeconsole.actions.nccl.run import average_text

    findings = result.findings(topo)
    if args.json:
        out["run"] = {"exit_code": result.exit_code, "timed_out": result.timed_out, "cancelled": result.cancelled,
                      "duration_s": result.duration_s, "ok": result.ok, "stalls": result.stalls,
                      **parsed_dict(result.parsed), "stderr_tail": result.stderr_tail[-20:],
                      "findings": [_finding_dict(f) for f in findings]}
        print(json.dumps(out, indent=2))
    else:
        p = result.parsed
        stopped = "timed out" if result.timed_out else "cancelled" if result.cancelled else ""
        peak = f"  peak busbw {_num(p.peak_busbw)} GB/s" if p.rows else ""
        print(f"rows {len(p.rows)}  {average_text(p, stopped)}{peak}  out of bounds {_oob(p)}  "
              f"NCCL {p.version or '-'}  transports {_transports(p)}")
        print("verdict:")
        _print_findings(findings)
    return 0 if result.ok and not any(f.severity == "error" for f in findings) else 1


def _print_plan(plan: LocalPlan, report: PreflightReport, cmd: LocalCommand | None, cmd_error: str,
                will_run: bool) -> None:
    from nodeconsole.actions.nccl.commands import format_command

    t = plan.topology
    picked = " (picked: idle and healthy; see the skipped GPUs below)" if plan.automatic and plan.skipped else ""
    print(f"GPUs: {', '.join(f'{g.index} {g.address} ({g.name}, node {g.numa_node})' for g in plan.gpus) or 'none'}"
          f"{picked}")
    print(f"topology: {len(plan.gpus)} GPU(s), NVLink {'yes' if t.nvlink else 'no'}"
          f"{'' if plan.nvlink_known else ' (unknown, assumed)'}, P2P {'possible' if t.p2p else 'not possible'} "
          f"({plan.p2p_reason})")
    exp = plan.expected
    print(f"expected peak bus bandwidth: {exp if exp is not None else 'no reference figure'}")
    print("preflight:" if report.findings else "preflight: nothing found")
    _print_findings(report.findings)
    if cmd is not None:
        print(f"{'running' if will_run else 'would run'} ({cmd.kind}): {format_command(cmd.argv, cmd.env)}")
    else:
        print(f"no command: {cmd_error}")
    sys.stdout.flush()


# -- check --vm ------------------------------------------------------------------------------------------
def _reachable(seams: Seams) -> str:
    """Why this host's guests cannot be reached from here ("" when they can)."""
    if seams.is_demo:
        return ("the demo host's VMs are simulated (libvirt's test driver): there is no guest to run the check "
                "in; on a real host this command runs it")
    if not seams.is_this_machine:
        return "a captured host's VMs cannot be reached from this machine"
    return ""


def _vm_check(args: argparse.Namespace, snap: HostSnapshot, seams: Seams, sweep: list[str]) -> int:
    """--vm NAME: plan the check inside the VM, show it, and with --run run it there."""
    from nodeconsole.actions.nccl.guest import DestinationError, plan_guest_check
    from nodeconsole.actions.nccl.pick import selection_findings
    from nodeconsole.actions.nccl.snapshot_topology import local_plan

    try:
        plan = plan_guest_check(snap, args.vm, method=args.via or "ssh", destination=args.ssh_dest,
                                binary=args.binary, sweep=sweep, uri=seams.libvirt_uri,
                                reachable=_reachable(seams))
    except DestinationError as e:
        raise UsageError(f"--ssh: {e}") from None
    except ValueError as e:
        raise UsageError(f"--vm: {e}") from None
    # The host-side view of the VM's GPUs (link, memory errors); inside the guest nothing is checked.
    findings = selection_findings(plan.gpus, allow_unhealthy=args.allow_unhealthy)
    topo = dataclasses.replace(local_plan(snap, plan.gpus, seams.root, nvlink=args.nvlink).topology,
                               gpus_per_node=plan.ngpus)
    out: dict[str, object] = {**plan.to_dict(), "preflight": [_finding_dict(f) for f in findings]}
    if not args.json:
        _print_vm_plan(plan, findings, will_run=args.run and not plan.refusal)
    if not args.run:
        if args.json:
            print(json.dumps(out, indent=2))
        return 0
    if plan.refusal:
        raise UsageError(f"--run: {plan.refusal}")
    return _run_vm_check(args, plan, topo, out, seams.libvirt_uri)


def _print_vm_plan(plan: GuestPlan, findings: list[Finding], will_run: bool) -> None:
    from nodeconsole.actions.nccl.commands import format_command

    gpus = ", ".join(f"{g.index} {g.address} ({g.name})" for g in plan.gpus)
    print(f"VM {plan.vm}: {plan.ngpus} GPU(s) in the guest (host GPUs {gpus})")
    print(f"in the guest: {format_command(plan.guest_argv)}")
    if plan.method == "ssh":
        print(f"over ssh to the guest ({plan.address_note})")
    else:
        print("through the QEMU guest agent (guest-exec; the output comes when the check ends)")
    print("preflight (host side; the guest's NCCL setup is not checked from here):" if findings
          else "preflight (host side): nothing found")
    _print_findings(findings)
    print(f"{'running' if will_run else 'would run'}: {format_command(plan.argv)}")
    if plan.refusal:
        print(f"cannot run from here: {plan.refusal}")
    sys.stdout.flush()


def _run_vm_check(args: argparse.Namespace, plan: GuestPlan, topo: Topology, out: dict[str, object],
                  uri: str | None) -> int:
    from nodeconsole.actions.nccl.guest import AgentRun, SubprocessRunner
    from nodeconsole.actions.nccl.run import NcclRun

    progress_out = sys.stderr if args.json else sys.stdout

    def show(p: Progress) -> None:
        print(_progress_line(p), file=progress_out, flush=True)

    run: NcclRun | AgentRun
    if plan.method == "ssh":
        run = NcclRun(plan.argv, {}, timeout=args.timeout, on_progress=show, stall_after=args.stall,
                      on_stall=_stall_printer(progress_out))
    else:
        run = AgentRun(SubprocessRunner(), uri, plan.vm, plan.guest_argv,
                       timeout=args.timeout, on_progress=show)
    try:
        result = run.run()
    except KeyboardInterrupt:
        run.cancel()
        raise
    return _report_run(args, result, topo, out)


# -- command ---------------------------------------------------------------------------------------------
def run_command(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.commands import format_command, mpirun_command, torchrun_commands, validate_env

    if args.vm is not None:
        return _vm_env(args)
    if args.topo_path is not None:
        raise UsageError("--topo-path goes with --vm NAME")
    if args.hosts is None or args.gpus_per_host is None:
        raise UsageError("the following arguments are required: --hosts, --gpus-per-host (or --vm NAME)")
    if args.launcher == "torchrun" and args.binary is not None:
        raise UsageError("--binary is for --launcher mpirun (torchrun runs the PyTorch benchmark)")
    hosts = [h.strip() for h in args.hosts.split(",")]
    if any(not h for h in hosts):
        raise UsageError(f"--hosts {args.hosts!r}: an empty host name")
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    sweep = _sweep(args)
    try:
        env = validate_env(env)
        if args.launcher == "mpirun":
            lines = [("", mpirun_command(hosts, args.gpus_per_host, args.binary or "all_reduce_perf", sweep, env))]
            envs: dict[str, str] = {}
        else:
            lines = list(torchrun_commands(hosts, args.gpus_per_host, sweep))
            envs = {"NCCL_DEBUG": "INFO", **env}
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(json.dumps({"launcher": args.launcher, "commands": [
            {"host": h or None, "argv": argv, "env": envs, "shell": format_command(argv, envs)}
            for h, argv in lines]}, indent=2))
        return 0
    for host, argv in lines:
        if host:
            print(f"# on {host}:")
        print(format_command(argv, envs))
    return 0


# -- topo and command --vm -------------------------------------------------------------------------------
def _vm_topology(args: argparse.Namespace):  # -> VmTopology
    from nodeconsole.actions.nccl.topo_xml import vm_topology
    from nodeconsole.actions.plan import RequestError
    from nodeconsole.console.collector import Collector

    seams = seams_from_args(args)
    snap = Collector(seams).collect()
    try:
        return vm_topology(snap, args.vm, cpuinfo=seams.root.read("proc/cpuinfo") or "")
    except RequestError as e:
        raise UsageError(str(e)) from None


def run_topo(args: argparse.Namespace) -> int:
    topo = _vm_topology(args)
    if args.output is None:
        sys.stdout.write(topo.xml)
    else:
        write_file(args.output, topo.xml)
        print(f"wrote {args.output}: the NCCL topology of VM {topo.vm} ({len(topo.gpus)} GPU(s), "
              f"{len(topo.nics)} NIC function(s)); in the guest: NCCL_TOPO_FILE=<its path there>", file=sys.stderr)
    for note in topo.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def write_file(path: str, text: str) -> None:
    """Write `text` to `path` with mode 0644, never through a symlink (console/outfile.py)."""
    from nodeconsole.console.outfile import OutputError, write_output

    try:
        write_output(path, text.encode("utf-8"), 0o644)
    except OutputError as e:
        raise UsageError(str(e)) from None


def _vm_env(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.topo_xml import DEFAULT_TOPO_PATH, guest_env

    for flag, value in (("--hosts", args.hosts), ("--gpus-per-host", args.gpus_per_host),
                        ("--binary", args.binary)):
        if value is not None:
            raise UsageError(f"{flag} does not go with --vm (the guest's environment is printed, no command)")
    if args.env or args.launcher != "mpirun":
        raise UsageError("--env and --launcher do not go with --vm (the guest's environment is printed, no command)")
    path = args.topo_path or DEFAULT_TOPO_PATH
    if not path.startswith("/") or any(c.isspace() or c in "'\"$`\\;&|<>" for c in path):
        raise UsageError(f"--topo-path {path!r}: give an absolute path without spaces or shell characters")
    topo = _vm_topology(args)
    items = guest_env(topo, path)
    if args.json:
        print(json.dumps({"vm": topo.vm, "env": {i.name: i.value for i in items if i.value is not None},
                          "unknown": {i.name: i.note for i in items if i.value is None},
                          "notes": {i.name: i.note for i in items if i.value is not None and i.note},
                          "topology_notes": topo.notes}, indent=2))
        return 0
    print(f"# NCCL environment for VM {topo.vm} ({len(topo.gpus)} GPU(s), {len(topo.nics)} NIC function(s)): set it "
          "in the guest")
    for i in items:
        if i.value is None:
            print(f"# export {i.name}=...  # {i.note}")
        else:
            print(f"export {i.name}={i.value}" + (f"  # {i.note}" if i.note else ""))
    for note in topo.notes:
        print(f"# note: {note}")
    return 0
