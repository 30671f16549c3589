"""The hypervisor in the exporter's series and in `fleet`: `nodeconsole_host_info` and every VM series carry
`hypervisor` ("libvirt" | "proxmox"); fleet counts the hosts of each kind, and libvirt's version drifts only
among libvirt hosts (a Proxmox VE host has none). Asserted on the exposition text and on Prometheus-shaped
answers (the real Prometheus run is tests/console/test_fleet.py's)."""
from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodeconsole.console.collector import Collector
from nodeconsole.console.exporter import Sampler, registry_for
from nodeconsole.console.fleet import fleet_report, render_text
from nodeconsole.console.seams import demo_host
from tests.console.test_capture import cli


def _exposition(state_dir) -> dict[str, list]:
    collector = Collector(demo_host(state_dir))
    try:
        sampler = Sampler(collector, interval=3600, doctor=False)
        sample = sampler.take()
        text = generate_latest(registry_for(lambda: sample)).decode()
    finally:
        collector.close()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_a_proxmox_hosts_series_say_proxmox(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    assert cli("demo", "reset", "--proxmox")[0] == 0
    m = _exposition(tmp_path / "demo")
    (host,) = m["nodeconsole_host_info"]
    assert host.labels["hypervisor"] == "proxmox"
    info = {s.labels["vm"]: s.labels for s in m["nodeconsole_vm_info"]}
    assert info["train-a"] == {"vm": "train-a", "state": "running", "hypervisor": "proxmox"}
    for name in ("nodeconsole_vm_vcpus", "nodeconsole_vm_pinned", "nodeconsole_vm_memory_bytes"):
        assert m[name] and {s.labels["hypervisor"] for s in m[name]} == {"proxmox"}, name
    vcpus = next(s for s in m["nodeconsole_vm_vcpus"] if s.labels["vm"] == "train-b")
    assert vcpus.value == 16


def test_a_libvirt_hosts_series_say_libvirt(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    assert cli("demo", "reset")[0] == 0
    m = _exposition(tmp_path / "demo")
    assert m["nodeconsole_host_info"][0].labels["hypervisor"] == "libvirt"
    assert {s.labels["hypervisor"] for s in m["nodeconsole_vm_info"]} == {"libvirt"}


def _info(instance: str, libvirt: str, hypervisor: str | None) -> dict:
    labels = {"instance": instance, "hostname": instance, "driver": "550.90.07", "kernel": "6.8.0", "libvirt": libvirt}
    if hypervisor is not None:
        labels["hypervisor"] = hypervisor
    return {"metric": labels, "value": [0, "1"]}


def test_fleet_counts_both_kinds_of_host():
    answers = {"nodeconsole_host_info": [_info("a:9842", "10.0.0", "libvirt"), _info("b:9842", "10.0.0", None),
                                         _info("c:9842", "", "proxmox")]}
    report = fleet_report(lambda q: answers.get(q, []))
    assert report["hypervisors"] == {"libvirt": 2, "proxmox": 1}
    assert [h["hypervisor"] for h in report["hosts"]] == ["libvirt", "libvirt", "proxmox"]  # b: an older exporter
    assert report["majority"]["libvirt"] == "10.0.0"
    assert all(not h["drift"] for h in report["hosts"])  # the Proxmox host has no libvirt: that is no drift
    assert render_text(report)[0].startswith("3 host(s) (libvirt 2, proxmox 1); majority: driver 550.90.07")


def test_a_libvirt_host_still_drifts_from_the_libvirt_majority():
    answers = {"nodeconsole_host_info": [_info("a:1", "10.0.0", "libvirt"), _info("b:1", "10.0.0", "libvirt"),
                                         _info("c:1", "9.0.0", "libvirt"), _info("d:1", "", "proxmox")]}
    hosts = {h["instance"]: h for h in fleet_report(lambda q: answers.get(q, []))["hosts"]}
    assert hosts["c:1"]["drift"] == [{"field": "libvirt", "value": "9.0.0", "majority": "10.0.0"}]
    assert hosts["d:1"]["drift"] == []
