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


def test_a_tree_is_read_from_its_own_proc_files_never_the_machine(tmp_path):
    from nodeconsole.console.root import Root

    (tmp_path / "proc").mkdir()
    stat = tmp_path / "proc" / "stat"
    stat.write_text("cpu  9 9 9 9\ncpu0 100 0 0 100 0 0 0 0 0 0\ncpu1 0 0 0 200 0 0 0 0 0 0\ncpu2 0 0 0 0\n")
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:  1000 kB\nMemAvailable:  400 kB\n")
    (tmp_path / "proc" / "loadavg").write_text("1.50 2.00 0.25 3/400 999\n")
    reader = LoadReader(Root(tmp_path))
    first = reader.read()
    assert first.cpu_percent == () and first.memory_total_kib == 1000 and first.memory_available_kib == 400
    assert first.load_avg == (1.5, 2.0, 0.25)
    stat.write_text("cpu0 200 0 0 100 0 0 0 0 0 0\ncpu1 50 0 0 250 0 0 0 0 0 0\ncpu2 0 0 0 100\n")
    assert reader.read().cpu_percent == (100.0, 50.0, 0.0)  # three CPUs: the tree's, not this machine's


def test_a_tree_whose_proc_stat_does_not_change_is_parsed_once(tmp_path, monkeypatch):
    """A generated or captured tree's proc/stat never changes: it is parsed once, and the same sample
    again means no CPU time passed (0 % on each CPU, what the arithmetic gives); a new text is parsed."""
    from nodeconsole.console.root import Root

    (tmp_path / "proc").mkdir()
    stat = tmp_path / "proc" / "stat"
    stat.write_text("cpu0 100 0 0 100 0 0 0 0 0 0\ncpu1 0 0 0 200 0 0 0 0 0 0\n")
    parsed = []
    real = load.parse_stat
    monkeypatch.setattr(load, "parse_stat", lambda text: parsed.append(text) or real(text))
    reader = LoadReader(Root(tmp_path))
    assert reader.read().cpu_percent == ()
    same = reader.read().cpu_percent
    assert same == (0.0, 0.0) == busy_percent(real(stat.read_text()), real(stat.read_text()))
    assert len(parsed) == 1
    stat.write_text("cpu0 200 0 0 100 0 0 0 0 0 0\ncpu1 50 0 0 250 0 0 0 0 0 0\n")
    assert reader.read().cpu_percent == (100.0, 50.0) and len(parsed) == 2
    assert reader.read().cpu_percent == (0.0, 0.0) and len(parsed) == 2


def test_a_tree_without_proc_stat_is_a_source_error(tmp_path):
    from nodeconsole.console.root import Root

    with pytest.raises(SourceError, match="no proc/stat"):
        LoadReader(Root(tmp_path)).read()


def test_the_demo_reports_its_own_cpus(tmp_path):
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import demo_host

    collector = Collector(demo_host(tmp_path / "demo"))
    try:
        collector.collect()
        snap = collector.collect()
    finally:
        collector.close()
    assert snap.sources.psutil == "ok"
    assert len(snap.load.cpu_percent) == len([c for c in snap.cpus if c.online]) == 128
    assert snap.load.memory_total_kib == sum(n.memory_kib for n in snap.numa_nodes)
