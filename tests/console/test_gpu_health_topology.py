"""GPU health from NVML, NVLink in the topology, the NCCL expectation, owners in the matrix and the VM's
paths, host pressure and nvidia-smi's numbering — on one demo host (an HGX H100 baseboard)."""
from __future__ import annotations

import json
from itertools import combinations

import pytest

from nodeconsole.actions.nccl.snapshot_topology import local_plan, nvlink_connected
from nodeconsole.actions.plan import RequestError
from nodeconsole.actions.targets import resolve_gpu
from nodeconsole.console.collector import Collector
from nodeconsole.console.demo.nvml_sim import SimulatedNvml, uninstall
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.demo.vm_load import demo_cpu_percent, demo_vm_cpu_percent, demo_vm_steal_percent
from nodeconsole.console.model import NA
from nodeconsole.console.root import Root
from nodeconsole.console.seams import simulated_host
from nodeconsole.console.sources.nvml import read_nvml
from nodeconsole.console.topology import matrix, tree, vm_paths

BUSY, TRAIN_A_GPU, MIG, SLOW = "0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:bb:00.0"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("health") / "demo")


@pytest.fixture(scope="module")
def lib(host):
    yield SimulatedNvml.from_file(host.nvml_state, root=Root(host.root), clock=lambda: 1000.0)
    uninstall()


@pytest.fixture(scope="module")
def snap(host, lib):
    seams = simulated_host(root=Root(host.root), libvirt_uri=host.libvirt_uri, nvml_lib=lib, state_dir=host.dest,
                  vm_load=demo_vm_cpu_percent, cpu_load=demo_cpu_percent, vm_steal=demo_vm_steal_percent)
    collector = Collector(seams)
    try:
        yield collector.collect()
    finally:
        collector.close()


def test_health_fields_read_through_pynvml(lib):
    gpus = {g.address: g for g in read_nvml(lib).gpus}
    busy, slow, mig = gpus[BUSY], gpus[SLOW], gpus[MIG]
    assert (busy.clock_sm_max_mhz, busy.clock_mem_mhz, busy.clock_mem_max_mhz) == (1980, 2619, 2619)
    assert isinstance(busy.clock_sm_mhz, int) and 345 <= busy.clock_sm_mhz <= 1980
    assert isinstance(busy.clock_events, tuple)
    assert mig.clock_events == ("gpu_idle",) and mig.clock_sm_mhz == 345  # no load on the MIG GPU
    assert (slow.ecc_volatile_uncorrected, slow.ecc_aggregate_uncorrected) == (0, 2)
    assert (slow.ecc_volatile_corrected, slow.ecc_aggregate_corrected) == (5, 311)
    assert slow.pcie_replay_count == 1184 and slow.remapped_rows_pending == 1
    assert (slow.remapped_rows_correctable, slow.remapped_rows_uncorrectable) == (0, 0)
    assert busy.retired_pages == NA  # an H100 remaps rows; page retirement is NOT_SUPPORTED
    assert (busy.fabric_state, busy.fabric_status, busy.fabric_clique_id) == ("completed", "ok", 0)
    links = busy.nvlinks
    assert isinstance(links, tuple) and len(links) == 18 and all(lk.active and lk.version == 4 for lk in links)
    assert {lk.remote for lk in links} == {"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}
    assert {lk.remote_type for lk in links} == {"switch"}
    assert links[7].crc_flit == 3 and links[7].errors == 3 and links[0].errors == 0


def test_not_supported_answers(host):
    state = json.loads(open(host.nvml_state).read())
    g = state["gpus"][0]
    g["not_supported"] = g["not_supported"] + ["clocks", "clock_events", "pcie_replay", "nvlink", "fabric"]
    gpu = read_nvml(SimulatedNvml(state, clock=lambda: 1000.0)).gpus[0]
    assert (gpu.clock_sm_mhz, gpu.clock_sm_max_mhz, gpu.clock_events, gpu.pcie_replay_count) == (NA, NA, NA, NA)
    assert (gpu.nvlinks, gpu.nvlink_state, gpu.fabric_state, gpu.fabric_status) == ((), NA, NA, NA)
    uninstall()


def test_aggregate_ecc_is_a_problem(snap):
    msgs = [p.message for p in snap.problems if p.subject == SLOW]
    assert any("2 uncorrected ECC errors in its lifetime" in m for m in msgs), msgs
    assert any("1184 PCIe replays" in m for m in msgs)


def test_nv18_between_every_pair_nvml_sees(snap):
    devs, rows = matrix(snap)
    seen = [i for i, d in enumerate(devs) if d.label.startswith("GPU") and d.nvml_index is not None]
    hidden = [i for i, d in enumerate(devs) if d.label.startswith("GPU") and d.nvml_index is None]
    assert len(seen) == 7 and len(hidden) == 3
    pair = [i for i in seen if devs[i].address in ("0000:da:00.0", "0000:db:00.0")]
    assert len(pair) == 2 and rows[pair[0]][pair[1]] == rows[pair[1]][pair[0]] == "NV12"  # NVLink bridges
    for i, j in combinations(seen, 2):
        if i in pair or j in pair:
            assert (i in pair and j in pair) or not rows[i][j].startswith("NV")  # no NVLink to the SXM5
            continue
        assert rows[i][j] == rows[j][i] == "NV18"
    # a GPU NVML cannot see (vfio-pci, unbound) keeps its PCIe level
    for i in hidden:
        assert all(rows[i][j] in ("PIX", "PXB", "PHB", "NODE", "SYS") for j in seen)
    assert rows[devs.index(next(d for d in devs if d.address == BUSY))][
        devs.index(next(d for d in devs if d.address == TRAIN_A_GPU))] == "PIX"


def test_nccl_expects_nvlink_bandwidth(snap):
    by_addr = {g.address: g for g in snap.gpus}
    pair = [by_addr[BUSY], by_addr["0000:9a:00.0"]]  # across the sockets on PCIe, NV18 on the baseboard
    plan = local_plan(snap, pair)
    assert plan.topology.nvlink and plan.nvlink_known and plan.topology.p2p
    assert plan.expected is not None and plan.expected.low == 370 and "NVSwitch" in plan.expected.basis
    assert nvlink_connected([by_addr[BUSY], by_addr[TRAIN_A_GPU]]) is None  # NVML cannot see the vfio GPU
    assert not local_plan(snap, [by_addr[BUSY], by_addr[TRAIN_A_GPU]]).nvlink_known


def test_owners_in_the_matrix_tree_and_the_vms_paths(snap):
    devs, _ = matrix(snap)
    owners = {d.address: d.owners for d in devs}
    assert owners[TRAIN_A_GPU] == ("train-a",)
    assert set(owners[MIG]) >= {"mig-infer-a"}
    assert owners["0000:1a:00.0"] == ("net-fw", "train-a", "train-c")  # NIC0: the VMs holding its VFs

    def walk(nodes):
        for n in nodes:
            yield n
            yield from walk(n.children)

    nodes = {n.address: n for tops in tree(snap).values() for n in walk(tops)}
    assert nodes[TRAIN_A_GPU].owners == ("train-a",) and nodes["0000:9c:00.0"].owners == ("train-b",)
    paths = vm_paths(snap, snap.vm("train-a"))
    assert [(p.a, p.b, p.level, p.a_node, p.b_node) for p in paths] == [
        ("GPU1", "NIC0 VF 0000:1a:00.2", "PIX", 0, 0)]


def test_host_pressure(snap):
    nodes = snap.load.nodes
    assert [n.node for n in nodes] == [0, 1]
    for n in nodes:
        assert n.memory_total_kib == 512 * 1024 * 1024 and 0 < n.memory_free_kib < n.memory_total_kib
        assert isinstance(n.cpu_percent, float) and 3.0 <= n.cpu_percent <= 100
        one_g = next(h for h in n.hugepages if h.size_kib == 1048576)
        assert one_g.total == 144
    assert next(h for h in nodes[0].hugepages if h.size_kib == 1048576).free == 16  # train-a's 128 GiB
    steal = {v.name: v.steal_percent for v in snap.vms}
    assert steal["train-c"] is None and steal["vgpu-desk-2"] is None  # shut off, paused
    assert 0 < steal["train-a"] < 2 < steal["web-1"]  # pinned vs floating over every host CPU
    data = snap.to_dict()
    assert data["load"]["nodes"][0]["hugepages"][0]["free"] == 16 and "steal_percent" in data["vms"][0]


def test_smi_numbering(snap):
    assert [(g.index, g.smi) for g in snap.gpus] == [(0, "0"), (1, "–"), (2, "1"), (3, "2"), (4, "3"), (5, "–"),
                                                      (6, "–"), (7, "4"), (8, "5"), (9, "6")]
    assert resolve_gpu(snap, "smi:3").address == "0000:9a:00.0"
    assert resolve_gpu(snap, "SMI:4").index == 7
    with pytest.raises(RequestError, match=r"nvidia-smi has no GPU smi:7.*NVML does not see 1 \(0000:19:00.0, vfio-pci\)"):
        resolve_gpu(snap, "smi:7")
    with pytest.raises(RequestError, match="smi:N takes"):
        resolve_gpu(snap, "smi:٣")
