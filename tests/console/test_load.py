"""Host load via psutil: the per-CPU busy arithmetic, real readings, thread independence, failures."""
from __future__ import annotations

import os
import threading
import time
from collections import namedtuple

import psutil
import pytest

from nodeconsole.console.sources import load
from nodeconsole.console.sources.load import LoadReader, busy_percent, read_load
from nodeconsole.console.sources.types import SourceError

T = namedtuple("T", "user nice system idle iowait irq softirq steal guest guest_nice")


def t(user=0.0, idle=0.0, iowait=0.0, guest=0.0, system=0.0) -> T:
    return T(user, 0.0, system, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


def test_busy_percent_arithmetic():
    before = [t(), t(), t(), t(user=5, idle=5)]
    after = [
        t(user=30, idle=70),  # plain: 30 %
        t(user=50, guest=50, idle=50),  # guest time is inside user: not counted twice → 50 %
        t(iowait=20, idle=80),  # waiting on IO is not work → 0 %
        t(user=5, idle=5),  # no time passed → 0, not a division error
    ]
    assert busy_percent(before, after) == (30.0, 50.0, 0.0, 0.0)
    assert busy_percent(before, after[:3]) == ()  # a CPU went away: positions no longer match


def _meminfo_kib(key: str) -> int:
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_real_readings():
    reader = LoadReader()
    first = reader.read()
    assert first.cpu_percent == ()  # primes only
    _burn(0.3)
    second = reader.read()
    assert len(second.cpu_percent) == psutil.cpu_count()
    assert all(0.0 <= p <= 100.0 for p in second.cpu_percent)
    # we kept one CPU busy for the whole interval: together the CPUs were at least half a CPU busy
    assert sum(second.cpu_percent) >= 50.0, second.cpu_percent
    assert second.memory_total_kib == _meminfo_kib("MemTotal")
    assert 0 < second.memory_available_kib <= second.memory_total_kib
    for ours, kernel in zip(second.load_avg, os.getloadavg()):
        assert ours == pytest.approx(kernel, abs=1.0)


def test_samples_survive_a_change_of_thread():
    # the collector reads from a fresh worker thread each tick; psutil's own interval=None state is
    # per thread and would give zeros forever
    reader = LoadReader()
    results = []
    for _ in range(2):
        th = threading.Thread(target=lambda: results.append(reader.read()))
        th.start()
        _burn(0.2)
        th.join()
    assert results[0].cpu_percent == ()
    assert len(results[1].cpu_percent) == psutil.cpu_count()
    assert sum(results[1].cpu_percent) > 0.0


def test_read_load_function():
    read_load()
    got = read_load()
    assert len(got.cpu_percent) == psutil.cpu_count()
    assert got.memory_total_kib == _meminfo_kib("MemTotal")


def test_psutil_failure_is_a_source_error(monkeypatch):
    def boom():
        raise PermissionError(13, "Permission denied", "/proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", boom)
    with pytest.raises(SourceError, match="Permission denied"):
        LoadReader().read()


def test_missing_psutil_is_a_source_error(monkeypatch):
    monkeypatch.setattr(load, "psutil", None)
    with pytest.raises(SourceError, match="psutil is not installed"):
        LoadReader().read()
