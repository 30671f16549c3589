"""One health verdict per GPU (console/health.py): the rules, the event window, and the verdict in the
snapshot of the demo host after injected events, with wall-clock times."""
from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.gpu_events import AER, BOOT, XID, KernelEvent
from nodeconsole.console.health import (
    CORRECTED_AER_REPEATED,
    LINK_NARROW,
    LINK_OK,
    LINK_SLOW,
    HealthBook,
    judge,
    link_state,
    window_start,
)
from nodeconsole.console.model import NA, Gpu, GpuOwner, NvLink, PciLink

FULL = PciLink("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
GPU = Gpu(address="0000:9a:00.0", name="H100", uuid="GPU-1", driver="nvidia", numa_node=1,
          owner=GpuOwner("host"), link=FULL, nvlink_state=NA)


def ev(kind: str, severity: str, xid: int | None = None, wall: float | None = 1000.0) -> KernelEvent:
    return KernelEvent(kind=kind, time="1.0", gpu=GPU.address, xid=xid, pid=None, process=None, text="t",
                       severity=severity, action="reset GPU", clock=BOOT, stamp=1.0, wall=wall, uptime_s=1.0)


@pytest.mark.parametrize("events,changes,state,reason", [
    ((), {}, "healthy", None),
    ((ev(XID, "fatal", 79),), {}, "unhealthy", "Xid 79"),
    ((ev(XID, "fatal", 48),), {}, "unhealthy", "Xid 48"),
    ((ev(AER, "fatal"),), {}, "unhealthy", "uncorrectable AER error (fatal)"),
    ((ev(AER, "nonfatal"),), {}, "unhealthy", "uncorrectable AER error (nonfatal)"),
    ((ev(XID, "warning", 63),), {}, "degraded", "Xid 63"),
    ((ev(XID, "error", 13),), {}, "healthy", None),  # an application's error: the GPU is fine
    ((ev(AER, "corrected"),) * (CORRECTED_AER_REPEATED - 1), {}, "healthy", None),
    ((ev(AER, "corrected"),) * CORRECTED_AER_REPEATED, {}, "degraded", "corrected AER errors"),
    ((), {"ecc_volatile_uncorrected": 2}, "unhealthy", "uncorrectable ECC errors since the driver loaded"),
    ((), {"ecc_aggregate_uncorrected": 2, "ecc_volatile_uncorrected": 0}, "degraded", "in its lifetime"),
    ((), {"remapped_rows_failure": 1}, "unhealthy", "row remapping failed"),
    ((), {"remapped_rows_pending": 1}, "degraded", "row remapping pending"),
    ((), {"link": PciLink("32.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16)}, "degraded", "PCIe link x8 of x16"),
    ((), {"link": PciLink("2.5 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)}, "healthy", None),  # idle: normal
    ((), {"clock_events": ("gpu_idle", "hw_thermal_slowdown")}, "degraded", "hw_thermal_slowdown"),
    ((), {"clock_events": ("sw_power_cap",)}, "healthy", None),  # a busy GPU at its power limit
    ((), {"nvml_error": "GPU is lost"}, "unhealthy", "GPU is lost"),
    ((), {"nvlinks": (NvLink(0, True), NvLink(1, False))}, "unhealthy", "NVLink 1 down"),
    ((), {"nvlinks": (NvLink(0, False), NvLink(1, False))}, "healthy", None),  # no NVLink in use
    ((), {"nvlinks": (NvLink(0, False), NvLink(1, False)), "fabric_state": "completed"}, "unhealthy", "NVLink 0,1"),
])
def test_verdict_rules(events, changes, state, reason):
    h = judge(replace(GPU, **changes), events)
    assert h.state == state
    if reason is None:
        assert h.reasons == ()
    else:
        assert any(reason in r for r in h.reasons), h.reasons


def test_unhealthy_reasons_come_before_degraded_ones():
    g = replace(GPU, remapped_rows_pending=1, link=PciLink("32.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16))
    h = judge(g, (ev(AER, "fatal"),))
    assert h.state == "unhealthy" and "AER" in h.reasons[0] and len(h.reasons) == 3


def test_link_rule_is_one_function():
    assert link_state(FULL) == LINK_OK
    assert link_state(PciLink("2.5 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)) == LINK_SLOW
    assert link_state(PciLink("2.5 GT/s PCIe", 8, "32.0 GT/s PCIe", 16)) == LINK_NARROW


def test_window_ends_at_boot_reset_or_bound():
    old = ev(XID, "fatal", 79, wall=100.0)
    assert judge(GPU, (old,), window_start(50.0, None, 1000.0, None)).state == "unhealthy"
    assert judge(GPU, (old,), window_start(200.0, None, 1000.0, None)).state == "healthy"  # rebooted since
    assert judge(GPU, (old,), window_start(50.0, 150.0, 1000.0, None)).state == "healthy"  # reset since
    assert judge(GPU, (old,), window_start(50.0, None, 1000.0, 600.0)).state == "healthy"  # older than the bound
    undated = ev(XID, "fatal", 79, wall=None)  # cannot be placed before the window: it counts
    assert judge(GPU, (undated,), 500.0).state == "unhealthy"


def test_a_gpu_bound_to_nvidia_again_is_reset():
    book = HealthBook()
    fatal = (ev(XID, "fatal", 48, wall=100.0),)
    (g,) = book.judge_all((GPU,), {GPU.address: fatal}, btime=10.0, now=200.0)
    assert g.health.state == "unhealthy" and g.events == fatal
    # the same inputs hand on the same object
    assert book.judge_all((GPU,), {GPU.address: fatal}, btime=10.0, now=200.0)[0] is g
    book.judge_all((replace(GPU, driver="vfio-pci"),), {GPU.address: fatal}, btime=10.0, now=300.0)
    (g,) = book.judge_all((GPU,), {GPU.address: fatal}, btime=10.0, now=400.0)
    assert g.health.state == "healthy" and book.resets[GPU.address] == 400.0


def _snapshot(capsys) -> dict:
    assert main(["snapshot", "--demo", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_injected_events_are_dated_now_and_judge_the_gpu(state, capsys):
    before = time.time()
    assert main(["demo", "inject", "aer", "0000:9a:00.0", "fatal", "--demo"]) == 0
    assert main(["demo", "inject", "xid", "0000:bb:00.0", "48", "--demo"]) == 0
    capsys.readouterr()
    assert main(["events", "--demo", "--json", "--since", "10m"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [(e["gpu"], e["kind"]) for e in events] == [("0000:9a:00.0", "aer"), ("0000:bb:00.0", "xid")]
    for e in events:
        assert e["time"].endswith("Z") and e["uptime_s"] > 0
        wall = time.mktime(time.strptime(e["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert before - 2 <= wall <= time.time() + 2
    gpus = {g["address"]: g for g in _snapshot(capsys)["gpus"]}
    assert gpus["0000:9a:00.0"]["health"]["state"] == "unhealthy"
    assert "uncorrectable AER error (fatal)" in gpus["0000:9a:00.0"]["health"]["reasons"][0]
    assert [e["kind"] for e in gpus["0000:9a:00.0"]["events"]] == ["aer"]
    assert gpus["0000:18:00.0"]["health"] == {"state": "healthy", "reasons": [], "since": gpus["0000:18:00.0"]["health"]["since"]}


def test_since_drops_events_older_than_now(state, capsys):
    # an event an hour old (the kmsg record's uptime set back) is dropped by --since 10m, kept by --since 2h
    from nodeconsole.console.demo.kmsg import _boot_time

    root = state / "root"
    up = int((time.time() - 3600 - _boot_time(root)) * 1e6)
    (root / ".sim").mkdir(exist_ok=True)
    (root / ".sim/kmsg").write_text(f"3,1,{up},-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    assert main(["demo", "inject", "xid", "0000:19:00.0", "48", "--demo"]) == 0
    capsys.readouterr()
    assert main(["events", "--demo", "--json", "--since", "10m"]) == 0
    assert [e["gpu"] for e in json.loads(capsys.readouterr().out)] == ["0000:19:00.0"]
    assert main(["events", "--demo", "--json", "--since", "2h"]) == 0
    assert [e["gpu"] for e in json.loads(capsys.readouterr().out)] == ["0000:18:00.0", "0000:19:00.0"]


def test_a_reboot_ends_the_window(state, capsys):
    # kern.log (kept on the disk across a reboot, unlike the kernel's ring buffer): an Xid 79 just now
    log = state / "root/var/log/kern.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%b %e %H:%M:%S", time.gmtime(time.time() - 5))  # TZ=UTC in the tests
    log.write_text(f"{stamp} gpu-node-01 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, "
                   "GPU has fallen off the bus.\n")
    assert _snapshot(capsys)["gpus"][0]["health"]["state"] == "unhealthy"
    assert main(["demo", "reboot", "--demo"]) == 0
    capsys.readouterr()
    g = _snapshot(capsys)["gpus"][0]
    assert g["health"]["state"] == "healthy", g["health"]
    # the event is still in the log, from before this boot
    assert main(["events", "--demo", "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)
    assert e["xid"] == 79 and e["uptime_s"] < 0
