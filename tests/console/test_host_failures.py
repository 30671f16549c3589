"""The host's failures around passthrough as GPU events (kind host): a realistic log in every form, mixed
with enumeration lines and boot noise, gives exactly the failures; rm_init_adapter's second line; the
GPU's health verdict; a companion function's failure counts for its GPU; `events --kernel-log`; the
demo's `inject host`; long paddings cost no more than short ones."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.actions.cli import main
from nodeconsole.console.event_watch import describe, events_by_gpu, is_alarm
from nodeconsole.console.events import HOST, gpu_of, tie_to_vms
from nodeconsole.console.health import judge
from nodeconsole.console.host_failures import (
    BAR_RESERVE,
    D3COLD,
    FAILURES,
    FLR_TIMEOUT,
    INACCESSIBLE,
    NOT_READY,
    PENDING,
    POWER_REFUSED,
    RESET_TIMEOUT,
    RM_INIT,
)
from nodeconsole.console.model import Gpu, GpuOwner, Hostdev, PciLink, Vm
from nodeconsole.console.sources.kernel_log import WINDOW, parse
from nodeconsole.console.xid import FATAL, SEVERITIES, WARNING

ENUMERATION = [  # what a healthy boot and a VM start log about the same functions: never events
    "pci 0000:c2:00.0: [10de:2330] type 00 class 0x030200 PCIe Endpoint",
    "pci 0000:c2:00.0: BAR 0 [mem 0xe2000000-0xe2ffffff 64bit pref]",
    "pci 0000:c2:00.0: BAR 2 [mem 0x38000000000-0x3ffffffffff 64bit pref]",
    "pci 0000:c2:00.0: BAR 0: assigned [mem 0xe2000000-0xe2ffffff 64bit pref]",
    "pci 0000:c2:00.0: PME# supported from D0 D3hot D3cold",
    "pci 0000:c2:00.0: 252.048 Gb/s available PCIe bandwidth, limited by 16.0 GT/s PCIe x16 link at 0000:c0:01.1 "
    "(capable of 504.112 Gb/s with 32.0 GT/s PCIe x16 link)",
    "pci 0000:c2:00.0: Adding to iommu group 41",
    "vfio-pci 0000:c1:00.0: enabling device (0000 -> 0003)",
    "vfio-pci 0000:c1:00.0: resetting",
    "vfio-pci 0000:c1:00.0: reset done",
    "vfio-pci 0000:c1:00.0: not ready 1023ms after FLR; waiting",  # the kernel waits on: not yet a failure
    "vfio-pci 0000:c1:00.0: ready 1023ms after FLR",
    "nvidia 0000:41:00.0: enabling device (0000 -> 0003)",
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07",
    "NVRM: GPU 0000:41:00.0: rm_init_adapter succeeded",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
]

K = "Oct 02 10:41:07 gpu-node-01 kernel: "
LOG = "\n".join([
    *(K + line for line in ENUMERATION),
    "Oct 02 10:41:07 gpu-node-01 systemd[1]: Started libvirtd.service - libvirt legacy monolithic daemon.",
    # another program saying the kernel's words is no event
    "Oct 02 10:41:07 gpu-node-01 myscript[77]: vfio-pci 0000:c1:00.0: BAR 1: can't reserve [mem 0x1-0x2]",
    K + "vfio-pci 0000:c1:00.0: BAR 1: can't reserve [mem 0x38000000000-0x3ffffffffff 64bit pref]",
    *(f"[  810.{i:06d}] {line}" for i, line in enumerate(ENUMERATION)),
    "[  812.100000] vfio-pci 0000:c1:00.0: timed out waiting for pending transaction; performing function level "
    "reset anyway",
    "[  813.200000] vfio-pci 0000:c1:00.0: not ready 1023ms after FLR; waiting",
    "[  814.300000] vfio-pci 0000:c1:00.0: not ready 2047ms after FLR; waiting",
    "[  880.400000] vfio-pci 0000:c1:00.0: not ready 65535ms after FLR; giving up",
    "[  880.500000] vfio-pci 0000:c1:00.1: Refused to change power state from D0 to D3hot",
    *(f"6,{1000 + i},900000000,-;{line}" for i, line in enumerate(ENUMERATION)),
    "4,2001,901000000,-;nvidia 0000:41:00.0: not ready 65535ms after resume; giving up",
    "3,2002,901100000,-;nvidia 0000:41:00.0: Unable to change power state from D3cold to D0, device inaccessible",
    "3,2003,901200000,-;NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x26:0x56:1474)",
    "3,2004,901200100,-;NVRM: rm_init_adapter failed, device minor number 0",
    "2024-10-02T10:41:09+0000 gpu-node-01 kernel: vfio-pci 0000:c3:00.0: BAR 1 [mem 0x39000000000-0x39fffffffff "
    "64bit pref]: can't reserve",
    "2024-10-02T10:41:09+0000 gpu-node-01 kernel: pcieport 0000:c0:01.1: refused to change power state from D0 to "
    "D3hot",
    "[  900.000000] vfio-pci 0000:c5:00.0: not ready 65535ms after bus reset; giving up",
    "[  900.100000] nvidia 0000:45:00.0: Unable to change power state from D3hot to D0, device inaccessible",
]) + "\n"


def host(time, gpu, name, text) -> tuple:
    f = FAILURES[name]
    return ("host", time, gpu, name, f.severity, f.action, text)


WANT = [
    host("Oct 02 10:41:07", "0000:c1:00.0", BAR_RESERVE,
         "vfio-pci 0000:c1:00.0: BAR 1: can't reserve [mem 0x38000000000-0x3ffffffffff 64bit pref]"),
    host("812.100000", "0000:c1:00.0", PENDING, "vfio-pci 0000:c1:00.0: timed out waiting for pending transaction; "
                                                "performing function level reset anyway"),
    host("880.400000", "0000:c1:00.0", FLR_TIMEOUT, "vfio-pci 0000:c1:00.0: not ready 65535ms after FLR; giving up"),
    host("880.500000", "0000:c1:00.1", POWER_REFUSED,
         "vfio-pci 0000:c1:00.1: Refused to change power state from D0 to D3hot"),
    host("901.000000", "0000:41:00.0", NOT_READY, "nvidia 0000:41:00.0: not ready 65535ms after resume; giving up"),
    host("901.100000", "0000:41:00.0", D3COLD,
         "nvidia 0000:41:00.0: Unable to change power state from D3cold to D0, device inaccessible"),
    host("901.200000", "0000:41:00.0", RM_INIT, "GPU 0000:41:00.0: RmInitAdapter failed! (0x26:0x56:1474); "
                                                "rm_init_adapter failed, device minor number 0"),
    host("2024-10-02T10:41:09+0000", "0000:c3:00.0", BAR_RESERVE,
         "vfio-pci 0000:c3:00.0: BAR 1 [mem 0x39000000000-0x39fffffffff 64bit pref]: can't reserve"),
    host("2024-10-02T10:41:09+0000", "0000:c0:01.1", POWER_REFUSED,
         "pcieport 0000:c0:01.1: refused to change power state from D0 to D3hot"),
    host("900.000000", "0000:c5:00.0", RESET_TIMEOUT,
         "vfio-pci 0000:c5:00.0: not ready 65535ms after bus reset; giving up"),
    host("900.100000", "0000:45:00.0", INACCESSIBLE,
         "nvidia 0000:45:00.0: Unable to change power state from D3hot to D0, device inaccessible"),
]


def fields(ev) -> tuple:
    return (ev.kind, ev.time, ev.gpu, ev.failure, ev.severity, ev.action, ev.text)


def test_a_mixed_log_gives_exactly_the_failures():
    assert [fields(e) for e in parse(LOG)] == WANT


def test_enumeration_lines_are_no_events_in_any_form():
    for form in ("{}", "[ 1.5] {}", "6,1,1500000,-;{}", K + "{}", "2024-10-02T10:41:09,123456+00:00 {}"):
        assert parse("\n".join(form.format(line) for line in ENUMERATION) + "\n") == [], form


def test_every_failure_has_a_meaning_a_severity_and_an_action():
    for name, f in FAILURES.items():
        assert f.name == name and f.meaning and f.action and f.severity in SEVERITIES
    fatal = {n for n, f in FAILURES.items() if f.severity == FATAL}
    assert fatal == {D3COLD, INACCESSIBLE, NOT_READY, FLR_TIMEOUT, RESET_TIMEOUT, RM_INIT, BAR_RESERVE}
    assert {n for n, f in FAILURES.items() if f.severity == WARNING} == {PENDING, POWER_REFUSED}


# -- rm_init_adapter failed: the RmInitAdapter failure told again --
RM = "[ 13.7] NVRM: GPU {gpu}: RmInitAdapter failed! (0x26:0x56:1474)\n"
MINOR = "[ 13.8] NVRM: rm_init_adapter failed, device minor number {n}\n"
NOISE = "[ 13.9] usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"


def test_the_second_line_folds_into_the_rminitadapter_event_just_before():
    evs = parse(RM.format(gpu="0000:41:00.0") + MINOR.format(n=0) + RM.format(gpu="0000:42:00.0")
                + MINOR.format(n=1))
    assert [(e.gpu, e.text) for e in evs] == [
        ("0000:41:00.0", "GPU 0000:41:00.0: RmInitAdapter failed! (0x26:0x56:1474); rm_init_adapter failed, "
                         "device minor number 0"),
        ("0000:42:00.0", "GPU 0000:42:00.0: RmInitAdapter failed! (0x26:0x56:1474); rm_init_adapter failed, "
                         "device minor number 1")]


def test_a_second_line_naming_no_gpu_and_following_none_is_dropped():
    assert parse(MINOR.format(n=0)) == []
    # past the parser's window the RmInitAdapter line is no longer "just before"
    evs = parse(RM.format(gpu="0000:41:00.0") + NOISE * (WINDOW + 1) + MINOR.format(n=0))
    assert [e.text for e in evs] == ["GPU 0000:41:00.0: RmInitAdapter failed! (0x26:0x56:1474)"]
    # a line that already took its second line does not take another
    evs = parse(RM.format(gpu="0000:41:00.0") + MINOR.format(n=0) + MINOR.format(n=0))
    assert len(evs) == 1 and evs[0].text.count("minor") == 1


def test_a_second_line_naming_its_gpu_folds_into_that_gpus_event_or_stands_alone():
    newer = "[ 13.8] NVRM: GPU {gpu}: rm_init_adapter failed, device minor number 3\n"
    evs = parse(RM.format(gpu="0000:41:00.0") + newer.format(gpu="0000:d8:00.0") + newer.format(gpu="0000:41:00.0"))
    assert [(e.gpu, e.failure, e.text.count("minor")) for e in evs] == [
        ("0000:41:00.0", RM_INIT, 1), ("0000:d8:00.0", RM_INIT, 1)]
    assert evs[1].severity == FATAL


# -- health, attribution, the alarms --
FULL = PciLink("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
GPU = Gpu(address="0000:c1:00.0", name="H100", uuid="GPU-1", driver="vfio-pci", numa_node=1,
          owner=GpuOwner("vfio", ("train-a",)), link=FULL)


def _events():
    return {e.failure: e for e in parse(LOG)}


@pytest.mark.parametrize("name,state", [(D3COLD, "unhealthy"), (NOT_READY, "unhealthy"), (RM_INIT, "unhealthy"),
                                        (BAR_RESERVE, "unhealthy"), (FLR_TIMEOUT, "unhealthy"),
                                        (PENDING, "degraded"), (POWER_REFUSED, "degraded")])
def test_the_health_verdict_of_a_gpu_with_a_host_failure(name, state):
    ev = replace(_events()[name], gpu=GPU.address)
    h = judge(GPU, (ev,))
    assert h.state == state and h.reasons[0].startswith(f"host failure {name} on {GPU.address}")
    assert is_alarm(ev) == (state == "unhealthy")
    assert describe(ev) == f"host failure {name} ({FAILURES[name].meaning})"


def test_a_companion_functions_failure_belongs_to_its_gpu():
    evs = parse(LOG)
    snap = SimpleNamespace(gpus=(GPU,), vms=(), pci_devices=())  # what events_by_gpu reads of a snapshot
    mine = events_by_gpu(tuple(evs), snap)[GPU.address]
    assert [(e.gpu, e.failure) for e in mine] == [
        ("0000:c1:00.0", BAR_RESERVE), ("0000:c1:00.0", PENDING), ("0000:c1:00.0", FLR_TIMEOUT),
        ("0000:c1:00.1", POWER_REFUSED)]
    assert judge(GPU, mine).state == "unhealthy"
    # only the functions of a GPU's slot: the port above it and other slots keep their own address
    assert {gpu_of(e, {GPU.address}) for e in evs} == {
        GPU.address, "0000:41:00.0", "0000:c3:00.0", "0000:c0:01.1", "0000:c5:00.0", "0000:45:00.0"}
    # an Xid or AER on another function is not moved (only host failures are)
    assert gpu_of(replace(evs[3], kind="aer"), {GPU.address}) == "0000:c1:00.1"


def test_the_vm_holding_the_gpu_is_named_for_a_companion_functions_failure():
    vm = Vm(name="train-a", state="running", vcpus=8, hostdevs=(Hostdev("pci", GPU.address, gpu=GPU.address),))
    other = replace(GPU, owner=GpuOwner("vfio"))  # the VM alone names the holder
    tied = tie_to_vms(parse(LOG), SimpleNamespace(gpus=(other,), vms=(vm,), pci_devices=()))
    assert {(e.gpu, e.vm) for e in tied if e.vm} == {("0000:c1:00.0", "train-a"), ("0000:c1:00.1", "train-a")}


# -- the command line --
def test_events_kernel_log_shows_the_failures(tmp_path, capsys):
    path = tmp_path / "kern.log"
    path.write_text(LOG)
    assert main(["events", "--kernel-log", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(d["kind"], d["gpu"], d["failure"], d["severity"], d["action"], d["xid"]) for d in data] == [
        (k, gpu, name, sev, action, None) for k, _, gpu, name, sev, action, _ in WANT]
    assert all(d["kind"] == HOST for d in data)
    assert main(["events", "--kernel-log", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(WANT)
    assert "0000:41:00.0  host D3cold fatal" in lines[5] and lines[5].endswith(FAILURES[D3COLD].action)


def test_demo_inject_host_reaches_events_and_the_verdict(tmp_path, monkeypatch, capsys):
    from nodeconsole.console.demo.kmsg import HOST_FAILURES
    from nodeconsole.console.demo.state import ensure_demo

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    ensure_demo(tmp_path / "demo")
    wanted = {"d3cold": D3COLD, "inaccessible": INACCESSIBLE, "not-ready": NOT_READY, "flr-timeout": FLR_TIMEOUT,
              "reset-timeout": RESET_TIMEOUT, "rm-init": RM_INIT, "bar": BAR_RESERVE, "pending": PENDING,
              "power-refused": POWER_REFUSED}
    assert set(HOST_FAILURES) == set(wanted)
    assert main(["demo", "inject", "host", "0000:19:00.1", "pending", "--demo"]) == 0
    assert main(["demo", "inject", "host", "0000:19:00.0", "flr-timeout", "--demo"]) == 0
    assert main(["demo", "inject", "host", "0000:19:00.0", "sideways", "--demo"]) == 2
    assert main(["demo", "inject", "host", "0000:ff:00.0", "bar", "--demo"]) == 2
    capsys.readouterr()
    assert main(["events", "--demo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(d["gpu"], d["failure"], d["vm"]) for d in data] == [("0000:19:00.1", PENDING, "train-a"),
                                                                  ("0000:19:00.0", FLR_TIMEOUT, "train-a")]
    assert main(["snapshot", "--demo", "--json"]) == 0
    gpu = {g["address"]: g for g in json.loads(capsys.readouterr().out)["gpus"]}["0000:19:00.0"]
    assert gpu["health"]["state"] == "unhealthy" and "FLR timeout" in gpu["health"]["reasons"][0]
    assert [e["failure"] for e in gpu["events"]] == [PENDING, FLR_TIMEOUT]


def test_every_demo_failure_reads_back_as_its_event(tmp_path):
    from nodeconsole.console.demo.kmsg import HOST_FAILURES

    for key, lines in HOST_FAILURES.items():
        text = "".join(f"{p},1,1,-;{m.format(drv='vfio-pci', gpu='0000:19:00.0')}\n" for p, m in lines)
        (ev,) = parse(text)
        assert (ev.gpu, ev.kind) == ("0000:19:00.0", HOST) and ev.failure in FAILURES, key


# -- linear: a long padding anywhere reads as a short one --
LINES = [line for line in LOG.splitlines() if "kernel:" in line or not line.startswith("Oct")]
LINES = [line for line in LINES if parse(line + "\n")]  # the failure lines (one event each)
PADS = [" ", "\t", "=", "9", ":", "\x00", "[", "BAR ", "not ready ", "0000:"]
SHORT, LONG = 600, 12_000


def _boundaries(line: str) -> list[int]:
    return [i for i in range(len(line) + 1)
            if i in (0, len(line)) or line[i - 1].isalnum() != line[i].isalnum() or not line[i].isalnum()]


def _shape(text: str, pad: str) -> list[tuple]:
    run = re.compile(f"(?:{re.escape(pad)}){{2,}}")
    return [tuple(run.sub("<pad>", v) if isinstance(v, str) else v for v in fields(e)[2:]) for e in parse(text)]


def test_the_padding_lines_are_the_failures():
    assert len(LINES) == len(WANT) and not any("rm_init_adapter" in line for line in LINES)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LINES), st.data(), st.sampled_from(PADS))
def test_a_long_padding_anywhere_reads_as_a_short_one(line, data, pad):
    at = data.draw(st.sampled_from(_boundaries(line)))
    short = _shape(line[:at] + pad * (SHORT // len(pad)) + line[at:] + "\n", pad)
    assert _shape(line[:at] + pad * (LONG // len(pad)) + line[at:] + "\n", pad) == short
    assert len(short) <= 1
