"""`nodeconsole nccl check`: preflight for the host's GPUs (or a VM's, with --vm) and, with --run, the
check itself with progress row by row, judged against the topology (actions/cli/nccl.py registers it)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from nodeconsole.console.cli_base import seams_from_args
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:  # the NCCL checks are imported when a command runs
    from nodeconsole.actions.nccl.commands import LocalCommand
    from nodeconsole.actions.nccl.expect import Topology
    from nodeconsole.actions.nccl.finding import Finding
    from nodeconsole.actions.nccl.guest import GuestPlan
    from nodeconsole.actions.nccl.preflight import PreflightReport
    from nodeconsole.actions.nccl.run import Stall, SweepProgress, SweepResult
    from nodeconsole.actions.nccl.snapshot_topology import LocalPlan
    from nodeconsole.console.model import HostSnapshot
    from nodeconsole.console.seams import Seams

from nodeconsole.actions.cli.nccl_text import (
    _finding_dict,
    _num,
    _oob,
    _print_findings,
    _sweep,
    _transports,
    parsed_dict,
    size_label,
)


def _progress_line(p: SweepProgress) -> str:
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


def _check_args(args: argparse.Namespace) -> tuple[list[int] | None, list[str] | None, list[str]]:
    """The checks of `nccl check`'s arguments (UsageError): the GPUs by console index, or as named
    otherwise (smi:N, address, UUID), and the sweep."""
    from nodeconsole.actions.nccl.snapshot_topology import parse_gpu_list

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
    return indices, named, sweep


def run_check(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.snapshot_topology import (
        local_check_command,
        local_plan,
        select_gpus,
        snapshot_preflight,
    )
    from nodeconsole.console.collector import Collector

    indices, named, sweep = _check_args(args)
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
                                  this_machine=seams.local_programs)
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


def _report_run(args: argparse.Namespace, result: SweepResult, topo: Topology, out: dict[str, object]) -> int:
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
def _vm_check(args: argparse.Namespace, snap: HostSnapshot, seams: Seams, sweep: list[str]) -> int:
    """--vm NAME: plan the check inside the VM, show it, and with --run run it there."""
    from nodeconsole.actions.nccl.guest import DestinationError, plan_guest_check
    from nodeconsole.actions.nccl.pick import selection_findings
    from nodeconsole.actions.nccl.snapshot_topology import local_plan

    try:
        plan = plan_guest_check(snap, args.vm, method=args.via or "ssh", destination=args.ssh_dest,
                                binary=args.binary, sweep=sweep, uri=seams.libvirt_uri,
                                reachable=seams.guests_unreachable)
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

    def show(p: SweepProgress) -> None:
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
