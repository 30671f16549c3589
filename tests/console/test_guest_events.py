"""Guest-side Xids (console/guest_watch.py): which VMs are asked, how a guest's PCI addresses map to host
GPUs, the rate limit, the notes for VMs without an agent, the collector asking off its poll, and the
whole flow on the demo host (`demo inject xid GPU CODE --guest`, `events`, `snapshot`)."""
from __future__ import annotations

import json
import re
import threading
import time

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.collector import Collector
from nodeconsole.console.gpu_events import GUEST_LOG, HOST_LOG
from nodeconsole.console.guest_watch import GuestWatch, guest_targets, parse_guest_log
from nodeconsole.console.model import Hostdev, HostInfo, HostSnapshot, Iommu, Load, PciDevice, Sources, Vm
from nodeconsole.console.sources.guest_agent import GuestLogUnavailable

GPU_A, GPU_B, VF = "0000:19:00.0", "0000:9b:00.0", "0000:3a:00.4"


def _line(t: str, msg: str, host: str = "g") -> str:
    return f"{t} {host} kernel: {msg}\n"


def _snap(*vms: Vm) -> HostSnapshot:
    vf = PciDevice(VF, 0x10DE, 0x2330, 0x030200, "vfio-pci", 0, 40, None, physfn="0000:3a:00.0")
    return HostSnapshot(schema=1, taken_at=0.0, host=HostInfo(), cpus=(), numa_nodes=(), pci_devices=(vf,),
                        iommu=Iommu(enabled=True), gpus=(), vms=vms, load=Load(), sources=Sources())


def _pci(address: str, gpu: str | None, guest: str | None) -> Hostdev:
    return Hostdev(type="pci", address=address, gpu=gpu, guest_address=guest)


TRAIN_A = Vm("train-a", "running", 8, hostdevs=(_pci(GPU_A, GPU_A, "0000:07:00.0"), _pci("0000:19:00.1", GPU_A, "0000:08:00.0"),
                                                _pci("0000:1a:00.2", None, "0000:09:00.0")))


def test_targets_are_running_vms_holding_whole_gpus():
    two = Vm("two", "running", 8, hostdevs=(_pci(GPU_A, GPU_A, "0000:07:00.0"), _pci(GPU_B, GPU_B, "0000:08:00.0")))
    stopped = Vm("off", "shut off", 8, hostdevs=(_pci(GPU_B, GPU_B, "0000:07:00.0"),))
    vf_vm = Vm("vf", "running", 8, hostdevs=(_pci(VF, "0000:3a:00.0", "0000:07:00.0"),))
    nic = Vm("nic", "running", 8, hostdevs=(_pci("0000:1a:00.1", None, "0000:07:00.0"),))
    mdev = Vm("mdev", "running", 8, hostdevs=(Hostdev(type="mdev", uuid="u", gpu=GPU_B),))
    bare = Vm("bare", "running", 8, hostdevs=(_pci(GPU_B, GPU_B, None),))
    t = guest_targets(_snap(TRAIN_A, two, stopped, vf_vm, nic, mdev, bare, Vm("web", "running", 2)))
    assert set(t) == {"train-a", "two", "bare"}
    assert t["train-a"] == {"0000:07:00.0": GPU_A, "0000:07:00": GPU_A, "0000:08:00.0": GPU_A, "0000:08:00": GPU_A}
    assert t["two"]["0000:08:00"] == GPU_B
    assert t["bare"] == {"*": GPU_B}  # one GPU, no guest address: the guest's GPU events are its


def test_guest_addresses_map_to_host_gpus_and_other_devices_are_dropped():
    log = (_line("2026-12-02T10:15:03+0000", "NVRM: Xid (PCI:0000:07:00): 48, pid=1, name=x, DBE")
           + _line("2026-12-02T10:15:04+0100", "NVRM: Xid (PCI:0000:0a:00): 13, pid=2, name=y, Graphics Exception")
           + _line("2026-12-02T10:15:05+0000", "nvidia 0000:08:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                   "type=Transaction Layer, (Requester ID)")
           + _line("2026-12-02T10:15:06+0000", "NVRM: Xid (PCI:0000:07:00): 31, pid=3, name=z, MMU Fault", host="app")
           .replace(" kernel:", " python3[12]:"))
    evs = parse_guest_log(log.encode(), guest_targets(_snap(TRAIN_A))["train-a"], "train-a", time.time())
    assert [(e.kind, e.xid, e.gpu, e.vms, e.source) for e in evs] == [
        ("xid", 48, GPU_A, ("train-a",), GUEST_LOG), ("aer", None, GPU_A, ("train-a",), GUEST_LOG)]
    assert evs[0].wall == pytest.approx(time.mktime((2026, 12, 2, 10, 15, 3, 0, 0, 0)) - time.timezone)
    assert evs[0].to_dict()["source"] == "guest" and evs[0].to_dict()["vm"] == "train-a"
    assert evs[0].time == "2026-12-02T10:15:03+0000" and evs[0].port is None  # the guest's stamp; no host port


class Agent:
    """A guest agent answering from `logs` (VM → bytes or an exception), counting calls; `gate` holds
    every answer until set."""

    def __init__(self, logs: dict[str, object]) -> None:
        self.logs = logs
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def guest_kernel_log(self, vm_name: str) -> bytes:
        self.calls.append(vm_name)
        self.gate.wait(10)
        got = self.logs.get(vm_name, GuestLogUnavailable("no guest agent"))
        if isinstance(got, BaseException):
            raise got
        return got  # type: ignore[return-value]


XID79 = _line("2026-12-02T10:15:03+0000", "NVRM: Xid (PCI:0000:07:00): 79, pid=<unknown>, name=<unknown>, "
              "GPU has fallen off the bus.").encode()


def test_each_vm_is_asked_at_most_once_per_interval_and_keeps_its_events_when_it_stops_answering():
    now = [0.0]
    agent = Agent({"train-a": XID79})
    w = GuestWatch(agent, every_s=60.0, clock=lambda: now[0])
    snap = _snap(TRAIN_A, Vm("noagent", "running", 4, hostdevs=(_pci(GPU_B, GPU_B, "0000:07:00.0"),)))
    w.poll(snap, wait_s=5)
    assert sorted(agent.calls) == ["noagent", "train-a"]
    assert [(e.xid, e.gpu, e.vm) for e in w.events] == [(79, GPU_A, "train-a")]
    assert w.notes == {"noagent": "guest log unavailable: no guest agent"}
    now[0] = 59.0
    w.poll(snap, wait_s=5)
    assert len(agent.calls) == 2  # not due yet
    agent.logs["train-a"] = GuestLogUnavailable("the guest agent is not responding")  # the guest hung
    now[0] = 61.0
    w.poll(snap, wait_s=5)
    assert len(agent.calls) == 4
    assert [e.xid for e in w.events] == [79]  # kept from the last good read
    assert w.notes["train-a"] == "guest log unavailable: the guest agent is not responding"
    w.poll(_snap(), wait_s=5)  # both VMs gone: no notes; the events stay
    assert w.notes == {} and len(w.events) == 1


def test_a_broken_seam_is_a_note_and_a_slow_one_is_unanswered_within_the_wait():
    agent = Agent({"train-a": RuntimeError("boom\nsecond line")})
    w = GuestWatch(agent)
    w.poll(_snap(TRAIN_A), wait_s=5)
    assert w.notes == {"train-a": "guest log unavailable: RuntimeError: boom"}
    agent = Agent({"train-a": XID79})
    agent.gate.clear()
    w = GuestWatch(agent)
    t0 = time.monotonic()
    w.poll(_snap(TRAIN_A), wait_s=0.2)
    assert time.monotonic() - t0 < 2
    assert w.notes == {"train-a": "guest log unavailable: no answer within 0.2 s"} and w.events == ()
    agent.gate.set()
    for _ in range(200):
        if w.events:
            break
        time.sleep(0.01)
    assert [e.xid for e in w.events] == [79] and w.notes == {}


# -- the demo host --

@pytest.fixture
def state(tmp_path, monkeypatch):
    """A private demo host: these tests write guest logs and edit its VMs."""
    from nodeconsole.console.demo.state import ensure_demo

    d = tmp_path / "demo"
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
    ensure_demo(d)
    return d


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _start(state, vm: str) -> None:
    """Make a VM of the demo's node file running (its test-driver run state)."""
    node = state / "libvirt.xml"
    text = node.read_text()
    m = re.search(rf"<name>{vm}</name>.*?<test:runstate>5</test:runstate>", text, re.S)
    assert m is not None
    node.write_text(text[:m.start()] + m.group(0).replace(">5<", ">1<") + text[m.end():])


def test_done_when_a_guest_xid_79_is_an_event_of_the_host_gpu_and_judges_it(state, capsys):
    before = time.time()
    rc, out, _ = _run(capsys, "demo", "inject", "xid", GPU_A, "79", "--guest", "--demo")
    assert rc == 0 and "train-a kernel: NVRM: Xid (PCI:0000:07:00): 79" in out  # at the guest's address
    rc, out, err = _run(capsys, "events", "--demo", "--json")
    assert rc == 0
    (ev,) = [e for e in json.loads(out) if e["source"] == "guest"]
    assert {k: ev[k] for k in ("xid", "gpu", "vm", "source", "kind", "severity")} == {
        "xid": 79, "gpu": GPU_A, "vm": "train-a", "source": "guest", "kind": "xid", "severity": "fatal"}
    wall = time.mktime(time.strptime(ev["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert before - 2 <= wall <= time.time() + 2
    assert "guest log unavailable" not in err  # train-a and train-b answer; no other running VM holds a GPU
    rc, out, _ = _run(capsys, "snapshot", "--demo", "--json")
    gpus = {g["address"]: g for g in json.loads(out)["gpus"]}
    assert gpus[GPU_A]["health"]["state"] == "unhealthy"
    assert gpus[GPU_A]["health"]["reasons"][0].startswith("Xid 79 (GPU has fallen off the bus)")
    assert [(e["source"], e["vms"]) for e in gpus[GPU_A]["events"]] == [("guest", ["train-a"])]
    assert gpus[GPU_B]["health"]["state"] == "healthy"  # train-b's guest logged nothing
    rc, out, _ = _run(capsys, "events", "--demo")
    assert rc == 0 and "vm train-a (its guest's log)" in out


def test_a_vm_without_an_agent_is_a_note_and_no_guests_skips_them(state, capsys):
    _start(state, "train-c")
    rc, out, err = _run(capsys, "events", "--demo", "--json")
    assert rc == 0 and json.loads(out) == []
    assert "nodeconsole: VM train-c: guest log unavailable: no guest agent" in err.splitlines()
    assert "mig-infer-a" not in err  # a VF holder's guest is not asked
    assert _run(capsys, "demo", "inject", "xid", GPU_B, "48", "--guest", "--demo")[0] == 0
    rc, out, err = _run(capsys, "events", "--demo", "--json", "--no-guests")
    assert rc == 0 and json.loads(out) == [] and "guest log" not in err
    rc, out, _ = _run(capsys, "events", "--demo", "--json", "--since", "1m")
    assert [(e["xid"], e["gpu"], e["vm"]) for e in json.loads(out)] == [(48, GPU_B, "train-b")]


@pytest.mark.parametrize("argv, says", [
    (["xid", "0000:9a:00.0", "79"], "VM train-c holds 0000:9a:00.0 but is not running"),
    (["xid", "0000:18:00.0", "79"], "no VM holds 0000:18:00.0"),
    (["aer", GPU_A, "fatal"], "--guest goes with xid"),
    (["xid", GPU_A, "0"], "is not an Xid code"),
])
def test_inject_guest_refuses_what_no_guest_could_log(state, capsys, argv, says):
    rc, out, err = _run(capsys, "demo", "inject", *argv, "--guest", "--demo")
    assert rc == 2 and out == "" and says in err
    assert not (state / "root/.sim/guest").exists() or not any((state / "root/.sim/guest").iterdir())


def test_inject_guest_to_an_agentless_vm_is_refused(state, capsys):
    _start(state, "train-c")
    rc, _, err = _run(capsys, "demo", "inject", "xid", "0000:9a:00.0", "79", "--guest", "--demo")
    assert rc == 2 and "VM train-c holds 0000:9a:00.0 but has no guest agent" in err


def test_the_collector_never_waits_for_a_guest(state):
    from nodeconsole.console.seams import demo_host

    seams = demo_host(state)
    agent = Agent({"train-a": XID79, "train-b": b""})
    agent.gate.clear()
    seams.guest_agent = agent
    c = Collector(seams)
    try:
        t0 = time.monotonic()
        snap = c.collect()
        assert time.monotonic() - t0 < 5  # an agent hanging does not hold the poll
        assert sorted(agent.calls) == ["train-a", "train-b"]
        assert not any(g.events for g in snap.gpus)
        agent.gate.set()
        for _ in range(200):
            snap = c.collect()
            if any(g.events for g in snap.gpus):
                break
            time.sleep(0.02)
        g = next(g for g in snap.gpus if g.address == GPU_A)
        assert g.health.unhealthy and [e.source for e in g.events] == [GUEST_LOG]
        assert len(agent.calls) == 2  # asked once in all those polls (once a minute per VM)
        assert any(p.subject == GPU_A and "VM train-a" in p.message for p in snap.problems)
        assert all(e.source == HOST_LOG for e in snap.kernel_events if e.gpu != GPU_A)
    finally:
        c.close()
