"""Host load: per-CPU busy percent, memory, load average (psutil on this machine, the tree's own
proc files on the demo or a captured host).

Per-CPU percent is the busy share of each CPU between two calls (non-blocking). The first call only
takes the starting sample and returns no percentages (`cpu_percent == ()`). We keep that sample
ourselves instead of using `psutil.cpu_percent(interval=None)`, whose previous sample is kept per
calling thread: the collector polls from a new worker thread each tick, so it would always see a
"first call" and get zeros.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol

from nodeconsole.console.model import Load
from nodeconsole.console.root import Root
from nodeconsole.console.sources.types import SourceError

try:
    import psutil
except ImportError:
    psutil = None


class CpuTimes(Protocol):
    """One CPU's entry of `psutil.cpu_times(percpu=True)` (a named tuple of seconds; `guest`,
    `guest_nice` and `iowait` exist on Linux only)."""

    @property
    def idle(self) -> float: ...

    def __iter__(self) -> Iterator[float]: ...


def _total(t: CpuTimes) -> float:
    # guest time is already counted in user/nice on Linux (psutil and htop subtract it the same way)
    return sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _idle(t: CpuTimes) -> float:
    # iowait is idle time: the CPU waits, it does not work
    return t.idle + getattr(t, "iowait", 0.0)


def busy_percent(before: Sequence[CpuTimes], after: Sequence[CpuTimes]) -> tuple[float, ...]:
    """Busy percent per CPU between two `psutil.cpu_times(percpu=True)` samples; () when the CPU
    count changed between them (hotplug), since positions would no longer match."""
    if len(before) != len(after):
        return ()
    out = []
    for b, a in zip(before, after):
        total = _total(a) - _total(b)
        busy = total - (_idle(a) - _idle(b))
        pct = 100.0 * busy / total if total > 0 else 0.0
        out.append(round(min(100.0, max(0.0, pct)), 1))
    return tuple(out)


class StatTimes(NamedTuple):
    """One CPU's line of a /proc/stat read through the root seam (jiffies; the fields psutil names)."""
    user: float
    nice: float
    system: float
    idle: float
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0
    guest: float = 0.0
    guest_nice: float = 0.0


def parse_stat(text: str) -> list[StatTimes]:
    """The per-CPU lines of a /proc/stat."""
    times = []
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            try:
                times.append(StatTimes(*(float(x) for x in rest.split()[:10])))
            except (TypeError, ValueError):
                raise SourceError(f"unreadable proc/stat line {name}") from None
    return times


def _read_tree(root: Root, parse: Callable[[str], list[StatTimes]] = parse_stat,
               ) -> tuple[list[StatTimes], int, int, tuple[float, float, float]]:
    """(per-CPU times, MemTotal KiB, MemAvailable KiB, load average) from the files of a tree."""
    stat = root.read("proc/stat")
    if stat is None:
        raise SourceError(f"no proc/stat under {root.path}")
    times = parse(stat)
    mem: dict[str, int] = {}
    for line in (root.read("proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            mem[key] = int(parts[0])
    try:
        avg = [float(x) for x in (root.read("proc/loadavg") or "").split()[:3]]
    except ValueError:
        avg = []
    load = (avg[0], avg[1], avg[2]) if len(avg) == 3 else (0.0, 0.0, 0.0)
    return times, mem.get("MemTotal", 0), mem.get("MemAvailable", 0), load


class LoadReader:
    """Keeps the previous per-CPU sample; `read()` is safe to call from any thread. This machine
    (`root` is `/`) is read through psutil; any other tree (the demo host, a captured host) through its
    own proc/stat, proc/meminfo and proc/loadavg, never the machine running the console."""

    def __init__(self, root: Root | None = None) -> None:
        self._prev: list[CpuTimes] | None = None
        self._prev_from: Sequence[CpuTimes] | None = None  # the sample _prev was copied from
        self._lock = threading.Lock()
        self.root = root if root is not None and os.path.abspath(root.path) != "/" else None
        # a tree's proc/stat parsed, kept while its text stays the same (a generated or captured
        # tree's never changes: no need to parse a line per CPU every poll)
        self._stat: tuple[str, list[StatTimes]] | None = None

    def _parse(self, text: str) -> list[StatTimes]:
        kept = self._stat
        if kept is not None and kept[0] == text:
            return kept[1]
        times = parse_stat(text)
        self._stat = (text, times)
        return times

    def _sample(self, times: Sequence[CpuTimes]) -> tuple[float, ...]:
        with self._lock:
            if self._prev is None:
                percent: tuple[float, ...] = ()
            elif times is self._prev_from:  # the same sample again: no CPU time passed on any CPU
                percent = (0.0,) * len(times)
            else:
                percent = busy_percent(self._prev, times)
            self._prev, self._prev_from = list(times), times
        return percent

    def read(self) -> Load:
        if self.root is not None:
            times, total, available, avg = _read_tree(self.root, self._parse)
            return Load(cpu_percent=self._sample(times), memory_total_kib=total,
                        memory_available_kib=available, load_avg=avg)
        if psutil is None:
            raise SourceError("psutil is not installed (pip install psutil)")
        try:
            times = psutil.cpu_times(percpu=True)
            mem = psutil.virtual_memory()
            load_avg = tuple(float(x) for x in psutil.getloadavg())
        except (OSError, RuntimeError, AttributeError, psutil.Error) as e:
            raise SourceError(f"psutil cannot read the host load: {e}") from None
        return Load(cpu_percent=self._sample(times), memory_total_kib=int(mem.total) // 1024,
                    memory_available_kib=int(mem.available) // 1024,
                    load_avg=(load_avg[0], load_avg[1], load_avg[2]))


_reader = LoadReader()


def read_load() -> Load:
    """Host load now. The first call in a process returns `cpu_percent == ()` (it primes the sample);
    later calls give the busy percent of each CPU since the previous call."""
    return _reader.read()
