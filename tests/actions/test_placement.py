"""`place`'s core on a made-up host (2 nodes × 8 cores × 2 threads, CPUAffinity= keeps cores 0-1 of each
node): node 0 has a PCIe switch with two idle GPUs (18:00.0, 19:00.0) and a NIC with 2 free VFs, a second
switch with an idle GPU (3a:00.0) and a busy one (3b:00.0); node 1 an idle GPU in shut-off VM holder's
definition (9a:00.0), a MIG GPU (9b:00.0), a NIC without VFs, and an unbound GPU (ba:00.0) sharing its
IOMMU group with an NVMe on nvme. Shut-off VM `pinned` holds node 0's cores 2-4 (CPUs 2-4,18-20)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from nodeconsole.actions.placement import Alternative, PlacementError, gpu_blockers, place
from nodeconsole.console.collector import Collector
from nodeconsole.console.demo.builders import chipset, gpu_functions, nic_functions, nvme_functions, pins, switch
from nodeconsole.console.demo.generator import generate
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.presets import H100, mig_instance
from nodeconsole.console.demo.spec import CpuSpec, GpuProcessSpec, GpuSpec, HostBridge, HostdevSpec, HostSpec, VmSpec
from nodeconsole.console.gpu_events import Drain, Health
from nodeconsole.console.model import NvLink
from nodeconsole.console.root import Root
from nodeconsole.console.seams import simulated_host

GIB = 1048576
A0, A1, B0, B1 = "0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0"
C0, C1, D0 = "0000:9a:00.0", "0000:9b:00.0", "0000:ba:00.0"
VF1, VF2 = "0000:1a:00.1", "0000:1a:00.2"


def spec() -> HostSpec:
    cpu = CpuSpec(sockets=2, cores_per_socket=8, threads_per_core=2)
    busy = GpuSpec(processes=(GpuProcessSpec(4242, "python3", 1024),))
    mig = GpuSpec(mig_enabled=True, mig_instances=(mig_instance(H100, "3g.40gb", 0, 1),))
    bridges = (chipset(0),
               HostBridge(0x15, 0, (switch(1, 0x15, [gpu_functions(GpuSpec()), gpu_functions(GpuSpec()),
                                                     nic_functions(2)]),)),
               HostBridge(0x37, 0, (switch(1, 0x37, [gpu_functions(GpuSpec()), gpu_functions(busy)]),)),
               HostBridge(0x97, 1, (switch(1, 0x97, [gpu_functions(GpuSpec()), gpu_functions(mig),
                                                     nic_functions(0)]),)),
               HostBridge(0xB7, 1, (switch(1, 0xB7, [gpu_functions(GpuSpec(), driver=None), nvme_functions()],
                                           acs=False),)))
    vms = (VmSpec("pinned", "shut off", 6, 4096, pins(cpu, 0, 2, 6)),
           VmSpec("holder", "shut off", 4, 4096, hostdevs=(HostdevSpec(f"{C0[:-1]}0"), HostdevSpec(f"{C0[:-1]}1"))),
           VmSpec("empty", "shut off", 4, 8192))
    return HostSpec(hostname="place-test", cpu=cpu, memory_per_node_mib=1048576, hugepages_1g_per_node=16,
                    cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda2 ro intel_iommu=on iommu=pt",
                    host_bridges=bridges, vms=vms)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    h = generate(spec(), tmp_path_factory.mktemp("place") / "host")
    root = Root(h.root)
    seams = simulated_host(root=root, libvirt_uri=h.libvirt_uri, state_dir=h.dest,
                           nvml_lib=SimulatedNvml.from_file(h.nvml_state, root=root))
    c = Collector(seams)
    try:
        return c.collect(), root
    finally:
        c.close()


def test_the_pair_on_one_switch_with_its_vfs_sized_on_node_0(host):
    snap, root = host
    p = place(snap, root, 2, with_nic=True)
    assert p.ok, p.refusal
    assert p.gpus == (A0, A1) and p.nics == (VF1, VF2) and p.nodes == (0,) and p.nic_notes == ()
    assert "one PCIe switch (PIX)" in p.reasons and "a free VF at PIX for 2 of 2 GPU(s)" in p.reasons
    # 70% of (16 online − 4 kept) = 8, but `pinned` holds cores 2-4: three whole cores are left
    assert p.vcpus == 6 and p.cpus == (5, 21, 6, 22, 7, 23) and p.threads_per_core == 2
    assert any(r.startswith("capped at 6 vCPUs") and "VM pinned (shut off, CPU 2-4,18-20)" in r for r in p.reasons)
    assert p.emulator == (0, 1, 16, 17)
    assert p.memory_kib == 319 * GIB  # 2 × 2 × 81559 MiB, rounded up to whole 1 GiB pages
    assert p.hugepages.size_kib == GIB and p.hugepages.per_node == {0: 319}
    assert p.hugepages.free == {0: 16} and p.hugepages.reserved == {0: 16}
    assert [a.gpus for a in p.alternatives] == [(A0, B0), (A1, B0)]
    assert p.alternatives[0].worse == ("spans host bridges of one NUMA node (NODE); no VF at PIX for "
                                       f"{B0} (NODE)")
    d = p.to_dict()
    assert set(d) == {"gpus", "nics", "nodes", "vcpus", "cpus", "memory_kib", "hugepages", "reasons", "alternatives"}
    assert d["hugepages"] == {"size_kib": GIB, "per_node": {"0": 319}, "free": {"0": 16}}


def test_blockers_name_each_reason(host):
    snap, _ = host
    by = {g.address: gpu_blockers(snap, g, None) for g in snap.gpus}
    assert by[A0] == [] and by[A1] == [] and by[B0] == []
    assert by[B1] == ["busy: pid 4242 python3"]
    assert by[C0] == ["in VM holder (shut off)'s definition"]
    assert by[C1][0].startswith("MIG mode on")
    assert len(by[D0]) == 1 and by[D0][0].startswith("IOMMU group") and "bound to nvme" in by[D0][0]
    assert gpu_blockers(snap, snap.gpu(C0), "holder") == []  # its own GPU is free for it


def test_a_vms_own_gpu_and_pins_count_as_free(host):
    snap, root = host
    assert place(snap, root, 1).gpus == (A0,)  # for no VM, the first by address
    p = place(snap, root, 1, vm="pinned", gpus=[A0])
    assert p.vcpus == 8 and p.cpus == (2, 18, 3, 19, 4, 20, 5, 21)  # its own cores are free for it


def test_nvlink_outranks_one_switch(host):
    snap, root = host
    link = {A1: B0, B0: A1}
    gpus = tuple(replace(g, nvlinks=(NvLink(0, True, 4, link[g.address], "gpu"),)) if g.address in link else g
                 for g in snap.gpus)
    p = place(replace(snap, gpus=gpus), root, 2)
    assert p.gpus == (A1, B0) and "one NVLink domain (every pair joined by NVLink)" in p.reasons
    assert p.alternatives[0].gpus == (A0, A1) and p.alternatives[0].worse == "not one NVLink domain"


def test_drained_unhealthy_and_short_memory_are_refused(host):
    snap, root = host
    gpus = tuple(replace(g, drain=Drain("RMA 42", "alice", "2026-12-02T09:00:00Z")) if g.address == A0 else
                 replace(g, health=Health("unhealthy", ("Xid 79 (fallen off the bus)",))) if g.address == A1 else g
                 for g in snap.gpus)
    sick = replace(snap, gpus=gpus)
    assert place(sick, root, 1).gpus == (B0,)
    p = place(sick, root, 2)
    assert not p.ok and p.gpus == ()
    assert p.refusal.startswith(f"2 GPUs asked for; 1 free (GPU 2 ({B0})). The others: ")
    assert f"GPU 0 ({A0}): drained: RMA 42 (alice, 2026-12-02T09:00:00Z)" in p.refusal
    assert f"GPU 1 ({A1}): unhealthy: Xid 79 (fallen off the bus)" in p.refusal
    assert dict(p.blocked)[f"GPU 0 ({A0})"] == ("drained: RMA 42 (alice, 2026-12-02T09:00:00Z)",)
    assert [label for label, _ in p.blocked] == [f"GPU {i} ({a})" for i, a in
                                                 ((0, A0), (1, A1), (3, B1), (4, C0), (5, C1), (6, D0))]
    listed = place(sick, root, 1, gpus=["0"])
    assert not listed.ok and listed.refusal.startswith(f"GPU 0 ({A0}) drained: RMA 42")
    big = place(snap, root, 1, gpus=[A0], memory_factor=20)  # 20 × 81559 MiB on a node of 1 TiB
    assert not big.ok and big.refusal.startswith("memory does not fit: node 0 needs 1593 GiB (1593 pages of 1 GiB) "
                                                 "and has 16 free pages plus 963 GiB of free memory (less 4 GiB "
                                                 "it keeps)")
    # the edge: 16 free pages + (967 GiB free − the 4 GiB a node keeps) = 979 pages
    fits = place(snap, root, 1, gpus=[A0], memory_kib=979 * GIB)
    assert fits.ok and fits.hugepages.per_node == {0: 979}
    assert "hugepages of 1 GiB on node 0: 979 needed, 16 free of 16 reserved; 963 more to reserve from its free " \
           "memory" in fits.reasons
    assert not place(snap, root, 1, gpus=[A0], memory_kib=980 * GIB).ok


def test_vcpus_asked_for_fit_exactly_or_are_refused(host):
    snap, root = host
    p = place(snap, root, 1, gpus=[A0], vcpus=4, hugepage_kib=2048, memory_kib=8 * GIB)
    assert p.cpus == (5, 21, 6, 22) and p.hugepages.per_node == {0: 4096} and p.hugepages.free == {0: 0}
    p = place(snap, root, 1, gpus=[A0], vcpus=7)
    assert not p.ok and p.refusal.startswith("7 vCPUs asked for; node 0 has 6 CPU(s)")
    p = place(snap, root, 0, vm="empty", hugepage_kib=0)
    assert p.ok and p.gpus == () and p.nodes == (1,) and p.vcpus == 4 and p.memory_kib == 8 * GIB
    assert p.hugepages.size_kib == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"count": -1}, "a GPU count is 0 or more"),
    ({"count": 1, "memory_factor": 0}, "the memory factor must be a positive number"),
    ({"count": 1, "vm": "nope"}, "unknown VM nope"),
    ({"count": 1, "gpus": ["0000:ff:00.0"]}, "no PCI device 0000:ff:00.0 on this host"),
    ({"count": 2, "gpus": ["0", A0]}, "is named twice"),
])
def test_bad_input_is_an_error(host, kwargs, message):
    snap, root = host
    with pytest.raises(PlacementError, match=message):
        place(snap, root, **kwargs)


def test_gpus_of_two_nodes_split_the_memory_and_fill_the_node_with_room(tmp_path):
    """The benchmark preset's free variant, small: GPU 0 (node 0) and GPU 2 (node 1) are the free ones;
    node 0's free CPUs are all pinned to running VMs, node 1 keeps core 3 (CPUs 7, 15) free."""
    from nodeconsole.console.demo.presets import large_spec

    h = generate(large_spec(gpus=4, cpus=16, vms=6, free_gpus=2), tmp_path / "host")
    root = Root(h.root)
    c = Collector(simulated_host(root=root, libvirt_uri=h.libvirt_uri, state_dir=h.dest,
                                 nvml_lib=SimulatedNvml.from_file(h.nvml_state, root=root)))
    try:
        snap = c.collect()
    finally:
        c.close()
    p = place(snap, root, 2, with_nic=True)
    assert p.ok and p.gpus == ("0000:0b:00.0", "0000:1b:00.0") and p.nodes == (0, 1)
    assert p.nics == ("0000:0d:00.1", "0000:1d:00.1")
    assert "across NUMA nodes (SYS)" in p.reasons
    assert p.cpus == (7, 15) and p.threads_per_core == 2  # node 0 has none free: node 1 takes its share
    assert "node 0 takes 0 vCPUs, not 2: it has no more free CPUs" in p.reasons
    assert p.hugepages.per_node == {0: 160, 1: 159} and p.memory_kib == 319 * GIB
    assert not place(snap, root, 3).ok  # the third free one does not exist


def test_the_nearest_vf_when_none_is_at_pix_and_a_listed_gpu_held_by_a_vm(host):
    snap, root = host
    p = place(snap, root, 1, gpus=[B0], with_nic=True)
    assert p.ok and p.nics == (VF1,)
    assert p.nic_notes == (f"VF {VF1} is not at PIX for GPU 2 ({B0}) (nearest: NODE)",)
    assert "a free VF at PIX for 0 of 1 GPU(s)" in p.reasons
    p = place(snap, root, 1, gpus=[C0])
    assert not p.ok and p.refusal == f"GPU 4 ({C0}) in VM holder (shut off)'s definition"
    assert place(snap, root, 1, gpus=[C0], vm="holder").gpus == (C0,)


def test_a_degraded_gpu_is_taken_with_a_word_and_unknown_nvlink_is_said(host):
    snap, root = host
    gpus = tuple(replace(g, health=Health("degraded", ("2 uncorrectable ECC errors in its lifetime",))) if g.address == A0
                 else replace(g, nvlink_state=None) if g.address == A1 else g for g in snap.gpus)
    p = place(replace(snap, gpus=gpus), root, 2)
    assert p.gpus == (A0, A1)
    assert "GPU 0 (0000:18:00.0) is degraded: 2 uncorrectable ECC errors in its lifetime" in p.reasons
    assert f"NVLink not known for {A1}: NVML does not see a GPU on vfio-pci or unbound" in p.reasons


def test_a_vm_keeps_the_gpu_it_holds_when_nothing_is_better(host):
    snap, root = host
    # holder's C0 is alone on node 1's switch; A0 (node 0) is as good in topology and first by address
    p = place(snap, root, 1, vm="holder")
    assert p.gpus == (C0,) and p.nodes == (1,)
    assert p.alternatives[0] == Alternative((A0,), "takes fewer of the GPUs the VM holds already")


def test_on_an_nvswitch_baseboard_the_pcie_tree_decides_inside_the_domain(tmp_path):
    """Every GPU NVML sees joins the NVLink fabric (4 NVSwitches): all sets are one NVLink domain, so the
    pair on one switch wins and a set across the nodes is worse only by its PCIe spread."""
    h = generate(replace(spec(), nvswitches=4), tmp_path / "host")
    root = Root(h.root)
    c = Collector(simulated_host(root=root, libvirt_uri=h.libvirt_uri, state_dir=h.dest,
                                 nvml_lib=SimulatedNvml.from_file(h.nvml_state, root=root)))
    try:
        snap = c.collect()
    finally:
        c.close()
    p = place(snap, root, 2, vm="holder")
    assert p.gpus == (A0, A1)
    assert p.reasons[:3] == ("one NVLink domain (every pair joined by NVLink)", "one PCIe switch (PIX)", "NUMA node 0")
    worse = dict((a.gpus, a.worse) for a in p.alternatives)
    assert worse[(A0, B0)] == "spans host bridges of one NUMA node (NODE)"
    across = place(snap, root, 2, gpus=[A0, C0], vm="holder")
    assert across.ok and across.nodes == (0, 1) and "one NVLink domain (every pair joined by NVLink)" in across.reasons
    assert "across NUMA nodes (SYS)" in across.reasons
