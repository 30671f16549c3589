"""`nodeconsole events`: GPU events from the kernel log (Xids, fallen off the bus, PCIe AER, the host's
failures around passthrough: D3cold, RmInitAdapter, a BAR, a reset), each with the VM holding its GPU.

With --kernel-log FILE the file is read (any of the text forms, mixed; `-` reads stdin) and VMs are
named only when a host is given too (--demo/--root/--libvirt/--replay): a pasted log is another machine's
unless you say which. Without it the host's own log is read (/dev/kmsg on this machine; a tree's
var/log/kern.log and the demo's .sim/kmsg) and a snapshot of that host names the VMs; the guests of the
running VMs holding GPUs are asked for theirs through their guest agents (console/guest_watch.py; at
once, WAIT_S at most in all; `--no-guests` asks none): their events are the host GPUs', `source` "guest".
A VM whose guest log cannot be read is a note on stderr ("guest log unavailable: reason"), not an error."""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from nodeconsole.console.cli_base import seams_from_args, subcommand
from nodeconsole.console.event_time import boot_time, on_wall_clock, parse_boot_time, since
from nodeconsole.console.events import KernelEvent, parse_duration, tie_to_vms, within
from nodeconsole.console.gpu_events import GUEST_LOG
from nodeconsole.console.hosttext import LINE_MAX, show
from nodeconsole.console.seams import Seams
from nodeconsole.console.sources.kernel_log import SIM_KMSG, KernelLog, LogDenied, host_sources, read_host
from nodeconsole.console.usage import UsageError

EXIT_DENIED = 1


def duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@subcommand("events", "GPU events from the kernel log (Xid, fallen off the bus, PCIe AER, host failures) and the VM "
                      "holding each GPU")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-log", metavar="FILE",
                   help="read this log instead of the host's: dmesg, dmesg -T, journalctl -k or /dev/kmsg records "
                        "(mixed is fine; - reads stdin)")
    p.add_argument("--since", metavar="DURATION", type=duration,
                   help="only events in the DURATION before now (a replay: before its capture) — 30s, 10m, 2h, 1d; "
                        "events with only an uptime are judged against the log's newest entry")
    p.add_argument("--boot-time", metavar="RFC3339", type=boot_time_arg,
                   help="with --kernel-log: when the log's host booted (2026-12-01T08:00:00Z), so that its "
                        "seconds-since-boot stamps get wall-clock times")
    p.add_argument("--json", action="store_true",
                   help="print a list of {time (RFC 3339 UTC), gpu, xid, pid, process, text, severity, action, vm, "
                        "kind (xid, aer, host), port, vms, uptime_s, logged (the log's own stamp), failure (host: "
                        "D3cold, RmInitAdapter, BAR reserve, FLR timeout, …), source (host or guest)}")
    p.add_argument("--no-guests", action="store_true",
                   help="do not ask the VMs' guest agents for their kernel logs (the guests' Xids)")
    p.set_defaults(func=run)


def boot_time_arg(text: str) -> float:
    try:
        return parse_boot_time(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _note(text: str) -> None:
    print(f"nodeconsole: {text}", file=sys.stderr)


def _read_file(path: str, log: KernelLog) -> list[KernelEvent]:
    if path == "-":
        return list(log.events(sys.stdin.buffer))
    try:
        with open(path, "rb", buffering=0) as f:
            return list(log.events(f))
    except PermissionError as e:
        raise LogDenied(e.errno, e.strerror, path) from None
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
        raise UsageError(f"--kernel-log {path}: {e.strerror.lower() if e.strerror else e}") from None


def run(args: argparse.Namespace) -> int:
    log = KernelLog()
    host_given = any(getattr(args, k, None) for k in ("demo", "root", "libvirt", "replay"))
    seams = seams_from_args(args) if host_given or args.kernel_log is None else None
    try:
        if args.kernel_log is not None:
            events = _read_file(args.kernel_log, log)
        else:
            assert seams is not None
            live = seams.live_kernel_log
            if not host_sources(seams.root, live):
                _note("no kernel log on this host (" + ("/dev/kmsg, /var/log/kern.log" if live else
                                                          f"var/log/kern.log, {SIM_KMSG} below the root") + ")")
            events = list(read_host(seams.root, live, log))
    except LogDenied as e:
        _note(f"error: reading {e.filename} needs root ({e.strerror}); run as root or pass --kernel-log FILE")
        return EXIT_DENIED
    except OSError as e:  # a read that fails half way (EIO, a vanished mount): one line, not a traceback
        _note(f"error: reading the kernel log failed: {e.strerror or e}")
        return EXIT_DENIED
    if args.boot_time is not None and args.kernel_log is None:
        raise UsageError("--boot-time is for --kernel-log FILE (a host's own log is dated with its own boot time)")
    now = seams.clock() if seams is not None else time.time()
    btime = args.boot_time if args.kernel_log is not None else (boot_time(seams.root) if seams else None)
    events = on_wall_clock(events, btime, now)
    guests = seams is not None and args.kernel_log is None and not args.no_guests and seams.guest_agent is not None
    if seams is not None and (events or guests):
        events = _tie_and_guests(seams, events, guests)
    if args.since is not None:
        dated, undated = since(events, args.since, now)
        kept, untimed = within(undated, args.since, log.newest)
        events = sorted(dated + kept, key=events.index)
        if untimed:
            _note(f"{untimed} event(s) have no time in the log: kept, --since cannot judge them")
    if args.json:
        print(json.dumps([ev.to_dict() for ev in events], indent=2))
    else:
        print("\n".join(plain(events)) if events else "no GPU events in the kernel log")
    return 0


def _tie_and_guests(seams: Seams, events: list[KernelEvent], guests: bool) -> list[KernelEvent]:
    """The events tied to the host's VMs and, with `guests`, the guests' events after them (in time)."""
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.guest_watch import WAIT_S, by_time

    collector = Collector(seams)
    collector.read_guests = guests
    collector.guest_wait_s = WAIT_S
    try:
        events = tie_to_vms(events, collector.collect())
    finally:
        collector.close()
    if collector.guests is None:
        return events
    for vm, note in sorted(collector.guests.notes.items()):
        _note(f"VM {show(vm, 64)}: {note}")
    return list(by_time(tuple(events), collector.guests.events))


def plain(events: Sequence[KernelEvent]) -> list[str]:
    """One line per event, in log order (newest last): time, GPU, what, severity, VM, text, action."""
    width = max((len(show(ev.when, 40)) for ev in events), default=1)
    lines = []
    for ev in events:
        who = ""
        if ev.pid is not None or ev.process:
            who = f" (pid {ev.pid if ev.pid is not None else '?'}{' ' + show(ev.process) if ev.process else ''})"
        vm = (show(ev.vm, 64) if ev.vm else "-") + (" (its guest's log)" if ev.source == GUEST_LOG else "")
        lines.append(f"{show(ev.when, 40):{width}}  {ev.gpu}  {ev.what:8} {ev.severity:9}  vm {vm}  "
                     f"{show(ev.text, LINE_MAX)}{who}  → {ev.action}")
    return lines
