"""actions/ need nothing libvirt-shaped of a VM backend: a backend that keeps its VMs in a dict (no XML,
no libvirt) serves the pin and the passthrough/release plans end to end through the runner, undo
included; and no module of actions/ calls a backend's XML methods or imports libvirt's backend."""
from __future__ import annotations

import ast
import copy
import dataclasses
from pathlib import Path

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.passthrough import plan_passthrough, plan_release
from nodeconsole.actions.pinning import plan_pin
from nodeconsole.actions.plan import Plan, build_step
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.libvirt_xml import parse_libvirt_set
from nodeconsole.console.model import Hostdev, VcpuPin, Vm
from nodeconsole.console.seams import demo_host
from nodeconsole.console.sources.types import LibvirtData
from nodeconsole.console.vms.backend import (
    GuestCell,
    PinScopes,
    SavedHostdev,
    VmBackend,
    VmConfigError,
    VmPins,
    VmShape,
)

ACTIONS = Path(__file__).resolve().parents[2] / "actions"
IDLE, IDLE_AUDIO = "0000:9a:00.0", "0000:9a:00.1"  # demo: idle on nvidia; shut-off train-c holds it


class DictReader:
    version = "dict 1"

    def __init__(self, backend: DictVms) -> None:
        self.backend = backend

    def poll(self) -> LibvirtData:
        return LibvirtData(tuple(self.backend.vm(n) for n in self.backend.names()))  # type: ignore[misc]

    def invalidate(self, uuid: str | None = None) -> None:
        pass

    def close(self) -> None:
        pass


class DictVms:
    """A VM backend over a dict: name → {"state", "vcpus", "memory_kib", "pins": {vcpu: cpuset},
    "emulator", "numa", "devs": [(kind, key, managed)]}. A saved device is its JSON-ish tuple's text."""

    label = "dict"
    one_state = False
    whole_process_pins = False
    guest_threads = True
    hypervisor = "dict"

    def command_hint(self, kind: str, vm: str, **args: str) -> str:
        return f"dict {kind} {vm}"

    def pin_commands(self, vm, target, current, live, memory_policy, all_cpus) -> tuple[str, ...]:
        return (f"dict pin {vm}",)

    def __init__(self, vms: dict[str, dict]) -> None:
        self.vms = vms
        self.calls: list[str] = []

    def _get(self, vm: str) -> dict:
        if vm not in self.vms:
            raise VmConfigError(f"no VM named {vm!r}")
        return self.vms[vm]

    def reader(self) -> DictReader:
        return DictReader(self)

    def names(self) -> list[str]:
        return sorted(self.vms)

    def vm(self, name: str) -> Vm | None:
        d = self.vms.get(name)
        if d is None:
            return None
        numa = d["numa"]
        return Vm(name=name, state=d["state"], vcpus=d["vcpus"], memory_kib=d["memory_kib"],
                  pins=tuple(VcpuPin(v, parse_libvirt_set(s)) for v, s in sorted(d["pins"].items())),
                  emulator_pins=parse_libvirt_set(d["emulator"]) if d["emulator"] else (),
                  numa_mode=(numa[0] or "strict") if numa else None,
                  numa_nodeset=parse_libvirt_set(numa[1]) if numa else (),
                  hostdevs=tuple(Hostdev("pci", address=k, managed=m) if kind == "pci" else Hostdev("mdev", uuid=k)
                                 for kind, k, m in d["devs"]))

    def pci_hostdevs(self, vm: str) -> set[str]:
        return {k for kind, k, _ in self._get(vm)["devs"] if kind == "pci"}

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        self.calls.append("add_hostdev")
        devs = self._get(vm)["devs"]
        if address not in self.pci_hostdevs(vm):
            devs.insert(index if index is not None else len(devs), ("pci", address, managed))

    def remove_hostdev(self, vm: str, address: str) -> None:
        self.calls.append("remove_hostdev")
        d = self._get(vm)
        d["devs"] = [x for x in d["devs"] if not (x[0] == "pci" and x[1] == address)]

    def hostdev_place(self, vm: str, address: str) -> tuple[int, bool] | None:
        pci = [x for x in self._get(vm)["devs"]]
        return next(((i, m) for i, (kind, k, m) in enumerate(pci) if kind == "pci" and k == address), None)

    def save(self, vm: str) -> str:
        return repr(self._get(vm))

    def restore(self, vm: str, token: str) -> None:
        self.calls.append("restore")
        self.vms[vm] = ast.literal_eval(token)

    def check_saved(self, vm: str, token: str) -> str:
        try:
            saved = ast.literal_eval(token)
        except (ValueError, SyntaxError):
            raise VmConfigError("not a saved VM") from None
        if not isinstance(saved, dict) or saved.get("name", vm) != vm:
            raise VmConfigError(f"not a saved definition of {vm}")
        return token

    def run_state(self, vm: str) -> str:
        return self._get(vm)["state"]

    # -- shape: kept as its dict form
    def shape(self, vm: str) -> VmShape:
        d = self._get(vm)
        return VmShape.from_dict(d["shape"]) if "shape" in d else \
            VmShape(vcpus=d["vcpus"], memory_kib=d["memory_kib"], hugepage_kib=None, numa=None)

    def shape_commands(self, vm: str, shape: VmShape) -> tuple[str, ...]:
        return (f"dict shape {vm}",)

    def set_shape(self, vm: str, shape: VmShape) -> None:
        self.calls.append("set_shape")
        if shape.problems():
            raise VmConfigError("; ".join(shape.problems()))
        d = self._get(vm)
        d["shape"], d["vcpus"], d["memory_kib"] = shape.to_dict(), shape.vcpus, shape.memory_kib

    def close(self) -> None:
        pass

    # -- pins, mdevs, exact put-back
    def pin_scopes(self, vm: str, running: bool) -> PinScopes:
        return PinScopes(("config",), False, "its pins are set in its definition, from its next start")

    def every_cpu(self) -> frozenset[int]:
        return frozenset()

    def pins(self, vm: str, live: bool) -> VmPins:
        if live:
            raise VmConfigError("no live pins here")
        d = self._get(vm)
        return VmPins(tuple(sorted(d["pins"].items())), d["emulator"], d["numa"])

    def set_pins(self, vm: str, pins: VmPins, live: bool, memory_policy: bool) -> None:
        self.calls.append("set_pins")
        d = self._get(vm)
        d["pins"], d["emulator"] = dict(pins.vcpus), pins.emulator
        if memory_policy:
            d["numa"] = pins.numa

    def mdev_hostdevs(self, vm: str) -> set[str]:
        return {k for kind, k, _ in self._get(vm)["devs"] if kind == "mdev"}

    def add_mdev(self, vm: str, uuid: str, parent: str | None = None, type_id: str | None = None) -> None:
        self._get(vm)["devs"].append(("mdev", uuid, False))

    def remove_mdev(self, vm: str, uuid: str) -> None:
        d = self._get(vm)
        d["devs"] = [x for x in d["devs"] if x[:2] != ("mdev", uuid)]

    def saved_hostdev(self, vm: str, address: str) -> SavedHostdev | None:
        place = self.hostdev_place(vm, address)
        return None if place is None else SavedHostdev(f"pci {address} managed={place[1]}", place[0])

    def check_saved_hostdev(self, address: str, token: str) -> str:
        if not token.startswith(f"pci {address} managed="):
            raise VmConfigError(f"not the device {address}")
        return token

    def restore_hostdev(self, vm: str, address: str, saved: SavedHostdev) -> None:
        self.calls.append("restore_hostdev")
        managed = saved.token.endswith("True")
        devs = self._get(vm)["devs"]
        devs.insert(saved.place if saved.place is not None else len(devs), ("pci", address, managed))

    def hostdev_text(self, address: str, managed: bool, token: str | None = None) -> str:
        return token or f"pci {address} managed={managed}"


def _dict_of(vm: Vm) -> dict:
    return {"state": vm.state, "vcpus": vm.vcpus, "memory_kib": vm.memory_kib, "emulator": None, "numa": None,
            "pins": {}, "devs": [(h.type, h.address if h.type == "pci" else h.uuid, h.managed) for h in vm.hostdevs]}


@pytest.fixture
def host(tmp_path) -> tuple[ActionHost, DictVms]:
    seams = demo_host(tmp_path / "demo")
    vms = ActionHost.from_seams(seams).snapshot().vms
    backend = DictVms({v.name: _dict_of(v) for v in vms})
    typed: VmBackend = backend  # it implements the protocol (a missing method fails the step that calls it)
    assert typed.names()
    return ActionHost.from_seams(dataclasses.replace(seams, vm_backend=lambda _uri: backend)), backend


def test_a_dict_backend_serves_a_pin_plan_and_its_undo(host):
    h, backend = host
    before = copy.deepcopy(backend.vms)
    plan = plan_pin(h, h.snapshot(), "train-b")
    assert plan.ok and [s.op["kind"] for s in plan.steps] == ["vm_pins"]
    assert [s.op["scope"] for s in plan.steps] == ["config"]
    assert any("its pins are set in its definition" in n for n in plan.notes)
    assert Runner(h).run(plan).status == DONE
    pinned = backend.vms["train-b"]
    assert len(pinned["pins"]) == before["train-b"]["vcpus"] and pinned["emulator"] and pinned["numa"][0] == "strict"
    snap = h.snapshot()  # the snapshot reads the VMs through the same backend
    assert len(snap.vm("train-b").pins) == before["train-b"]["vcpus"]
    assert Runner(h).run(plan_undo(h)).status == DONE
    assert backend.vms == before
    assert backend.calls.count("set_pins") == 2


def test_a_dict_backend_serves_passthrough_and_release_with_the_exact_put_back(host):
    h, backend = host
    before = copy.deepcopy(backend.vms)
    plan = plan_passthrough(h, h.snapshot(), IDLE, vm="build-1")
    assert plan.ok, [c for c in plan.checks if not c.ok]
    assert Runner(h).run(plan, confirm=lambda p: True).status == DONE
    assert backend.pci_hostdevs("build-1") == {IDLE, IDLE_AUDIO}
    assert Runner(h).run(plan_undo(h)).status == DONE
    assert backend.vms == before

    # release takes the GPU out of train-c's definition; its undo puts back the saved device at its place
    res = Runner(h).run(plan_release(h, h.snapshot(), IDLE), confirm=lambda p: True)
    assert res.status == DONE, res.message
    assert IDLE not in backend.pci_hostdevs("train-c")
    record = h.audit.find(res.record_id).to_json()
    assert {"kind": "vm_hostdev", "vm": "train-c", "address": IDLE, "present": True, "managed": True,
            "index": 0, "element": f"pci {IDLE} managed=True", "child": 0} in record["undo"]
    assert Runner(h).run(plan_undo(h)).status == DONE
    assert backend.vms == before
    assert "restore_hostdev" in backend.calls


def test_a_dict_backend_serves_a_shape_and_its_exact_undo(host):
    h, backend = host
    before = copy.deepcopy(backend.vms)
    shape = VmShape(vcpus=2, memory_kib=4 << 20, hugepage_kib=1 << 20, numa=("strict", "0-1"),
                    cells=(GuestCell(0, "0", 2 << 20, "0"), GuestCell(1, "1", 2 << 20, "1")))
    op = {"kind": "vm_shape", "vm": "build-1", "shape": shape.to_dict()}
    step = build_step(h, op)
    assert step is not None and step.commands == ("dict shape build-1",)  # the backend says its commands
    res = Runner(h).run(Plan(action="shape", title="shape build-1", request={}, steps=[step]))
    assert res.status == DONE, res.message
    assert backend.shape("build-1") == shape and backend.vm("build-1").vcpus == 2
    assert build_step(h, op) is None
    assert Runner(h).run(plan_undo(h)).status == DONE
    assert backend.vms == before and backend.calls.count("restore") == 1


# -- actions/ speak to the backend only in the VM model's terms ------------------------------------------

XML_METHODS = {"xml", "define", "edit", "live_xml", "domain"}
LIBVIRT_MODULES = ("nodeconsole.console.vms.libvirt_domains", "nodeconsole.console.vms.libvirt_pins",
                   "nodeconsole.console.domain_edits", "nodeconsole.console.domain_xml")


def _modules() -> list[Path]:
    return sorted(p for p in ACTIONS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_action_calls_a_backends_xml_methods_or_imports_libvirts_backend():
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(ACTIONS.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in XML_METHODS:
                found.append(f"{rel}:{node.lineno} calls .{node.func.attr}(")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(LIBVIRT_MODULES):
                found.append(f"{rel}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Import):
                found += [f"{rel}:{node.lineno} imports {a.name}" for a in node.names if a.name.startswith(LIBVIRT_MODULES)]
            if isinstance(node, ast.Name) and node.id in ("DomainStore", "LibvirtDomainConfig", "DomainConfig"):
                found.append(f"{rel}:{node.lineno} names {node.id}")
    assert len(_modules()) > 40  # every module of actions/ was read
    assert found == []


def test_the_check_finds_what_it_forbids(tmp_path):
    """The AST check above is not vacuous: the very calls it forbids are found in a sample."""
    sample = ast.parse("from nodeconsole.console.vms.libvirt_domains import X\ncfg.edit(vm, f)\ncfg.live_xml(vm)\n")
    calls = [n.func.attr for n in ast.walk(sample) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    imports = [n.module for n in ast.walk(sample) if isinstance(n, ast.ImportFrom)]
    assert set(calls) <= XML_METHODS and calls and imports[0].startswith(LIBVIRT_MODULES)

