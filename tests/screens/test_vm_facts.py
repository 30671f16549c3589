"""VmFacts: a VM row's alignment, GPUs and pins kept across polls, equal to a fresh facts_of() after
every kind of change they depend on."""
from __future__ import annotations

from dataclasses import replace

from nodeconsole.console.collector import Collector
from nodeconsole.console.model import VcpuPin
from nodeconsole.screens.widgets.vm_facts import VmFacts, facts_of


def _check(memo: VmFacts, snap) -> list:
    got = [memo(snap, v) for v in snap.vms]
    assert got == [facts_of(snap, v) for v in snap.vms]
    return got


def test_kept_while_inputs_hold_and_equal_to_fresh_after_each_change(frozen_seams):
    snap = Collector(frozen_seams).collect()
    with_gpus = [v for v in snap.vms if any(h.gpu for h in v.hostdevs)]
    assert with_gpus and any(v.pins for v in snap.vms)
    memo = VmFacts()
    first = _check(memo, snap)
    assert {f.alignment for f in first} & {"aligned", "cross-numa", "unpinned"}

    # the usual poll: new VM records with new CPU figures, the same definitions and host
    tick = replace(snap, vms=tuple(replace(v, cpu_percent=(v.cpu_percent or 0) + 1) for v in snap.vms),
                   gpus=tuple(replace(g) for g in snap.gpus))
    assert all(a is b for a, b in zip(_check(memo, tick), first))

    vm = next(v for v in with_gpus if facts_of(snap, v).alignment == "aligned")
    pinned = {c for p in vm.pins for c in p.cpus}
    gpu = snap.gpu(next(h.gpu for h in vm.hostdevs if h.gpu))
    other_node = next(c.numa_node for c in snap.cpus if c.numa_node not in (None, gpu.numa_node))
    elsewhere = tuple(c.id for c in snap.cpus if c.numa_node == other_node)[:2]
    changes = {
        "pinned elsewhere": replace(tick, vms=tuple(
            replace(v, pins=(VcpuPin(0, elsewhere),)) if v.name == vm.name else v for v in tick.vms)),
        "unpinned": replace(tick, vms=tuple(replace(v, pins=()) if v.name == vm.name else v for v in tick.vms)),
        "GPU moved node": replace(tick, gpus=tuple(
            replace(g, numa_node=other_node) if g.address == gpu.address else g for g in tick.gpus)),
        "GPU renumbered": replace(tick, gpus=tuple(
            replace(g, index=g.index + 10) if g.address == gpu.address else g for g in tick.gpus)),
        "GPU given back": replace(tick, vms=tuple(
            replace(v, hostdevs=()) if v.name == vm.name else v for v in tick.vms)),
        "its CPUs on another node": replace(tick, cpus=tuple(
            replace(c, numa_node=other_node) if c.id in pinned else c for c in tick.cpus)),
    }
    before = memo(tick, vm)
    for name, changed in changes.items():
        after = _check(memo, changed)[[v.name for v in changed.vms].index(vm.name)]
        assert after != before, name  # each change shows (and _check found it equal to a fresh one)
        assert _check(memo, tick)[[v.name for v in tick.vms].index(vm.name)] == before  # and back


def test_forgets_vms_gone(frozen_seams):
    snap = Collector(frozen_seams).collect()
    memo = VmFacts()
    for i in range(200):
        memo(snap, replace(snap.vms[0], name=f"old{i}"))
    memo(replace(snap, taken_at=1.0), snap.vms[0])  # a new poll with the host's real VMs
    assert len(memo._facts) == 1


def test_overview_rows_kept_while_a_vm_holds_and_equal_to_fresh(frozen_seams):
    from nodeconsole.screens.overview import vm_rows
    from nodeconsole.screens.widgets.sparks import Sparks

    snap = Collector(frozen_seams).collect()
    history = {v.name: (10.0, 20.0) for v in snap.vms}
    memo: dict = {}
    sparks, facts = Sparks(), VmFacts()
    first = dict(vm_rows(snap, history, sparks, facts, memo))
    assert first == dict(vm_rows(snap, history))
    name = next(v.name for v in snap.vms if v.state == "running")
    moved = replace(snap, vms=tuple(replace(v, cpu_percent=77.0) if v.name == name else v for v in snap.vms))
    history = {**history, name: (10.0, 77.0)}
    second = dict(vm_rows(moved, history, sparks, facts, memo))
    assert second == dict(vm_rows(moved, history))
    assert second[name] != first[name] and "77" in second[name]
    assert all(second[k] is first[k] for k in first if k != name)  # the others: the very same rows


def test_overview_row_of_an_unchanged_vm_follows_the_host_and_its_sparkline(frozen_seams):
    """The very same VM record keeps its row only while the host's layout and its sparkline are the same:
    GPUs renumbered (its GPUs column) or a new bar (its sparkline) make the row anew."""
    from nodeconsole.screens.overview import vm_rows
    from nodeconsole.screens.widgets.sparks import Sparks

    snap = Collector(frozen_seams).collect()
    history = {v.name: (10.0, 20.0) for v in snap.vms}
    memo: dict = {}
    sparks, facts = Sparks(), VmFacts()
    first = dict(vm_rows(snap, history, sparks, facts, memo))
    holder = next(v.name for v in snap.vms if first[v.name][6])  # a VM holding a GPU
    renumbered = replace(snap, gpus=tuple(replace(g, index=g.index + 10) for g in snap.gpus))
    second = dict(vm_rows(renumbered, history, sparks, facts, memo))
    assert second == dict(vm_rows(renumbered, history))
    assert second[holder][6] != first[holder][6] and "GPU1" in second[holder][6]
    history = {**history, holder: (10.0, 20.0, 90.0)}
    third = dict(vm_rows(renumbered, history, sparks, facts, memo))
    assert third[holder][4] != second[holder][4]
    assert third == dict(vm_rows(renumbered, history))
