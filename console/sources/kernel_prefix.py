"""The start of a kernel-log line: its stamp, and whose line it is.

The forms (mixed freely in one file): `dmesg` (`[ 1843.308145] …`), `dmesg -T` (`[Sun Feb 23 16:24:18 2025] …`),
`dmesg --time-format iso` (`2024-10-02T10:41:07,123456+00:00 …`, a comma before the fraction), kmsg records
(`3,1234,5678901,-;…`), and the forms of syslog and the journal, which name the program that logged the
line: `Oct 02 10:41:07 host ident[pid]: …` (journalctl -o short, short-precise, kern.log, syslog),
`2024-10-02T10:41:07+0000 host ident: …` (short-iso, short-iso-precise, rsyslog's RFC 3339 stamps) and RFC 5424
(`<6>1 2024-10-02T10:41:07.1Z host kernel - - - …`). In those, only the kernel's lines (identifier
`kernel`) are read: a program's line that merely says `NVRM: Xid …` is no GPU event (`foreign`).

Every quantifier is bounded, so matching a prefix costs the same for any line.
"""
from __future__ import annotations

import calendar
import datetime as dt
import re

from nodeconsole.console.events import BOOT, DATE, SYSLOG

# The stamps each form starts its lines with (one source for the str and the bytes patterns).
_LEAD = r"(?:<[0-9]{1,3}>)?(?:[a-z]{2,8}\s{0,8}:[a-z]{2,8}\s{0,8}:\s)?"  # a priority (dmesg -r); dmesg -x
_KMSG = r"[0-9]{1,3},[0-9]{1,20},(?P<usec>[0-9]{1,20}),[^;\s]{0,16};"
_MONO = r"\[\s{0,12}(?P<mono>[0-9]{1,12}\.[0-9]{1,9})\]"
_CTIME = r"\[(?P<ctime>[A-Z][a-z]{2}\ [A-Z][a-z]{2}\ {1,2}[0-9]{1,2}\ [0-9]{2}:[0-9]{2}:[0-9]{2}\ [0-9]{4})\]"
_ISO = (r"(?:1\ )?"  # RFC 5424's version
        r"(?P<iso>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)")
_SYS = r"(?P<sys>[A-Z][a-z]{2}\ {1,2}[0-9]{1,2}\ [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?)"
# host and the kernel's identifier: syslog and the journal; RFC 5424 (APP-NAME PROCID MSGID STRUCTURED-DATA)
_TAG = r"(?P<tag>\ {1,4}[^\s\[]{1,255}\ {1,4}kernel:)"
_SD = r"(?:-|(?:\[(?:[^\]\\]|\\.){0,4096}\]){1,16})"
_TAG5424 = rf"(?P<tag5424>\ [^\s]{{1,255}}\ kernel\ [^\s]{{1,128}}\ [^\s]{{1,32}}\ {_SD})"
PREFIX = re.compile(
    _LEAD + f"(?:{_KMSG}|{_MONO}|{_CTIME}|{_ISO}|{_SYS})"
    + f"(?:{_TAG}|{_TAG5424})?"
    + r"(?:\ {0,4}\[\s{0,12}[0-9]{1,12}\.[0-9]{1,9}\])?"  # kern.log keeps the kernel's own stamp too
    + r"\ ?", re.A)
# The last line of each clock in a block gives the log's newest stamps (lines without events included)
BLOCK_STAMPS = tuple(re.compile((r"\n" + _LEAD + alternatives).encode(), re.A) for alternatives in (
    f"(?:{_KMSG}|{_MONO})", f"(?:{_CTIME}|{_ISO})", _SYS))
GROUPS = (("usec", "mono"), ("ctime", "iso"), ("sys",))
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), 1)}

Time = tuple[str | None, str | None, float | None]


def foreign(m: re.Match[str]) -> bool:
    """The line is in a form that always names the program that logged it (a syslog date, an ISO date
    other than dmesg's), and that program is not the kernel."""
    if m.group("tag") is not None or m.group("tag5424") is not None:
        return False
    iso = m.group("iso")
    return m.group("sys") is not None or (iso is not None and "," not in iso)


def line_foreign(raw: bytes, limit: int) -> bool:
    """`foreign` for a whole line (its first `limit` bytes)."""
    m = PREFIX.match(raw[:limit].decode("utf-8", "replace").lstrip())
    return m is not None and foreign(m)


def stamp(m: re.Match[str] | dict[str, str | None]) -> Time:
    """(time as written, clock, seconds) of a matched prefix (or of its groups)."""
    g = m if isinstance(m, dict) else m.groupdict()
    if (usec := g.get("usec")) is not None:
        n = int(usec)
        return f"{n // 1_000_000}.{n % 1_000_000:06d}", BOOT, n / 1e6
    if (mono := g.get("mono")) is not None:
        return mono, BOOT, float(mono)
    if (ctime := g.get("ctime")) is not None:  # Sun Feb 23 16:24:18 2025 (no locale: English names)
        _, mon, day, hms, year = ctime.split()
        month = _MONTHS.get(mon)
        h, mi, s = hms.split(":")
        return ctime, (DATE if month else None), (
            calendar.timegm((int(year), month, int(day), int(h), int(mi), int(s))) if month else None)
    if (iso := g.get("iso")) is not None:
        try:
            when = dt.datetime.fromisoformat(iso.replace(",", ".").replace("Z", "+00:00"))
        except ValueError:
            return iso, None, None
        secs = when.timestamp() if when.tzinfo else calendar.timegm(when.timetuple()) + when.microsecond / 1e6
        return iso, DATE, secs
    text = g.get("sys") or ""
    mon, day, hms = text.split()
    month = _MONTHS.get(mon)
    if not month:
        return text, None, None
    h, mi, s = hms.split(":")
    # no year: a leap year, so that Feb 29 is a date; events.within handles the turn of the year
    return text, SYSLOG, calendar.timegm((2000, month, int(day), int(h), int(mi), 0)) + float(s)


def head_foreign(block: bytes, start: int, stop: int, limit: int) -> bool | None:
    """For a line that starts with blanks at `start` (a continuation line): whether the record it continues
    is foreign, from the nearest line above that starts with no blank (empty lines are passed over, as a
    capture's gaps are). None when every line between `stop` and `start` continues a record (the record
    began at or before `stop`). Costs the length of block[stop:start]."""
    i = start
    while i > stop:
        j = block.rfind(b"\n", stop, i - 1) + 1 or stop
        line = block[j:i - 1]
        if line.strip() and not line[:1].isspace():
            return line_foreign(line, limit)
        i = j
    return None
