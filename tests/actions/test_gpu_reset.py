"""`nodeconsole gpu reset GPU` on the demo host (actions/reset.py, actions/reset_steps.py): a vfio GPU of a
running VM is reset between that VM's shutdown and its start; an nvidia GPU only while nothing uses it;
a fault at any step leaves the VM running, or says the failure and what its undo did; a reset starts the
GPU's event window (console/resets.py)."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.interrupt import FAIL_ENV
from nodeconsole.actions.plan import StepError
from nodeconsole.actions.reset_steps import vm_step
from nodeconsole.console.seams import demo_host
from nodeconsole.console.vms.hints import command_hint

VFIO_GPU, VM = "0000:19:00.0", "train-a"  # GPU 1: on vfio-pci, train-a (running) holds it
BUSY_GPU = "0000:18:00.0"  # GPU 0: on nvidia, python3 and torchrun use it
IDLE_GPU = "0000:9a:00.0"  # GPU 4: on nvidia, nothing uses it


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _snap(capsys) -> dict:
    return json.loads(_run(capsys, "snapshot", "--demo", "--json")[1])


def _vm_state(capsys, name: str = VM) -> str:
    return next(v["state"] for v in _snap(capsys)["vms"] if v["name"] == name)


def _records(capsys) -> list[dict]:
    return [json.loads(line) for line in _run(capsys, "log", "--json", "--demo")[1].splitlines()]


def _health(capsys, address: str) -> dict:
    return next(g["health"] for g in _snap(capsys)["gpus"] if g["address"] == address)


def test_the_plan_for_a_vfio_gpu_of_a_running_vm_stops_and_restarts_that_vm_around_the_reset(state, capsys):
    before = (state / "libvirt.xml").read_bytes()
    rc, out, _ = _run(capsys, "gpu", "reset", "1", "--demo")
    assert rc == 0 and "Nothing was changed" in out
    stop, reset, start = (out.index(s) for s in (f"Shut VM {VM} down", f"Reset function {VFIO_GPU}",
                                                  f"Start VM {VM} again"))
    assert stop < reset < start and "reset method: flr bus" in out and "Steps (3)" in out
    assert (state / "libvirt.xml").read_bytes() == before and _records(capsys) == []


def test_apply_yes_leaves_the_vm_running_and_the_reset_is_in_the_log(state, capsys):
    t0 = time.monotonic()
    rc, out, err = _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")
    took = time.monotonic() - t0
    assert rc == 0, out + err
    assert "[3/3] ok" in out and took < 30
    assert _vm_state(capsys) == "running"
    (rec,) = _records(capsys)
    assert rec["action"] == "gpu reset" and rec["result"] == "applied" and rec["request"]["gpu"] == VFIO_GPU
    rc, out, _ = _run(capsys, "log", "--demo")
    assert "gpu reset" in out and VFIO_GPU in out


def test_a_reset_refused_for_an_nvidia_gpu_with_processes_names_them(state, capsys):
    nvml = (state / "nvml.json").read_bytes()
    rc, out, _ = _run(capsys, "gpu", "reset", BUSY_GPU, "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] no processes on the GPU" in out
    assert "python3 (pid 4242)" in out and "torchrun (pid 4310)" in out
    assert (state / "nvml.json").read_bytes() == nvml and _records(capsys) == []


def test_an_idle_nvidia_gpu_is_reset_by_the_driver_and_answers_nvml_again(state, capsys):
    rc, out, err = _run(capsys, "gpu", "reset", IDLE_GPU, "--demo", "--apply", "--yes")
    assert rc == 0, out + err
    assert f"nvidia-smi -r -i {IDLE_GPU}" in out and "[1/1] ok" in out
    (g,) = [g for g in _snap(capsys)["gpus"] if g["address"] == IDLE_GPU]
    assert g["nvml_index"] is not None and g["driver"] == "nvidia"


def test_mig_instances_and_vgpus_refuse_the_reset(state, capsys):
    rc, out, _ = _run(capsys, "gpu", "reset", "0000:3a:00.0", "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] no MIG instances: 3 MIG instance(s) in use" in out
    rc, out, _ = _run(capsys, "gpu", "reset", "0000:3b:00.0", "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] no vGPUs" in out


def test_a_drained_gpu_may_be_reset_and_keeps_its_drain(state, capsys):
    assert _run(capsys, "gpu", "drain", VFIO_GPU, "--reason", "Xid 79", "--demo", "--apply", "--yes")[0] == 0
    rc, out, err = _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")
    assert rc == 0 and "a reset is recovery, the drain stays" in out, out + err
    (g,) = [g for g in _snap(capsys)["gpus"] if g["address"] == VFIO_GPU]
    assert g["drain"]["reason"] == "Xid 79"


@pytest.mark.parametrize("fault", ["1", "2", "3", "1:verify", "2:verify", "3:verify"])
def test_a_fault_at_any_step_leaves_the_vm_running_and_says_the_failure_with_its_undo(state, capsys, monkeypatch,
                                                                                     fault):
    monkeypatch.setenv(FAIL_ENV, fault)
    rc, out, err = _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")
    monkeypatch.delenv(FAIL_ENV)
    assert rc == 1 and "injected" in out + err
    assert _vm_state(capsys) == "running"
    (rec,) = _records(capsys)
    assert rec["result"] == "failed" and rec["action"] == "gpu reset"
    assert rec["undo_failed"] == [] and "Every change was undone" in out + err
    assert rec["undone"][-1].startswith(f"Shut VM {VM} down")  # its undo: the VM started again


def test_an_unknown_gpu_exits_2_and_changes_nothing(state, capsys):
    before = (state / "libvirt.xml").read_bytes()
    rc, out, err = _run(capsys, "gpu", "reset", "0000:19:00.7", "--demo", "--apply", "--yes")
    assert rc == 2 and out == "" and "0000:19:00.7" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _run(capsys, "gpu", "reset", "nine", "--demo")
    assert rc == 2 and "Traceback" not in err
    assert (state / "libvirt.xml").read_bytes() == before and _records(capsys) == []


def test_an_xid_79_before_a_reset_stops_making_the_gpu_unhealthy_after_it(state, capsys):
    assert _run(capsys, "demo", "inject", "xid", VFIO_GPU, "79", "--demo")[0] == 0
    h = _health(capsys, VFIO_GPU)
    assert h["state"] == "unhealthy" and "Xid 79" in h["reasons"][0]
    time.sleep(1.05)  # the audit log's times are whole seconds: the reset finishes in a later one
    assert _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")[0] == 0
    h = _health(capsys, VFIO_GPU)
    assert h["state"] == "healthy" and h["reasons"] == []
    rc, out, _ = _run(capsys, "events", "--demo")
    assert "Xid 79" in out  # the event is still listed: only the verdict no longer counts it


class _DeafGuest:
    """A VM backend whose guest ignores the shutdown request."""

    def __init__(self) -> None:
        self.state, self.calls = "running", []

    def run_state(self, vm: str) -> str:
        return self.state

    def command_hint(self, kind: str, vm: str, **args: str) -> str:
        return command_hint("libvirt", kind, vm, **args)

    def shutdown(self, vm: str) -> None:
        self.calls.append("shutdown")

    def destroy(self, vm: str) -> None:
        self.calls.append("destroy")
        self.state = "shut off"

    def start(self, vm: str) -> None:
        self.calls.append("start")
        self.state = "running"


def test_a_guest_that_ignores_shutdown_stops_the_reset_unless_forced(tmp_path):
    deaf = _DeafGuest()
    host = dataclasses.replace(ActionHost.from_seams(demo_host(tmp_path / "demo")), domains=deaf)
    op = {"kind": "vm_run", "vm": VM, "running": False, "force": False, "wait_s": 0.2}
    with pytest.raises(StepError, match="did not shut down within 0.2 s.*--force destroys it"):
        vm_step(host, op).apply()
    assert deaf.state == "running" and deaf.calls == ["shutdown"]
    step = vm_step(host, {**op, "force": True})
    assert "virsh destroy" in " ".join(step.commands)
    step.apply()
    assert step.verify() is None and deaf.calls[-1] == "destroy"
    assert step.inverse == {"kind": "vm_run", "vm": VM, "running": True}


def test_a_reset_is_refused_while_libvirt_is_down_and_changes_nothing(state, capsys):
    from tests.actions.test_libvirt_down import _break_libvirt

    _break_libvirt(state)
    before = (state / "libvirt.xml").read_bytes()
    rc, out, err = _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] libvirt answers" in out and f"which VMs hold GPU {VFIO_GPU} cannot be known" in out
    assert (state / "libvirt.xml").read_bytes() == before and _records(capsys) == []


def test_a_paused_vm_holding_the_gpu_refuses_and_a_shut_off_one_is_not_touched(state, capsys):
    node = state / "libvirt.xml"
    text = node.read_text()
    start = text.index(f"<name>{VM}</name>")
    cut = text.index("<test:runstate>1</test:runstate>", start)
    node.write_text(text[:cut] + "<test:runstate>3</test:runstate>" + text[cut + 32:])
    rc, out, _ = _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")
    assert rc == 1 and f"{VM} (paused): QEMU keeps the device open" in out and _records(capsys) == []
    node.write_text(text[:cut] + "<test:runstate>5</test:runstate>" + text[cut + 32:])
    rc, out, err = _run(capsys, "gpu", "reset", VFIO_GPU, "--demo", "--apply", "--yes")
    assert rc == 0 and f"VM {VM} holds it but is shut off: not touched" in out and "Steps (1)" in out, out + err
    assert _vm_state(capsys) == "shut off"


def test_libvirts_own_run_state_calls_stop_and_start_a_domain():
    from nodeconsole.console.vms.libvirt_domains import DomainConfigError, LibvirtDomainConfig

    cfg = LibvirtDomainConfig("test:///default")  # libvirt's test driver: the domain "test", running
    try:
        assert cfg.run_state("test") == "running"
        cfg.shutdown("test")
        assert cfg.run_state("test") == "shut off"
        with pytest.raises(DomainConfigError, match="destroy of test"):
            cfg.destroy("test")  # not running
        cfg.start("test")
        assert cfg.run_state("test") == "running"
        cfg.destroy("test")
        assert cfg.run_state("test") == "shut off"
    finally:
        cfg.close()


def test_a_captured_tree_is_read_only_and_the_reset_changes_nothing(state, capsys):
    before = (state / "libvirt.xml").read_bytes()
    rc, out, err = _run(capsys, "gpu", "reset", VFIO_GPU, "--root", str(state / "root"),
                        "--libvirt", f"test://{state / 'libvirt.xml'}", "--apply", "--yes")
    assert rc == 1 and "read-only" in out + err and "Steps (3)" in out
    assert (state / "libvirt.xml").read_bytes() == before and _records(capsys) == []
