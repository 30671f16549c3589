"""The exporter's GPU event counters and health series (console/exporter_events.py), and its first answer:
every GPU has its counters at 0 before its first event (so an alert's increase() sees that event), the
counts never go down while the collector's window of events rolls, the health verdict is served as it is
in the snapshot, and nothing is reported down that was not read."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.console.collector import Collector
from nodeconsole.console.exporter import Sampler, families
from nodeconsole.console.exporter_events import AER_SEVERITIES, EventCounter
from nodeconsole.console.gpu_events import AER, HEALTH_STATES, XID, KernelEvent
from nodeconsole.console.seams import demo_host
from nodeconsole.console.xid import SEVERITIES as XID_SEVERITIES
from tests.console.test_exporter import one, samples

GPU0, GPU4 = "0000:18:00.0", "0000:9a:00.0"


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A demo host of this test's own (events are injected into its kernel log)."""
    from nodeconsole.console.demo.state import ensure_demo

    d = tmp_path / "demo"
    ensure_demo(d)
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
    collector = Collector(demo_host(d))
    yield collector
    collector.close()


def inject(*event: str) -> None:
    from nodeconsole.console.cli import main

    assert main(["demo", "inject", *event]) == 0


def counters(m, address: str) -> dict[tuple[str, str], float]:
    out = {}
    for name in ("nodeconsole_gpu_xid_events_by_severity_total", "nodeconsole_gpu_aer_events_total",
                 "nodeconsole_gpu_fallen_off_bus_events_total"):
        for s in m.get(name, []):
            if s.labels["address"] == address:
                out[(name, s.labels.get("severity", ""))] = s.value
    return out


def test_counters_are_zero_before_the_first_event_then_count_it_once(demo, capsys):
    sampler = Sampler(demo, interval=3600, doctor=False)
    m = samples(families(sampler.take()))
    gpus = [g.address for g in sampler.latest.snap.gpus]
    for addr in gpus:  # every GPU, every severity: a series at 0 before any event
        c = counters(m, addr)
        assert len(c) == len(XID_SEVERITIES) + len(AER_SEVERITIES) + 1 and set(c.values()) == {0}, (addr, c)
    assert "nodeconsole_gpu_xid_events_total" not in m  # the per-code counter: no code seen yet
    inject("xid", GPU0, "79")
    inject("aer", GPU4, "fatal")
    capsys.readouterr()
    for _ in range(2):  # the second sample reads nothing new: nothing counted twice
        m = samples(families(sampler.take()))
        assert one(m, "nodeconsole_gpu_xid_events_by_severity_total", address=GPU0, severity="fatal").value == 1
        assert one(m, "nodeconsole_gpu_fallen_off_bus_events_total", address=GPU0).value == 1
        assert one(m, "nodeconsole_gpu_xid_events_total", address=GPU0, xid="79").value == 1
        # the port's line and the device's line are one AER error
        assert one(m, "nodeconsole_gpu_aer_events_total", address=GPU4, severity="fatal").value == 1
        assert one(m, "nodeconsole_gpu_aer_events_total", address=GPU4, severity="corrected").value == 0
        assert one(m, "nodeconsole_gpu_aer_events_total", address=GPU0, severity="fatal").value == 0
        # the health verdict, as the snapshot has it
        assert one(m, "nodeconsole_gpu_health", address=GPU4, state="unhealthy").value == 1
        assert one(m, "nodeconsole_gpu_health", address=GPU4, state="healthy").value == 0
        reasons = [s.labels["reason"] for s in m["nodeconsole_gpu_health_reason"] if s.labels["address"] == GPU4]
        assert len(reasons) == 1 and reasons[0].startswith("uncorrectable AER error (fatal) at ")


def test_events_in_the_log_before_the_exporter_started_are_its_baseline(demo, capsys):
    """What the log held at the first sample is not counted (an exporter restart re-fires no alert); the
    health verdict still says it."""
    inject("xid", GPU0, "48")
    capsys.readouterr()
    m = samples(families(Sampler(demo, interval=3600, doctor=False).take()))
    assert set(counters(m, GPU0).values()) == {0}
    assert one(m, "nodeconsole_gpu_health", address=GPU0, state="unhealthy").value == 1


def test_health_series_match_every_gpus_verdict(_shared):
    collector = Collector(demo_host(_shared))
    try:
        sample = Sampler(collector, interval=3600, doctor=False).take()
    finally:
        collector.close()
    m = samples(families(sample))
    for g in sample.snap.gpus:
        states = {s.labels["state"]: s.value for s in m["nodeconsole_gpu_health"] if s.labels["address"] == g.address}
        assert states == {st: (1.0 if st == g.health.state else 0.0) for st in HEALTH_STATES}
        reasons = {s.labels["reason"] for s in m["nodeconsole_gpu_health_reason"] if s.labels["address"] == g.address}
        assert reasons == set(g.health.reasons)
    gpu7 = one(m, "nodeconsole_gpu_health", address="0000:bb:00.0", state="degraded")
    assert gpu7.value == 1 and gpu7.labels["index"] == "7" and gpu7.labels["model"]


def test_a_reason_label_shows_control_characters(_shared):
    from nodeconsole.console.exporter import Sample
    from nodeconsole.console.gpu_events import UNHEALTHY, Health

    collector = Collector(demo_host(_shared))
    try:
        snap = collector.collect()
    finally:
        collector.close()
    bad = replace(snap.gpus[0], health=Health(UNHEALTHY, ("NVML: boom\n\x1b[2J", "x" * 500)))
    m = samples(families(Sample(replace(snap, gpus=(bad, *snap.gpus[1:])))))
    reasons = sorted(s.labels["reason"] for s in m["nodeconsole_gpu_health_reason"] if s.labels["address"] == GPU0)
    assert reasons[0] == "NVML: boom\\x0a\\x1b[2J" and len(reasons[1]) <= 200


def _event(n: int, gpu: str, kind: str, severity: str) -> KernelEvent:
    return KernelEvent(kind=kind, time=f"{n}.0", gpu=gpu, xid=79 if kind == XID else None, pid=None, process=None,
                       text=f"event {n}", severity=severity, action="", stamp=float(n))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=30))
def test_counts_never_go_down_while_the_window_rolls(_shared_snap, batches):
    """The collector keeps its newest KEEP events (here 5); batches of up to KEEP new events between two
    samples are each counted once, and a count never goes down."""
    keep = 5
    window: deque[KernelEvent] = deque(maxlen=keep)
    counter = EventCounter()
    read = 0
    counter.update(read, (), _shared_snap)
    last = 0
    for i, size in enumerate(batches):
        for j in range(size):
            window.append(_event(read + j, GPU0, AER if (i + j) % 2 else XID, "fatal"))
        read += size
        c = counter.update(read, tuple(window), _shared_snap)
        total = c.aer.get((GPU0, "fatal"), 0) + c.xid.get((GPU0, "fatal"), 0)
        assert total == read and total >= last
        assert c.fell.get(GPU0, 0) == c.xid.get((GPU0, "fatal"), 0)
        last = total


@pytest.fixture(scope="module")
def _shared_snap(_shared):
    collector = Collector(demo_host(_shared))
    try:
        yield collector.collect()
    finally:
        collector.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_first_answer_reports_no_source_down_on_a_healthy_host(_shared):
    """`nodeconsole exporter` answers only once its first sample is taken: asked as soon as its port
    accepts, the first answer has every source up and none at 0."""
    port = free_port()
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(_shared)}
    proc = subprocess.Popen([sys.executable, "-m", "nodeconsole.console", "exporter", "--demo", "--listen",
                             f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the exporter did not answer within 60 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                    text = r.read().decode()
                break
            except OSError:
                time.sleep(0.005)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    up = re.findall(r'^nodeconsole_source_up\{source="(\w+)"\} (\S+)$', text, re.M)
    assert sorted(up) == [("libvirt", "1.0"), ("nvml", "1.0"), ("psutil", "1.0"), ("sysfs", "1.0")], up


def test_before_the_first_sample_no_source_is_reported():
    m = samples(families(None))
    assert "nodeconsole_source_up" not in m and one(m, "nodeconsole_build_info").value == 1
