"""`nodeconsole fleet`: a real Prometheus (Debian's package) scrapes three demo-host exporters with
injected differences, and `fleet --json` must name them and say of every GPU what the host's own health
verdict (and its doctor) says; plus the CLI's bad-URL and unreachable paths."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main

DRAINED_GPU = "0000:ba:00.0"  # GPU 6, unbound in the demo
PROMETHEUS = "/usr/bin/prometheus"
DRIFTED_DRIVER = "535.183.01"
BAD_GPU = "0000:18:00.0"


def prometheus_binary() -> str:
    if not os.path.exists(PROMETHEUS):
        msg = f"{PROMETHEUS} not installed (Debian package prometheus; scripts/setup.sh --test installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return PROMETHEUS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_host(d: Path, monkeypatch: pytest.MonkeyPatch, *, driver: str | None = None,
              ecc_gpu: str | None = None, align_train_b: bool = False, drain: str | None = None) -> None:
    from nodeconsole.console.demo.state import ensure_demo

    ensure_demo(d)
    nvml = json.loads((d / "nvml.json").read_text())
    if driver is not None:
        nvml["driver_version"] = driver
    for g in nvml["gpus"]:
        if g["address"] == ecc_gpu:
            g["ecc"]["volatile_uncorrected"] = g["ecc"]["aggregate_uncorrected"] = 3
    (d / "nvml.json").write_text(json.dumps(nvml))
    if align_train_b:  # train-b is cross-NUMA in the demo: pin it onto its GPUs' node
        monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
        assert main(["--demo", "pin", "train-b", "--apply", "--yes"]) == 0
    if drain is not None:  # an admin's drain mark, read by the host's exporter
        monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
        assert main(["--demo", "gpu", "drain", drain, "--reason", "fan noise", "--apply", "--yes"]) == 0


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.exporter import Sampler, registry_for
    from nodeconsole.console.metrics_http import serve_metrics
    from nodeconsole.console.seams import demo_host

    binary = prometheus_binary()
    base = tmp_path_factory.mktemp("fleet")
    specs = {"a": {"driver": DRIFTED_DRIVER, "align_train_b": True},  # drifted driver
             "b": {"ecc_gpu": BAD_GPU, "align_train_b": True},         # an unhealthy GPU
             "c": {"drain": DRAINED_GPU}}                              # train-b misaligned, a GPU drained
    servers, collectors, instances, samples = [], [], {}, {}
    proc = None
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name, spec in specs.items():
                make_host(base / name / "demo", mp, **spec)
        for name in specs:
            collector = Collector(demo_host(base / name / "demo"))
            collectors.append(collector)
            sampler = Sampler(collector, interval=3600)
            samples[name] = sampler.take()
            server, _t = serve_metrics("127.0.0.1", 0, registry_for(lambda s=sampler: s.latest))
            servers.append(server)
            instances[name] = f"127.0.0.1:{server.server_port}"
        config = base / "prometheus.yml"
        targets = ", ".join(f"'{i}'" for i in instances.values())
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          f"scrape_configs:\n  - job_name: nodeconsole\n    static_configs:\n      - targets: [{targets}]\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(base / "prometheus.log", "wb")
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={base / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (base / "prometheus.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{url}/api/v1/query?query=nodeconsole_host_info", timeout=2) as r:
                    if len(json.load(r)["data"]["result"]) == 3:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus did not scrape all three exporters within 30 s"
            time.sleep(0.2)
        yield url, instances, samples
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
        for s in servers:
            s.shutdown()
            s.server_close()
        for c in collectors:
            c.close()


def test_fleet_names_what_was_injected(prometheus, capsys):
    url, inst, _samples = prometheus
    assert main(["fleet", "--prometheus", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    hosts = {h["instance"]: h for h in report["hosts"]}
    assert set(hosts) == set(inst.values())
    a, b, c = hosts[inst["a"]], hosts[inst["b"]], hosts[inst["c"]]
    # drift: only host a's driver differs from the majority
    assert report["majority"]["driver"] == "550.90.07"
    assert {"field": "driver", "value": DRIFTED_DRIVER, "majority": "550.90.07"} in a["drift"]
    assert not [d for h in (b, c) for d in h["drift"] if d["field"] in ("driver", "kernel", "libvirt", "mig")]
    # the unhealthy GPU: ECC errors since the driver loaded on GPU 18:00.0 of host b only
    assert [g["address"] for g in b["unhealthy_gpus"]] == [BAD_GPU]
    assert b["unhealthy_gpus"][0]["reasons"] == ["3 uncorrectable ECC errors since the driver loaded"]
    assert not a["unhealthy_gpus"] and not c["unhealthy_gpus"]
    for h in (a, b, c):  # GPU 7 (pending rows, link x8 of x16) is degraded in every host, and only it
        assert [g["address"] for g in h["degraded_gpus"]] == ["0000:bb:00.0"]
        assert "row remapping pending (reset the GPU to apply it)" in h["degraded_gpus"][0]["reasons"]
    # the misaligned VM: train-b, left cross-NUMA only in host c (the demo's other misaligned VMs are
    # the same in all three)
    assert "train-b" in c["misaligned_vms"]
    assert set(c["misaligned_vms"]) - {"train-b"} == set(a["misaligned_vms"]) == set(b["misaligned_vms"])
    assert "train-b" not in a["misaligned_vms"] + b["misaligned_vms"]
    for h in (a, b, c):
        assert h["gpus_by_owner"] and sum(h["gpus_by_owner"].values()) == 10
        assert h["console"] == "ssh -t 127.0.0.1 nodeconsole"
    # the text view says the same in lines
    assert main(["fleet", "--prometheus", url]) == 0
    text = capsys.readouterr().out
    assert f"drift: driver {DRIFTED_DRIVER} (majority 550.90.07)" in text
    assert f"unhealthy GPU 0 {BAD_GPU}: 3 uncorrectable ECC errors since the driver loaded" in text
    assert "degraded GPU 7 0000:bb:00.0: " in text
    assert "train-b" in text.split(inst["c"])[1].split("console:")[0]
    # the drained GPU: host c's only, listed with its index (the reason stays on the host)
    assert [g["address"] for g in c["drained_gpus"]] == [DRAINED_GPU] and not a["drained_gpus"] + b["drained_gpus"]
    assert c["drained_gpus"][0]["index"] == "6"
    assert f"drained GPU 6 {DRAINED_GPU}: no new work" in text.split(inst["c"])[1]


def test_fleet_and_the_hosts_agree_on_every_gpu(prometheus, capsys):
    """fleet judges nothing itself: for every GPU of every host, its state and reasons are the snapshot's
    verdict; and its links are what the doctor says of them (GPU 4's gen 1 of gen 5 at idle is normal,
    GPU 7's x8 of x16 is not)."""
    url, inst, samples = prometheus
    assert main(["fleet", "--prometheus", url, "--json"]) == 0
    hosts = {h["instance"]: h for h in json.loads(capsys.readouterr().out)["hosts"]}
    checked = 0
    for name, sample in samples.items():
        h = hosts[inst[name]]
        said = {g["address"]: g for g in (*h["unhealthy_gpus"], *h["degraded_gpus"])}
        link = next(c for c in sample.doctor.checks if c.id == "pcie-link")
        for g in sample.snap.gpus:
            fleet = said.get(g.address, {"state": "healthy", "reasons": []})
            assert (fleet["state"], fleet["reasons"]) == (g.health.state, sorted(g.health.reasons)), g.address
            doctor_narrow = f"GPU {g.index} {g.address} at x" in link.finding
            assert doctor_narrow == any(r.startswith("PCIe link x") for r in fleet["reasons"]), (g.address, link.finding)
            checked += 1
        assert "GPU 4 at 2.5 GT/s PCIe of 32.0 GT/s PCIe" in link.finding  # the doctor's note: normal at idle
        assert "0000:9a:00.0" not in said
    assert checked == 30  # 10 GPUs on each of 3 hosts


@pytest.mark.parametrize("url", ["ftp://prom:9090", "prom:9090", "http://", "http://h:99999"])
def test_bad_url(url, capsys):
    assert main(["fleet", "--prometheus", url]) == 2
    err = capsys.readouterr().err
    assert "--prometheus" in err and len(err.strip().splitlines()) == 1


def test_unreachable_prometheus(capsys):
    assert main(["fleet", "--prometheus", f"http://127.0.0.1:{free_port()}", "--timeout", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("nodeconsole fleet: cannot reach Prometheus") and len(err.splitlines()) == 1
