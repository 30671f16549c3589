"""What a poll keeps from the last one: the collector reuses the NICs, the problems, the PCI index and the
VMs' mapped host devices while their inputs are equal. A snapshot assembled with that memory must equal
one assembled afresh from the same source data, whatever changed in between."""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from nodeconsole.console.assembly import assemble
from nodeconsole.console.checks import GPU_FIGURES, SNAPSHOT_FIGURES, VM_FIGURES, find_problems
from nodeconsole.console.collector import Collector
from nodeconsole.console.derived import Derived
from nodeconsole.console.model import GpuProcess, Hostdev, HostSnapshot, Iommu, Load, Sources, VcpuPin
from nodeconsole.console.nics import build_nics
from nodeconsole.console.seams import demo_host
from nodeconsole.console.sources.types import LibvirtData, NvmlData


@pytest.fixture(scope="module")
def parts(_shared) -> dict:
    """One reading of every source of the demo host (read once per module)."""
    seams = demo_host(_shared)
    c = Collector(seams)
    try:
        with seams.root.one_pass():
            return {"sysfs": c._read_sysfs(), "nvml": c._read_nvml(), "virt": c._read_libvirt(),
                    "load": c._read_load(), "sources": Sources(), "names": {}}
    finally:
        c.close()


def _assemble(p: dict, derived: Derived | None = None) -> HostSnapshot:
    snap = assemble(p["sysfs"], p["nvml"], p["virt"], p["load"], p["sources"], known_names=p["names"],
                    derived=derived)
    return replace(snap, taken_at=0.0)


def _nvml_gpu(p: dict, address: str, **changes) -> dict:
    gpus = tuple(replace(g, **changes) if g.address == address else g for g in p["nvml"].gpus)
    return {**p, "nvml": NvmlData(p["nvml"].driver_version, gpus)}


def _vm(p: dict, name: str, **changes) -> dict:
    return {**p, "virt": LibvirtData(tuple(replace(v, **changes) if v.name == name else v for v in p["virt"].vms))}


def _pci(p: dict, address: str, **changes) -> dict:
    devs = tuple(replace(d, **changes) if d.address == address else d for d in p["sysfs"].pci_devices)
    return {**p, "sysfs": replace(p["sysfs"], pci_devices=devs)}


def _figures_move(p: dict) -> dict:
    """Every per-poll figure moves: GPU utilization, memory, temperature, power, processes; VM CPU and
    steal; the host load."""
    def bump(v):
        return v + 7 if isinstance(v, int) and not isinstance(v, bool) else v
    gpus = tuple(replace(g, utilization_gpu=bump(g.utilization_gpu), utilization_memory=bump(g.utilization_memory),
                         memory_used_mib=bump(g.memory_used_mib), temperature_c=bump(g.temperature_c),
                         power_w=bump(g.power_w), processes=(GpuProcess(4242, "python", 1000, "compute"),))
                 for g in p["nvml"].gpus)
    vms = tuple(replace(v, cpu_percent=(v.cpu_percent or 0.0) + 11.5, steal_percent=2.5) for v in p["virt"].vms)
    load = replace(p["load"], cpu_percent=tuple(c + 1.0 for c in p["load"].cpu_percent), load_avg=(9.0, 9.0, 9.0))
    return {**p, "nvml": NvmlData(p["nvml"].driver_version, gpus), "virt": LibvirtData(vms), "load": load}


def _link_down(p: dict) -> dict:
    gpu = next(g for g in p["nvml"].gpus if isinstance(g.nvlinks, tuple) and len(g.nvlinks) > 1)
    links = (replace(gpu.nvlinks[0], active=False), *gpu.nvlinks[1:])
    return _nvml_gpu(p, gpu.address, nvlinks=links)


def _pinned_across(p: dict) -> dict:
    node1 = [c.id for c in p["sysfs"].cpus if c.numa_node == 1 and c.online]
    return _vm(p, "train-a", pins=(VcpuPin(0, (node1[0],)), VcpuPin(1, (node1[1],))))


def test_assembled_with_the_last_poll_equals_assembled_afresh(parts) -> None:
    """A run of polls, each changing one part of the source data (and some changing nothing but the
    per-poll figures): every snapshot equals the fresh one; the problems and NICs are the last poll's
    own objects while only figures moved, and made again when anything else did."""
    base = parts
    steps = [
        ("the same reading again", lambda p: p),
        ("figures move", _figures_move),
        ("an uncorrected ECC error", lambda p: _nvml_gpu(p, "0000:18:00.0", ecc_volatile_uncorrected=3)),
        ("clocks held down", lambda p: _nvml_gpu(p, "0000:9a:00.0", clock_events=("hw_slowdown",))),
        ("an NVLink down", _link_down),
        ("a GPU VM pinned across the sockets", _pinned_across),
        ("a VM given a NIC VF", lambda p: _vm(p, "web-1", hostdevs=(Hostdev("pci", address="0000:9c:00.2"),))),
        ("a GPU VM shut off", lambda p: _vm(p, "train-a", state="shut off")),
        ("a GPU bound to vfio-pci", lambda p: _pci(p, "0000:18:00.0", driver="vfio-pci")),
        ("a link trained down", lambda p: _pci(p, "0000:9a:00.0", link=replace(
            next(d for d in p["sysfs"].pci_devices if d.address == "0000:9a:00.0").link, current_width=4))),
        ("an mdev removed", lambda p: {**p, "sysfs": replace(p["sysfs"], vgpu_instances=p["sysfs"].vgpu_instances[1:])}),
        ("no RDMA facts", lambda p: {**p, "sysfs": replace(p["sysfs"], net_functions=())}),
        ("IOMMU off", lambda p: {**p, "sysfs": replace(p["sysfs"], iommu=Iommu(enabled=False))}),
        ("a name learnt for an unbound GPU", lambda p: {**p, "names": {"0000:ba:00.0": "Some GPU"}}),
        ("NVML unavailable", lambda p: {**p, "nvml": None, "sources": Sources(nvml="unavailable: test")}),
        ("NVML back", lambda p: {**p, "nvml": base["nvml"], "sources": Sources()}),
        ("libvirt unavailable", lambda p: {**p, "virt": None, "sources": Sources(libvirt="unavailable: test")}),
        ("back to the first reading", lambda p: base),
        ("sysfs read again, nothing changed", lambda p: {**p, "sysfs": copy.deepcopy(p["sysfs"])}),
        ("figures move again", _figures_move),
    ]
    derived = Derived()
    p = base
    last = _assemble(p, derived)
    assert last == _assemble(p)
    assert last.problems and last.nics and any(v.hostdevs for v in last.vms)
    for label, change in steps:
        p = change(p)
        kept = _assemble(p, derived)
        fresh = _assemble(p)
        assert kept == fresh, label
        same_parts = label in ("the same reading again", "sysfs read again, nothing changed")
        if not same_parts:
            assert fresh != last, f"{label}: the change changed nothing (the test would prove nothing)"
        if label.startswith("figures move") or same_parts:
            assert kept.problems is last.problems and kept.nics is last.nics, label
        last = kept
    # the problems followed the changes: the ECC error came and went with its reading
    assert any("3 uncorrected ECC errors" in pr.message
               for pr in _assemble(_nvml_gpu(base, "0000:18:00.0", ecc_volatile_uncorrected=3), derived).problems)
    assert not any("3 uncorrected ECC errors" in pr.message for pr in _assemble(base, derived).problems)


class _Reads:
    """Stands for an object and notes which attributes are read of it."""

    def __init__(self, obj: object, seen: set[str]) -> None:
        self._obj, self._seen = obj, seen

    def __getattr__(self, name: str) -> object:
        self._seen.add(name)
        return getattr(self._obj, name)


def _recorded(snap: HostSnapshot) -> tuple[_Reads, set[str], set[str], set[str]]:
    on_snap: set[str] = set()
    on_gpus: set[str] = set()
    on_vms: set[str] = set()
    inner = replace(snap, gpus=tuple(_Reads(g, on_gpus) for g in snap.gpus),  # type: ignore[misc]
                    vms=tuple(_Reads(v, on_vms) for v in snap.vms))  # type: ignore[misc]
    return _Reads(inner, on_snap), on_snap, on_gpus, on_vms


def test_the_checks_read_no_per_poll_figure(parts) -> None:
    """The problems are kept while only the per-poll figures moved: no check may read one. The NICs are
    kept while nics.nic_inputs are equal: building them reads only those."""
    snap = _assemble(parts)
    assert snap.problems
    rec, on_snap, on_gpus, on_vms = _recorded(snap)
    assert find_problems(rec) == snap.problems  # type: ignore[arg-type]
    assert on_gpus and on_vms  # the checks did look at the GPUs and VMs
    assert not on_snap & set(SNAPSHOT_FIGURES) and not on_gpus & set(GPU_FIGURES) and not on_vms & set(VM_FIGURES)

    rec, on_snap, on_gpus, on_vms = _recorded(snap)
    assert build_nics(rec, parts["sysfs"].net_functions) == snap.nics  # type: ignore[arg-type]
    assert on_snap <= {"pci_devices", "gpus", "vms"}
    assert on_gpus == {"address", "index"}
    assert on_vms <= {"name", "state", "hostdevs"}


def test_load_is_no_input_of_the_problems(parts) -> None:
    """The snapshot's load is left out of the problems' inputs: another load, the same problems."""
    a = _assemble(parts)
    b = _assemble({**parts, "load": Load(cpu_percent=(99.0,), load_avg=(50.0, 50.0, 50.0))})
    assert a.problems == b.problems and a.load != b.load


def test_the_cpu_layout_follows_the_cpus_it_is_asked_about() -> None:
    """The online CPUs and their nodes are kept for the same CPU tuple only: another reading, another
    answer (and back)."""
    from nodeconsole.console.model import Cpu
    from nodeconsole.console.sources.pressure import cpu_layout

    a = tuple(Cpu(id=i, package=0, core=i, numa_node=i // 2, online=i != 1) for i in range(4))
    b = tuple(Cpu(id=i, package=0, core=i, numa_node=0, online=True) for i in range(3))
    assert cpu_layout(a) == ([0, 2, 3], {0: 0, 1: 0, 2: 1, 3: 1})
    assert cpu_layout(b) == ([0, 1, 2], {0: 0, 1: 0, 2: 0})
    assert cpu_layout(a) == ([0, 2, 3], {0: 0, 1: 0, 2: 1, 3: 1})


@pytest.mark.parametrize("extreme", ["high", "zero", "missing"])
def test_no_problem_moves_with_the_per_poll_figures(parts, extreme) -> None:
    """What the proxy above cannot see (a check reading a figure through a snapshot method): every
    per-poll figure pushed to an extreme leaves the problems as they are."""
    snap = _assemble(parts)
    value = {"high": 10**6, "zero": 0, "missing": None}[extreme]

    def figures(obj, names):
        return {n: (() if n == "processes" else value) for n in names if n in vars(obj)}

    moved = replace(
        snap, taken_at=12345.0,
        load=Load(cpu_percent=tuple(100.0 for _ in snap.load.cpu_percent), load_avg=(999.0, 999.0, 999.0))
        if extreme == "high" else Load(),
        gpus=tuple(replace(g, **figures(g, GPU_FIGURES)) for g in snap.gpus),
        vms=tuple(replace(v, **figures(v, VM_FIGURES)) for v in snap.vms))
    assert moved.gpus != snap.gpus and moved.vms != snap.vms
    assert find_problems(moved) == find_problems(snap) == snap.problems


def test_an_unchanged_vm_is_handed_on_as_the_very_same_record(parts, _shared) -> None:
    """A VM whose source record, host devices and steal are those of the last poll comes out of the
    collector as the last poll's record itself (the screens then see at once that nothing moved); one
    whose record moved comes out new, with the same mapping."""
    derived = Derived()
    first = _assemble(parts, derived)
    second = _assemble(parts, derived)
    held = [v for v in first.vms if any(h.gpu for h in v.hostdevs)]
    assert held  # the demo has VMs holding GPUs: their mapped records are the ones kept
    assert all(b is a for a, b in zip(first.vms, second.vms))
    name = held[0].name
    third = _assemble(_vm(parts, name, cpu_percent=12.5), derived)
    moved = next(v for v in third.vms if v.name == name)
    assert moved is not held[0] and moved.cpu_percent == 12.5 and moved.hostdevs == held[0].hostdevs
    assert all(b is a for a, b in zip(second.vms, third.vms) if a.name != name)

    seams = replace(demo_host(_shared), vm_steal=None)
    c = Collector(seams)
    try:
        vms = parts["virt"].vms
        c._steal_of, c._steal_at = {v.name: 3.5 for v in vms}, float("inf")  # a reading that holds
        once, again = c._steal(vms), c._steal(vms)
        assert all(v.steal_percent == 3.5 for v in once) and all(b is a for a, b in zip(once, again))
        c._steal_of = {v.name: 4.0 for v in vms}  # the next reading
        assert all(v.steal_percent == 4.0 for v in c._steal(vms))
    finally:
        c.close()
