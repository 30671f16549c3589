"""Kernel-log times on the wall clock.

The log writes three kinds of time (console/gpu_events.py): seconds since boot (dmesg, /dev/kmsg), a
date with a year (dmesg -T, ISO stamps) and a syslog date without one (journalctl -k, kern.log). Each
becomes seconds since the epoch:

- since boot: plus the boot time of the host being read (`btime` in the root's proc/stat: this machine's,
  a captured tree's, the demo's), or the one given (`events --kernel-log FILE --boot-time T`); without
  one the event keeps its uptime alone;
- a date with a zone (`…Z`, `…+02:00`) is that moment; a date without one is the host's local time (the
  zone of the process reading it: `TZ`);
- a syslog date takes the year that puts it at most a day after `now` (the newest stamps of a log are
  this year's; December's in January are last year's).
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import replace

from nodeconsole.console.gpu_events import BOOT, DATE, SYSLOG, KernelEvent
from nodeconsole.console.root import Root

_ZONED = re.compile(r"(?:Z|[+-][0-9]{2}:?[0-9]{2})\Z")
_SLACK = 86400.0  # a syslog date up to a day past `now` (clock skew, a zone) is still this year's


def boot_time(root: Root) -> float | None:
    """The host's boot time (seconds since the epoch) from its proc/stat `btime` line; None without one."""
    try:
        text = root.read("proc/stat")
    except OSError:
        return None
    for line in (text or "").splitlines():
        if line.startswith("btime "):
            value = line[6:].strip()
            return float(value) if value.isdigit() else None
    return None


def parse_boot_time(text: str) -> float:
    """An RFC 3339 time (`2026-12-01T08:00:00Z`, `…+01:00`) → seconds since the epoch; ValueError when it
    is not one or has no zone."""
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time (e.g. 2026-12-01T08:00:00Z)") from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone (add Z for UTC, or +HH:MM)")
    return when.timestamp()


def _local(naive_utc_stamp: float) -> float:
    """A stamp made by reading a local date as if it were UTC → the moment it names in the local zone."""
    naive = dt.datetime.fromtimestamp(naive_utc_stamp, dt.UTC).replace(tzinfo=None)
    return naive.timestamp()


def _syslog(stamp: float, now: float) -> float | None:
    """A syslog stamp (its date counted in 2000, see kernel_log.py) in the year that puts it at most a day
    after `now`."""
    naive = dt.datetime.fromtimestamp(stamp, dt.UTC).replace(tzinfo=None)
    year = dt.datetime.fromtimestamp(now).year
    for y in (year + 1, year, year - 1, year - 2, year - 3, year - 4):
        try:
            wall = naive.replace(year=y).timestamp()
        except ValueError:  # Feb 29 in a year without one
            continue
        if wall <= now + _SLACK:
            return wall
    return None


def wall_of(ev: KernelEvent, btime: float | None, now: float) -> tuple[float | None, float | None]:
    """(wall clock, uptime) of an event."""
    if ev.stamp is None or ev.clock is None:
        return None, None
    if ev.clock == BOOT:
        return (btime + ev.stamp if btime is not None else None), ev.stamp
    wall: float | None
    if ev.clock == DATE:
        zoned = ev.time is not None and _ZONED.search(ev.time) is not None
        wall = ev.stamp if zoned else _local(ev.stamp)
    elif ev.clock == SYSLOG:
        wall = _syslog(ev.stamp, now)
    else:
        return None, None
    return wall, (wall - btime if wall is not None and btime is not None else None)


def on_wall_clock(events: Iterable[KernelEvent], btime: float | None, now: float) -> list[KernelEvent]:
    """The events with `wall` and `uptime_s` set."""
    out = []
    for ev in events:
        wall, up = wall_of(ev, btime, now)
        out.append(ev if (wall, up) == (ev.wall, ev.uptime_s) else replace(ev, wall=wall, uptime_s=up))
    return out


def since(events: Iterable[KernelEvent], seconds: float, now: float) -> tuple[list[KernelEvent], list[KernelEvent]]:
    """(events at most `seconds` before `now`, events without a wall-clock time to judge)."""
    kept, untimed = [], []
    for ev in events:
        if ev.wall is None:
            untimed.append(ev)
        elif now - ev.wall <= seconds:
            kept.append(ev)
    return kept, untimed
