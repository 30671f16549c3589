"""The `vm_shape` and `vm_definition` step kinds (actions/shape_steps.py) on the demo host: through its
node file (one_state, edited in place) and through libvirt's own test driver serving that node file (a
real libvirt connection: libvirt rewrites each definition it is given). A shape applied through the
runner reads back, and its undo gives the definition back byte for byte; an undo refuses a definition
changed since and a tampered token; bad shapes are refused with the reason and nothing is written."""
from __future__ import annotations

import dataclasses
import json

import pytest

libvirt = pytest.importorskip("libvirt")

from nodeconsole.actions.host import ActionHost  # noqa: E402
from nodeconsole.actions.interrupt import FAIL_ENV  # noqa: E402
from nodeconsole.actions.plan import Plan, StepError, build_step  # noqa: E402
from nodeconsole.actions.progress import DONE, FAILED_RESULT  # noqa: E402
from nodeconsole.actions.runner import Runner  # noqa: E402
from nodeconsole.actions.shape_steps import digest, pins_after_shape  # noqa: E402
from nodeconsole.actions.undo import plan_undo  # noqa: E402
from nodeconsole.console.libvirt_xml import parse_domain  # noqa: E402
from nodeconsole.console.seams import demo_host  # noqa: E402
from nodeconsole.console.vms.backend import GuestCell, VmConfigError, VmPins, VmShape  # noqa: E402
from nodeconsole.console.vms.libvirt_domains import LibvirtDomainConfig  # noqa: E402

libvirt.registerErrorHandler(lambda *_a: None, None)
VM = "build-1"  # demo: shut off, 4 vCPUs, 8 GiB, no hugepages, no numatune
ONE_NODE = VmShape(vcpus=2, memory_kib=2 << 20, hugepage_kib=2048, numa=("strict", "0"))
TWO_CELLS = VmShape(vcpus=6, memory_kib=4 << 20, hugepage_kib=1 << 20, numa=("strict", "0-1"),
                    cells=(GuestCell(0, "0-2", 2 << 20, "0"), GuestCell(1, "3-5", 2 << 20, "1")), threads_per_core=2)


@pytest.fixture(params=["node file", "libvirt"])
def host(request, tmp_path) -> ActionHost:
    """The demo host; "libvirt": its VMs through a libvirt connection (the test driver) instead."""
    seams = demo_host(tmp_path / "demo")
    if request.param == "libvirt":
        seams = dataclasses.replace(seams, vm_backend=lambda uri: LibvirtDomainConfig(uri) if uri else None)
    h = ActionHost.from_seams(seams)
    assert h.vms is not None and h.vms.label == ("node file" if request.param == "node file" else "libvirt")
    yield h
    h.vms.close()


def _run(h: ActionHost, op: dict):
    step = build_step(h, op)
    assert step is not None
    return Runner(h).run(Plan(action="shape", title=f"shape {op['vm']}", request={}, steps=[step]))


def _op(shape: VmShape, vm: str = VM) -> dict:
    return {"kind": "vm_shape", "vm": vm, "shape": shape.to_dict()}


@pytest.mark.parametrize("shape", [ONE_NODE, TWO_CELLS], ids=["one-node", "two-cells"])
def test_a_shape_applies_reads_back_and_its_undo_gives_the_definition_back_byte_for_byte(host, shape):
    before = host.vms.save(VM)
    node_file = host.seams.libvirt_uri.removeprefix("test://")
    file_before = open(node_file, "rb").read()
    step = build_step(host, _op(shape))
    assert f"virsh setvcpus build-1 {shape.vcpus} --config --maximum" in step.commands
    size = f"{shape.memory_kib >> 20}G" if not shape.memory_kib % (1 << 20) else f"{shape.memory_kib}K"
    assert f"virsh setmaxmem build-1 {size} --config" in step.commands
    assert any("<hugepages><page size=" in c for c in step.commands)
    res = _run(host, _op(shape))
    assert res.status == DONE, res.message
    assert host.vms.shape(VM).key() == shape.key()
    xml = host.vms.save(VM)
    assert parse_domain(xml).hugepages_kib == shape.hugepage_kib and parse_domain(xml).numa_mode == "strict"
    assert (xml.count("<memnode"), xml.count("<cell ")) == (len(shape.cells), len(shape.cells))
    assert build_step(host, _op(shape)) is None  # already shaped: no step
    record = host.audit.find(res.record_id).to_json()
    assert record["undo"] == [{"kind": "vm_definition", "vm": VM, "token": before, "expect": digest(xml)}]
    undo = Runner(host).run(plan_undo(host))
    assert undo.status == DONE, undo.message
    assert host.vms.save(VM) == before
    if host.vms.label == "node file":
        assert open(node_file, "rb").read() == file_before


def test_the_rest_of_the_definition_stays(host):
    """Only the shape's parts change: the guest <cpu> keeps its mode, the pins of remaining vCPUs stay,
    other <memoryBacking> children stay when hugepages go."""
    host.vms.set_pins(VM, VmPins(vcpus=((0, "2"), (3, "5")), emulator="1"), live=False, memory_policy=False)
    host.vms.set_shape(VM, ONE_NODE)
    xml = host.vms.save(VM)
    assert "host-passthrough" in xml and "<name>build-1</name>" in xml
    pins = parse_domain(xml)
    assert [(p.vcpu, p.cpus) for p in pins.pins] == [(0, (2,))] and pins.emulator_pins == (1,)  # vCPU 3 is gone
    host.vms.set_shape(VM, dataclasses.replace(ONE_NODE, hugepage_kib=None, numa=None))
    shape = host.vms.shape(VM)
    assert (shape.hugepage_kib, shape.numa) == (None, None) and "<memoryBacking" not in host.vms.save(VM)


def test_a_running_vm_is_refused(host):
    assert host.vms.run_state("train-a") == "running"
    before = host.vms.save("train-a")
    with pytest.raises(StepError, match="train-a is running: .*shut off.*virsh shutdown train-a"):
        build_step(host, _op(ONE_NODE, "train-a"))
    assert host.vms.save("train-a") == before


def test_an_undo_refuses_a_definition_changed_since(host):
    """Someone edits the definition after the change: the undo's pins step runs, the restore refuses, and
    the runner puts the pins back: the definition is as that someone left it."""
    before = host.vms.save(VM)
    pins = {"kind": "vm_pins", "vm": VM, "scope": "config", "vcpus": [[0, "4"], [1, "5"]], "emulator": "0"}
    steps = [build_step(host, _op(ONE_NODE)), pins_after_shape(build_step(host, pins), ONE_NODE)]
    res = Runner(host).run(Plan(action="shape", title="shape and pin", request={}, steps=steps))
    assert res.status == DONE, res.message
    host.vms.add_hostdev(VM, "0000:7f:00.0")  # someone's edit
    changed = host.vms.save(VM)
    undo = Runner(host).run(plan_undo(host))
    assert undo.status == FAILED_RESULT and "definition was changed since" in undo.message, undo.message
    assert undo.undo_failed == [] and len(undo.undone) == 2, undo.message
    assert host.vms.save(VM) == changed != before
    assert "undone_by" not in host.audit.find(res.record_id).to_json()  # still to be undone
    host.vms.remove_hostdev(VM, "0000:7f:00.0")
    assert Runner(host).run(plan_undo(host)).status == DONE  # that edit taken back: the undo goes through
    assert host.vms.save(VM) == before


def test_a_tampered_token_is_refused(host):
    token = host.vms.save(VM)
    shaped = _run(host, _op(ONE_NODE))
    assert shaped.status == DONE
    expect = digest(host.vms.save(VM))
    other = host.vms.save("db-1")
    uuid = parse_uuid(token)
    bad = {"another VM's definition": (other, "of VM 'db-1', not 'build-1'"),
           "another UUID": (token.replace(uuid, "00000000-0000-0000-0000-000000000000"), "has UUID"),
           "not XML": ("<domain><name>build-1</name>", "not well-formed"),
           "not a definition": (json.dumps({"name": VM}), "not well-formed"),
           "no text": (42, "must be a domain XML text")}
    for tampered, says in bad.values():
        with pytest.raises(StepError, match=f"malformed vm_definition operation: .*{says}"):
            build_step(host, {"kind": "vm_definition", "vm": VM, "token": tampered, "expect": expect})
    with pytest.raises(StepError, match="'expect' is not a sha256"):
        build_step(host, {"kind": "vm_definition", "vm": VM, "token": token, "expect": "abc"})
    step = build_step(host, {"kind": "vm_definition", "vm": VM, "token": token, "expect": "0" * 64})
    with pytest.raises(StepError, match="definition was changed since"):  # checked when it runs
        step.apply()
    with pytest.raises(StepError, match="the change did not record its result"):
        build_step(host, {"kind": "vm_definition", "vm": VM, "token": token, "expect": None})
    assert host.vms.shape(VM).key() == ONE_NODE.key()  # nothing was changed


def parse_uuid(xml: str) -> str:
    return xml.split("<uuid>")[1].split("</uuid>")[0]


BAD = [({"vcpus": 0}, "vcpus must be 1 to"),
       ({"memory_kib": 0}, "memory must be at least 1 KiB"),
       ({"vcpus": 3, "threads_per_core": 2}, "3 vCPUs do not make whole cores of 2 threads"),
       ({"memory_kib": (2 << 20) + 4}, "not a whole number of 2048 KiB pages"),
       ({"cells": (GuestCell(0, "0", 1 << 20, "0"), GuestCell(1, "2", 1 << 20, "1"))},
        r"cover vCPUs 0-1 exactly \(missing 1\) \(beyond them: 2\)"),
       ({"cells": (GuestCell(0, "0", 1 << 20, "0"), GuestCell(1, "1", 2 << 20, "1"))},
        r"memory \(3145728 KiB\) must add up to the VM's memory \(2097152 KiB\)"),
       ({"numa": ("sideways", "0")}, "unknown memory mode 'sideways'")]


@pytest.mark.parametrize("change,says", BAD, ids=[b[1][:24] for b in BAD])
def test_a_bad_shape_is_refused_with_the_reason_and_nothing_is_written(host, change, says):
    bad = dataclasses.replace(ONE_NODE, **change)
    before = host.vms.save(VM)
    node_file = host.seams.libvirt_uri.removeprefix("test://")
    file_before = open(node_file, "rb").read()
    with pytest.raises(ValueError, match=says):
        VmShape.from_dict(bad.to_dict())
    with pytest.raises(VmConfigError, match=says):
        host.vms.set_shape(VM, bad)
    with pytest.raises(StepError, match="malformed vm_shape operation: .*" + says):
        build_step(host, _op(bad))
    assert host.vms.save(VM) == before and open(node_file, "rb").read() == file_before


def test_the_shape_dict_round_trips_and_rejects_wrong_types():
    assert VmShape.from_dict(TWO_CELLS.to_dict()) == TWO_CELLS
    assert VmShape.from_dict({**ONE_NODE.to_dict(), "numa": {"mode": "strict", "nodeset": "1,0,2"}}).numa == \
        ("strict", "0-2")  # as libvirt writes it
    for key, value in (("vcpus", "2"), ("vcpus", True), ("memory_kib", 1.5), ("cells", "0-1"),
                       ("numa", ["strict", "0"])):
        with pytest.raises(ValueError, match="shape"):
            VmShape.from_dict({**ONE_NODE.to_dict(), key: value})


def test_the_undo_of_the_undo_puts_the_shape_back_exactly(host):
    before = host.vms.save(VM)
    assert _run(host, _op(TWO_CELLS)).status == DONE
    shaped = host.vms.save(VM)
    undo = Runner(host).run(plan_undo(host))
    assert undo.status == DONE and host.vms.save(VM) == before
    # the redo token is the definition as the undo found it, completed when the step ran
    assert host.audit.find(undo.record_id).to_json()["undo"] == [
        {"kind": "vm_definition", "vm": VM, "token": shaped, "expect": digest(before)}]
    redo = Runner(host).run(plan_undo(host, undo.record_id))
    assert redo.status == DONE, redo.message
    assert host.vms.save(VM) == shaped


def test_a_later_step_failing_rolls_the_shape_back_exactly(host, monkeypatch):
    before = host.vms.save(VM)
    pins = {"kind": "vm_pins", "vm": VM, "scope": "config", "vcpus": [[0, "1"]], "emulator": "0"}
    steps = [build_step(host, _op(ONE_NODE)), build_step(host, pins)]
    monkeypatch.setenv(FAIL_ENV, "2:verify")  # the pins applied, then their verification fails
    res = Runner(host).run(Plan(action="shape", title="shape and pin", request={}, steps=steps))
    assert res.status == FAILED_RESULT and res.undo_failed == [] and len(res.undone) == 2, res.message
    assert host.vms.save(VM) == before


def test_fewer_vcpus_then_new_pins_undo_exactly(host):
    """The order `prepare` plans: the shape (vCPUs 4 → 2, dropping vCPU 3's pin), then the new pins,
    planned before either ran; the undo takes the pins back to what the shape left, then the shape."""
    host.vms.set_pins(VM, VmPins(vcpus=((0, "1"), (3, "2"))), live=False, memory_policy=False)
    before = host.vms.save(VM)
    pins = {"kind": "vm_pins", "vm": VM, "scope": "config", "vcpus": [[0, "4"], [1, "5"]], "emulator": "0"}
    steps = [build_step(host, _op(ONE_NODE)), pins_after_shape(build_step(host, pins), ONE_NODE)]
    assert steps[1].inverse["vcpus"] == [[0, "1"]]
    res = Runner(host).run(Plan(action="shape", title="shape and pin", request={}, steps=steps))
    assert res.status == DONE, res.message
    assert [(p.vcpu, p.cpus) for p in parse_domain(host.vms.save(VM)).pins] == [(0, (4,)), (1, (5,))]
    undo = Runner(host).run(plan_undo(host))
    assert undo.status == DONE, undo.message
    assert host.vms.save(VM) == before
