"""The placement planner on small generated topologies (hypothesis) and on hand-made cases: no vCPU on a
reserved or offline CPU, no two vCPUs on one CPU unless the admin asked, thread pairs on sibling pairs,
every other defined VM's CPUs (running, paused or shut off) never used unless the overlap is allowed,
and the same input always gives the same proposal."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeconsole.actions.pin_planner import (
    PinRequest,
    busy_cpus,
    busy_of,
    default_reserve,
    parse_cpu_choice,
    propose,
    request_for,
    topology_of,
)
from nodeconsole.console.model import (
    Cpu,
    Gpu,
    GpuOwner,
    Hostdev,
    HostInfo,
    HostSnapshot,
    Iommu,
    Load,
    NumaNode,
    Sources,
    VcpuPin,
    Vm,
)

GIB = 1024 * 1024


def make_host(nodes: int, cores: int, threads: int, offline=frozenset(), gpus=(), vms=(),
              node_mem_gib: int = 256) -> HostSnapshot:
    """A host numbered as Linux numbers a multi-socket SMT machine: first threads of every core of every
    node, then the second threads (CPU c and c + nodes*cores are siblings)."""
    total = nodes * cores
    cpus = []
    for t in range(threads):
        for n in range(nodes):
            for k in range(cores):
                cid = t * total + n * cores + k
                sib = tuple(x * total + n * cores + k for x in range(threads))
                on = cid not in offline
                cpus.append(Cpu(id=cid, package=n if on else -1, core=k if on else -1,
                                numa_node=n if on else None, online=on,
                                siblings=tuple(s for s in sib if s not in offline) if on else ()))
    numa = tuple(NumaNode(id=n, cpus=tuple(c.id for c in cpus if c.numa_node == n),
                          memory_kib=node_mem_gib * GIB) for n in range(nodes))
    gpu_objs = tuple(Gpu(address=a, name="NVIDIA H100 80GB HBM3", uuid=None, driver="vfio-pci", numa_node=n,
                         owner=GpuOwner("vfio"), index=i) for i, (a, n) in enumerate(gpus))
    return HostSnapshot(schema=1, taken_at=0.0, host=HostInfo(hostname="t"), cpus=tuple(cpus), numa_nodes=numa,
                        pci_devices=(), iommu=Iommu(enabled=True), gpus=gpu_objs, vms=tuple(vms), load=Load(),
                        sources=Sources())


def gpu_vm(name: str, vcpus: int, gpus: tuple[str, ...], threads: int = 1, state: str = "running",
           pins: tuple[tuple[int, ...], ...] = (), memory_gib: int = 512) -> Vm:
    return Vm(name=name, state=state, vcpus=vcpus, threads_per_core=threads, memory_kib=memory_gib * GIB,
              pins=tuple(VcpuPin(i, c) for i, c in enumerate(pins)),
              hostdevs=tuple(Hostdev(type="pci", address=a, gpu=a) for a in gpus))


def plan_for(snap: HostSnapshot, name: str, reserve=None, cpus=None, allow_overlap=False):
    topo = topology_of(snap)
    held = default_reserve(topo) if reserve is None else tuple(reserve)
    return propose(topo, request_for(snap, snap.vm(name), cpus), held, busy_of(snap, topo, name),
                   allow_overlap), held


# -- generated topologies -----------------------------------------------------------------------------

@st.composite
def scenarios(draw):
    nodes = draw(st.integers(1, 3))
    cores = draw(st.integers(1, 6))
    threads = draw(st.integers(1, 2))
    ids = list(range(nodes * cores * threads))
    offline = frozenset(draw(st.sets(st.sampled_from(ids), max_size=len(ids) // 3)))
    gpus = tuple((f"0000:{0x10 + i:02x}:00.0", draw(st.integers(0, nodes - 1)))
                 for i in range(draw(st.integers(1, 2))))
    guest_threads = draw(st.sampled_from([1, 2]))
    vcpus = draw(st.integers(1, 8)) * (guest_threads if draw(st.booleans()) else 1)
    mine = draw(st.lists(st.sampled_from([a for a, _ in gpus]), min_size=1, max_size=2, unique=True))
    online = [c for c in ids if c not in offline]
    others = []
    for k in range(draw(st.integers(0, 3))):
        pins = draw(st.lists(st.sampled_from(online), max_size=4)) if online else []
        others.append(gpu_vm(f"other-{k}", max(1, len(pins)), (), pins=tuple((c,) for c in pins),
                             state=draw(st.sampled_from(["running", "paused", "shut off"]))))
    vm = gpu_vm("vm", vcpus, tuple(mine), threads=guest_threads)
    reserve = None if draw(st.booleans()) else draw(st.sets(st.sampled_from(ids), max_size=3))
    return make_host(nodes, cores, threads, offline, gpus, [vm, *others]), reserve


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_no_vcpu_on_a_reserved_or_offline_cpu_and_none_shared(case, allow_overlap):
    snap, reserve = case
    prop, held = plan_for(snap, "vm", reserve, allow_overlap=allow_overlap)
    topo = topology_of(snap)
    vm = snap.vm("vm")
    gpu_nodes = {g.numa_node for g in snap.gpus if g.address in {h.gpu for h in vm.hostdevs}}
    busy = busy_cpus(snap, topo, "vm")
    if not prop.ok:
        assert prop.vcpus == () and prop.refusal
        if len(gpu_nodes) == 1:  # a node without room; without the overlap allowed, other VMs' pins count
            (node,) = gpu_nodes
            usable = [c for c in topo.node_cpus(node) if c not in held]
            free = [c for c in usable if c not in busy]
            assert len(usable) < vm.vcpus or (not allow_overlap and len(free) < vm.vcpus), prop.refusal
            if len(usable) >= vm.vcpus:
                assert "--allow-overlap" in prop.fix
        return
    assert len(prop.vcpus) == vm.vcpus
    assert not set(prop.vcpus) & set(held), "a vCPU on the host reserve"
    assert set(prop.vcpus) <= topo.online, "a vCPU on an offline CPU"
    assert len(set(prop.vcpus)) == len(prop.vcpus), "two vCPUs share a CPU without being asked"
    assert set(prop.emulator) <= set(held)
    assert {topo.node_of[c] for c in prop.vcpus} <= gpu_nodes
    assert set(prop.memory_nodes) == {topo.node_of[c] for c in prop.vcpus}
    # other VMs' CPUs (whatever their state) only when allowed and the node has too few free ones, and
    # then they are reported
    assert {c for c, _ in prop.overlaps} == set(prop.vcpus) & set(busy)
    if not allow_overlap:
        assert prop.overlaps == ()
    if len(gpu_nodes) == 1:
        (node,) = gpu_nodes
        free = [c for c in topo.node_cpus(node) if c not in held and c not in busy]
        if len(free) >= vm.vcpus:
            assert prop.overlaps == ()
        # guest thread pairs on host sibling pairs while the node has whole free cores for them
        whole = [core for core in topo.cores(node) if len(core) == 2 and set(core) <= set(free)]
        if vm.threads_per_core == 2 and vm.vcpus % 2 == 0 and len(whole) * 2 >= vm.vcpus:
            for i in range(0, vm.vcpus, 2):
                assert topo.siblings[prop.vcpus[i]] == tuple(sorted(prop.vcpus[i:i + 2]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.randoms(use_true_random=False))
def test_the_same_input_gives_the_same_plan(case, rnd):
    snap, reserve = case
    first, _ = plan_for(snap, "vm", reserve)
    assert plan_for(snap, "vm", reserve)[0] == first
    # the order the sources listed CPUs, nodes and VMs in does not matter either
    shuffled = replace(snap, cpus=tuple(rnd.sample(snap.cpus, len(snap.cpus))),
                       numa_nodes=tuple(rnd.sample(snap.numa_nodes, len(snap.numa_nodes))),
                       vms=tuple(rnd.sample(snap.vms, len(snap.vms))))
    assert plan_for(shuffled, "vm", reserve)[0] == first


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data(), st.booleans())
def test_admin_cpu_list(case, data, allow_overlap):
    snap, reserve = case
    topo = topology_of(snap)
    held = default_reserve(topo) if reserve is None else tuple(reserve)
    online = sorted(topo.online)
    if not online:
        return
    chosen = tuple(sorted(data.draw(st.sets(st.sampled_from(online), min_size=1, max_size=6))))
    prop, _ = plan_for(snap, "vm", reserve, cpus=chosen, allow_overlap=allow_overlap)
    vm = snap.vm("vm")
    if set(chosen) & set(held):
        assert not prop.ok and "host reserve" in prop.refusal
        return
    if set(chosen) & set(busy_cpus(snap, topo, "vm")) and not allow_overlap:
        assert not prop.ok and "--allow-overlap" in prop.fix
        return
    assert prop.ok and set(prop.vcpus) <= set(chosen) and len(prop.vcpus) == vm.vcpus
    # sharing only because the list is shorter than the VM; otherwise one CPU per vCPU
    assert len(set(prop.vcpus)) == min(vm.vcpus, len(chosen))
    assert (len(chosen) < vm.vcpus) == any("share" in n for n in prop.notes)


@given(st.text(alphabet="0123456789-,x ^", max_size=12))
def test_parse_cpu_choice_accepts_only_online_cpus_that_exist(text):
    snap = make_host(2, 2, 2, offline=frozenset({3}))
    topo = topology_of(snap)
    try:
        cpus = parse_cpu_choice(text, topo)
    except ValueError as e:
        assert str(e).startswith("--cpus: ")
        return
    assert set(cpus) <= topo.online


# -- hand-made cases ----------------------------------------------------------------------------------

def test_thread_pairs_land_on_sibling_pairs_and_the_reserve_is_left():
    # 2 nodes x 4 cores x 2 threads: node 1 = CPUs 4-7 and 12-15, CPU 4's sibling is 12
    snap = make_host(2, 4, 2, gpus=[("0000:9b:00.0", 1)],
                     vms=[gpu_vm("vm", 6, ("0000:9b:00.0",), threads=2, memory_gib=512)])
    prop, held = plan_for(snap, "vm")
    assert held == (0, 4, 8, 12)  # the first core of each node with its sibling
    assert prop.vcpus == (5, 13, 6, 14, 7, 15)
    assert prop.emulator == (4, 12) and prop.memory_nodes == (1,) and prop.overlaps == ()


def test_a_guest_without_threads_gets_one_core_per_vcpu_first():
    snap = make_host(1, 4, 2, gpus=[("0000:17:00.0", 0)], vms=[gpu_vm("vm", 4, ("0000:17:00.0",))])
    prop, _ = plan_for(snap, "vm")
    assert prop.vcpus == (1, 2, 3, 5)  # cores 1-3 first threads, then a second thread


def test_other_vms_cpus_are_avoided_whatever_their_state_and_shared_only_when_allowed():
    # CPUs 0-5, 0 reserved; db (running) on 1, off (shut off) on 2, pz (paused) on 3
    others = [gpu_vm("db", 1, (), pins=((1,),)), gpu_vm("off", 1, (), pins=((2,),), state="shut off"),
              gpu_vm("pz", 1, (), pins=((3,),), state="paused")]
    snap = make_host(1, 6, 1, gpus=[("0000:17:00.0", 0)], vms=[gpu_vm("vm", 2, ("0000:17:00.0",)), *others])
    prop, _ = plan_for(snap, "vm")
    assert prop.vcpus == (4, 5) and prop.overlaps == ()  # a shut-off VM gets its CPU back when it starts
    snap = replace(snap, vms=(gpu_vm("vm", 3, ("0000:17:00.0",)),) + snap.vms[1:])
    prop, _ = plan_for(snap, "vm")
    assert not prop.ok and prop.vcpus == ()
    assert ("node 0 has 2 CPU(s) outside the host reserve that no other VM is pinned to; the others are pinned "
            "to VMs db (running, CPU 1), off (shut off, CPU 2) and pz (paused, CPU 3)") in prop.refusal
    assert "--allow-overlap" in prop.fix
    # allowed: the stopped VM's CPU first (nothing competes for it until it starts), and said so
    prop, _ = plan_for(snap, "vm", allow_overlap=True)
    assert sorted(prop.vcpus) == [2, 4, 5] and prop.overlaps == ((2, ("off",)),)
    assert any("CPU 2 shared on purpose (overlap allowed) with VM off (shut off, CPU 2)" in w
               for w in prop.warnings)
    # an admin's list onto another VM's pin: refused unless allowed
    prop, _ = plan_for(snap, "vm", cpus=(1, 4, 5))
    assert not prop.ok and "CPU 1 of --cpus is pinned to VM db (running, CPU 1)" in prop.refusal
    prop, _ = plan_for(snap, "vm", cpus=(1, 4, 5), allow_overlap=True)
    assert prop.ok and prop.overlaps == ((1, ("db",)),)


def test_the_reserve_is_what_the_host_keeps_plus_a_core_where_it_keeps_none():
    topo = topology_of(make_host(2, 4, 2))  # node 0: 0-3,8-11; node 1: 4-7,12-15
    assert default_reserve(topo) == (0, 4, 8, 12)
    assert default_reserve(topo, frozenset({1, 9, 5, 13})) == (1, 5, 9, 13)
    assert default_reserve(topo, frozenset({2, 10})) == (2, 4, 10, 12)  # node 1 keeps nothing: its first core


def test_no_room_is_a_refusal_not_a_shared_cpu():
    snap = make_host(2, 2, 1, gpus=[("0000:17:00.0", 0)], vms=[gpu_vm("vm", 2, ("0000:17:00.0",))])
    prop, _ = plan_for(snap, "vm")
    assert not prop.ok and "node 0 has 1 online CPU(s) outside the host reserve" in prop.refusal
    assert "--cpus" in prop.fix


def test_gpus_on_two_nodes_get_a_split_and_a_warning():
    snap = make_host(2, 4, 1, gpus=[("0000:17:00.0", 0), ("0000:9b:00.0", 1)],
                     vms=[gpu_vm("vm", 4, ("0000:17:00.0", "0000:9b:00.0"))])
    prop, _ = plan_for(snap, "vm")
    assert prop.vcpus == (1, 2, 5, 6) and prop.nodes == (0, 1) and prop.memory_nodes == (0, 1)
    assert any("split" in w for w in prop.warnings)


def test_size_warnings():
    # 1 node x 4 cores: 3 vCPUs take 3 of 4 cores (75% > 70%); 64 GiB < 2 x 80 GiB (H100 on vfio)
    snap = make_host(1, 4, 1, gpus=[("0000:17:00.0", 0)],
                     vms=[gpu_vm("vm", 3, ("0000:17:00.0",), memory_gib=64)], node_mem_gib=32)
    prop, _ = plan_for(snap, "vm")
    text = " ".join(prop.warnings)
    assert "3 of node 0's 4 physical cores" in text
    assert "64 GiB of memory, below 2× the 80 GiB VRAM" in text
    assert "node 0 only 32 GiB" in text


def test_a_vm_without_devices_needs_a_cpu_list():
    snap = make_host(1, 4, 1, vms=[gpu_vm("vm", 2, ())])
    prop, _ = plan_for(snap, "vm")
    assert not prop.ok and "no GPU or NIC" in prop.refusal
    prop, _ = plan_for(snap, "vm", cpus=(2, 3))
    assert prop.ok and prop.vcpus == (2, 3)


@pytest.mark.parametrize("text, reason", [
    ("0-3,x", "'x' is not a number"), ("7", "CPU 7 does not exist"), ("3", "CPU 3 is offline"),
    ("5-2", "runs backwards")])
def test_bad_cpu_lists_say_why(text, reason):
    topo = topology_of(make_host(1, 4, 1, offline=frozenset({3})))
    with pytest.raises(ValueError, match=reason):
        parse_cpu_choice(text, topo)


def test_request_reads_gpu_nodes_and_vram():
    snap = make_host(2, 2, 1, gpus=[("0000:17:00.0", 0), ("0000:9b:00.0", 1)],
                     vms=[gpu_vm("vm", 2, ("0000:9b:00.0",))])
    req = request_for(snap, snap.vm("vm"))
    assert req == PinRequest(vm="vm", vcpus=2, threads_per_core=1, memory_kib=512 * GIB, gpu_nodes=((1, 1),),
                             vram_mib=80 * 1024, gpus=("GPU 1 0000:9b:00.0",))
