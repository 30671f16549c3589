"""`nodeconsole exporter`: metric families of the demo host, a failing and a slow source, the textfile,
the HTTP server, promtool's check of the metrics, the dashboard's queries (the alerting rules:
test_alert_rules.py; event counters and health series: test_exporter_events.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeconsole.console.collector import Collector
from nodeconsole.console.exporter import Sampler, families, registry_for
from nodeconsole.console.seams import demo_host

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/nodeconsole-alerts.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        msg = "promtool not installed (Debian package prometheus; scripts/setup.sh --test installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def samples(fams) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in fams:
        for s in f.samples:
            out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture(scope="module")
def sampled(_shared):
    collector = Collector(demo_host(_shared))
    sampler = Sampler(collector, interval=3600)
    collector.collect()
    sampler.take()
    yield sampler
    collector.close()


@pytest.fixture(scope="module")
def demo_metrics(sampled) -> dict[str, list]:
    return samples(families(sampled.latest))


def one(metrics, name, **labels):
    hits = [s for s in metrics.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_demo_families(demo_metrics):
    m = demo_metrics
    for src in ("sysfs", "nvml", "libvirt", "psutil"):
        assert one(m, "nodeconsole_source_up", source=src).value == 1
    info = one(m, "nodeconsole_gpu_info", owner="vfio", vm="train-a")
    assert info.labels["driver"] == "vfio-pci" and info.labels["smi"] == "" and info.labels["uuid"] == ""
    assert one(m, "nodeconsole_gpu_info", address="0000:3a:00.0").labels["owner"] == "mig"
    assert one(m, "nodeconsole_vm_numa_aligned", vm="train-b").value == 0
    assert one(m, "nodeconsole_vm_numa_aligned", vm="train-a").value == 1
    assert not [s for s in m["nodeconsole_vm_numa_aligned"] if s.labels["vm"] == "db-1"]  # no GPU: no series
    assert one(m, "nodeconsole_vm_pinned", vm="web-1").value == 0
    assert one(m, "nodeconsole_vm_vcpus", vm="train-b").value == 16
    # NVML does not see a vfio GPU: its temperature has no series (not 0); sysfs still gives its link
    assert not [s for s in m["nodeconsole_gpu_temperature_celsius"] if s.labels["address"] == "0000:19:00.0"]
    assert one(m, "nodeconsole_gpu_pcie_link_width", address="0000:19:00.0", state="max").value == 16
    # the demo's GPU 7: link x8 of x16, a row remapping pending
    assert one(m, "nodeconsole_gpu_pcie_link_width", address="0000:bb:00.0", state="current").value == 8
    assert one(m, "nodeconsole_gpu_remapped_rows_pending", address="0000:bb:00.0").value == 1
    assert one(m, "nodeconsole_gpu_mig_instances", address="0000:3a:00.0", profile="3g.40gb").value == 1
    assert one(m, "nodeconsole_gpu_vgpu_instances", address="0000:3b:00.0").value >= 1
    total = one(m, "nodeconsole_gpu_memory_total_bytes", address="0000:18:00.0").value
    assert total > 70 * 2**30
    assert 0 <= one(m, "nodeconsole_gpu_utilization_ratio", address="0000:18:00.0").value <= 1
    assert one(m, "nodeconsole_iommu_enabled").value == 1
    assert one(m, "nodeconsole_problems", severity="warning").value > 0
    host = one(m, "nodeconsole_host_info")
    assert host.labels["hostname"] == "gpu-node-01" and host.labels["driver"]
    import libvirt  # the test driver runs in this process: its version is the library's

    from nodeconsole.console.sources.libvirt_src import format_version

    assert host.labels["libvirt"] == format_version(libvirt.getVersion()) and host.labels["libvirt"].count(".") == 2
    # every doctor check: exactly one status is 1
    checks = {s.labels["check"] for s in m["nodeconsole_doctor_check"]}
    assert "iommu" in checks
    for c in checks:
        assert sum(s.value for s in m["nodeconsole_doctor_check"] if s.labels["check"] == c) == 1


def test_failing_and_slow_source(_shared):
    """NVML raises: nvml is 0, the rest is served. NVML hangs: a scrape answers at once from the last
    sample while the sampler waits."""
    collector = Collector(demo_host(_shared))
    gate = threading.Event()
    mode = {"nvml": "fail"}

    def nvml():
        if mode["nvml"] == "slow":
            gate.wait(30)
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    collector._read_nvml = nvml  # type: ignore[method-assign]
    sampler = Sampler(collector, interval=0.05, doctor=False)
    try:
        sampler.take()
        m = samples(families(sampler.latest))
        assert one(m, "nodeconsole_source_up", source="nvml").value == 0
        assert one(m, "nodeconsole_source_up", source="libvirt").value == 1
        assert one(m, "nodeconsole_gpu_info", address="0000:19:00.0").labels["vm"] == "train-a"
        assert one(m, "nodeconsole_vm_vcpus", vm="train-a").value == 16
        mode["nvml"] = "slow"
        registry = registry_for(lambda: sampler.latest)
        sampler.start()
        time.sleep(0.2)  # the sampler is now stuck in NVML
        text, took = _scrape(registry)
        assert took < 0.5, took
        assert 'nodeconsole_source_up{source="nvml"} 0.0' in text
    finally:
        sampler.stop()
        gate.set()
        collector.close()


def _scrape(registry) -> tuple[str, float]:
    """One scrape over a real HTTP server on an ephemeral port: the text and how long the request took."""
    from nodeconsole.console.metrics_http import serve_metrics

    server, _thread = serve_metrics("127.0.0.1", 0, registry)
    try:
        t0 = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as r:
            return r.read().decode(), time.monotonic() - t0
    finally:
        server.shutdown()
        server.server_close()


def test_http_scrape_and_promtool_metrics(sampled):
    text, _took = _scrape(registry_for(lambda: sampled.latest))
    fams = {f.name for f in text_string_to_metric_families(text)}
    assert {"nodeconsole_gpu_info", "nodeconsole_vm_numa_aligned", "nodeconsole_source_up"} <= fams
    proc = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_textfile_cli(state_ro, tmp_path, capsys):
    from nodeconsole.actions.cli import main

    out = tmp_path / "nodeconsole.prom"
    out.write_text("stale-content\n")
    assert main(["exporter", "--demo", "--textfile", str(out)]) == 0
    text = out.read_text()
    assert 'nodeconsole_gpu_info{' in text and "stale-content" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodeconsole.prom"]  # no temp file left behind


@pytest.mark.parametrize("listen", ["9842", "host:", "1.2.3.4:99999", "a b:1"])
def test_bad_listen(listen, state_ro, capsys):
    from nodeconsole.actions.cli import main

    assert main(["exporter", "--demo", "--listen", listen]) == 2
    assert "--listen" in capsys.readouterr().err


def test_unit_file_is_hardened():
    unit = (REPO / "deploy/nodeconsole-exporter.service").read_text()
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "ReadOnlyPaths=/",
                 "PrivateTmp=yes"):
        assert f"\n{line}\n" in unit
    assert "nodeconsole exporter --listen 0.0.0.0:9842" in unit


def test_dashboard_and_rules_query_only_metrics_the_exporter_serves(sampled):
    """The shipped Grafana dashboard is valid JSON whose every panel query (and every alerting rule)
    names nodeconsole_ metrics that the exporter really serves: a renamed metric breaks this test, not
    the admin's dashboard."""
    import json
    import re

    repo = Path(__file__).resolve().parents[2]
    fams = list(families(sampled.latest))  # every family, also those without a sample on the demo
    served = {f.name for f in fams} | {f"{f.name}_total" for f in fams if f.type == "counter"}
    dash = json.loads((repo / "deploy/grafana/nodeconsole-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs.append(dash["templating"]["list"][1]["query"])
    exprs.append((repo / "deploy/prometheus/nodeconsole-alerts.yml").read_text())
    names = {n for e in exprs for n in re.findall(r"nodeconsole_[a-z_]+", e)}
    assert len(dash["panels"]) >= 10 and {"nodeconsole_gpu_info", "nodeconsole_vm_numa_aligned"} <= names
    assert names <= served, sorted(names - served)
