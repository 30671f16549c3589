"""`prepare VM`: a training VM in one plan on the demo host. `place --gpus 2 --with-nic` names the idle
H100 PCIe pair on node 1 with a VF of the NIC on their switch; `prepare train-d --gpus 2 --with-nic` gives
the shut-off train-d exactly those GPUs (with their groups' audio functions) and VFs, every vCPU pinned
inside node 1 (no more than 70 % of its CPUs), an emulator pin, memory of at least twice the pair's VRAM
backed by 1 GiB pages reserved on node 1 (now and at boot), `<numatune>` strict there, and the guest's
NCCL files; `undo --apply` gives back the node file's bytes and the whole host tree. Bad requests are
refused with their reason and change nothing."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.nccl.guest_files import GUEST_FILES_DIR
from nodeconsole.console.collector import Collector
from nodeconsole.console.nics import distance_to
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import changed, tree_state

PAIR = ["0000:da:00.0", "0000:db:00.0"]
VFS = ["0000:dc:00.1", "0000:dc:00.2"]
GIB = 1048576
PAGES1 = "root/sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([*argv, "--demo"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _snap(state: Path):
    collector = Collector(demo_host(state))
    try:
        return collector.collect()
    finally:
        collector.close()


def _driver(state: Path, address: str) -> str:
    link = state / "root/sys/bus/pci/devices" / address / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else ""


def test_place_names_the_pair_on_one_node_with_their_vfs(state, capsys):
    before = tree_state(state)
    rc, out, err = _cli(capsys, "place", "--gpus", "2", "--with-nic", "--json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["gpus"] == PAIR and got["nics"] == VFS and got["nodes"] == [1]
    assert got["hugepages"]["size_kib"] == GIB and got["memory_kib"] >= 2 * 2 * 81559 * 1024
    assert changed(before, tree_state(state)) == set()


def test_prepare_train_d_gives_it_the_pair_pinned_on_node_1_and_undo_is_exact(state, capsys):
    before, node_file = tree_state(state), (state / "libvirt.xml").read_bytes()
    pages_before = int((state / PAGES1).read_text())
    vram = sum(_snap(state).gpu(a).memory_total_mib for a in PAIR) * 1024  # NVML's, before vfio-pci hides them
    rc, out, err = _cli(capsys, "prepare", "train-d", "--gpus", "2", "--with-nic", "--apply", "--yes")
    assert rc == 0, out + err
    snap = _snap(state)
    vm = snap.vm("train-d")
    held = {h.address for h in vm.hostdevs if h.type == "pci"}
    assert held == {*PAIR, "0000:da:00.1", "0000:db:00.1", *VFS}  # exactly the pair, their audio, the VFs
    assert all(_driver(state, a) == "vfio-pci" for a in held)
    for gpu in PAIR:  # a VF on each GPU's switch
        assert any(distance_to(n, gpu) == "PIX" for n in snap.nics if any(v.address in VFS for v in n.vfs))
    node1 = {c.id for c in snap.cpus if c.numa_node == 1}
    pinned = [c for p in vm.pins for c in p.cpus]
    assert len(vm.pins) == vm.vcpus and set(pinned) <= node1 and len(set(pinned)) == vm.vcpus
    assert vm.vcpus <= 0.7 * len(node1)
    assert vm.emulator_pins and set(vm.emulator_pins) <= node1 and not set(vm.emulator_pins) & set(pinned)
    assert vm.memory_kib >= 2 * vram
    assert vm.hugepages_kib == GIB and vm.numa_mode == "strict" and vm.numa_nodeset == (1,)
    assert int((state / PAGES1).read_text()) >= pages_before  # reserved as needed (80 were free)
    free = next(h.free for u in snap.load.nodes if u.node == 1 for h in u.hugepages if h.size_kib == GIB)
    assert free * GIB >= vm.memory_kib  # the VM can start: its pages are there
    shape = ActionHost.from_seams(demo_host(state)).vms.shape("train-d")  # the definition itself
    assert (shape.vcpus, shape.memory_kib, shape.hugepage_kib, shape.numa) == (vm.vcpus, vm.memory_kib, GIB,
                                                                               ("strict", "1"))
    assert shape.threads_per_core == 2  # vCPU pairs on sibling threads, and the guest told so
    topo = (state / "root" / GUEST_FILES_DIR / "train-d/topo.xml").read_text()
    assert topo.count("<gpu ") == 2 and 'count="12"' in topo  # the pair's NVLinks, read before vfio-pci
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1" in (state / "root" / GUEST_FILES_DIR / "train-d/nccl.env").read_text()

    rc, out, err = _cli(capsys, "undo", "--apply", "--yes")
    assert rc == 0, out + err
    assert (state / "libvirt.xml").read_bytes() == node_file
    assert changed(before, tree_state(state)) == set()  # drivers, hugepages, GRUB's files, the NCCL files


@pytest.mark.parametrize("argv, why", [
    (("train-d", "--gpus", "5"), "GPU"),  # more GPUs than are free
    (("train-a", "--gpus", "2"), "VM train-a is shut off"),  # running
    (("train-d", "--gpus", "0,8"), "0000:18:00.0"),  # GPU 0 runs processes
    (("train-d", "--gpus", "2", "--memory", "2000G"), "free pages plus"),  # more than node 1 can hold
])
def test_refusals_name_the_reason_and_change_nothing(state, capsys, argv, why):
    before = tree_state(state, skip=())
    rc, out, err = _cli(capsys, "prepare", *argv, "--apply", "--yes")
    assert rc == 1 and "[FAILED]" in out and why in out and "nothing will be changed" in out, out + err
    assert changed(before, tree_state(state, skip=())) == set()  # not even an audit record


def test_a_drained_or_unhealthy_gpu_in_the_list_is_refused(state, capsys):
    assert _cli(capsys, "gpu", "drain", PAIR[0], "--reason", "fan", "--apply", "--yes")[0] == 0
    assert _cli(capsys, "demo", "inject", "aer", PAIR[1], "fatal")[0] == 0
    before = tree_state(state, skip=())
    rc, out, _err = _cli(capsys, "prepare", "train-d", "--gpus", ",".join(PAIR), "--apply", "--yes")
    assert rc == 1 and "drained" in out and "unhealthy" in out
    assert changed(before, tree_state(state, skip=())) == set()


@pytest.mark.parametrize("argv", [("train-d", "--gpus", ""), ("train-d", "--gpus", "8,8"), ("no-such-vm", "--gpus", "2"),
                                  ("train-d", "--gpus", "2", "--hugepages", "4M"), ("train-d", "--gpus", "2", "--memory", "0"),
                                  ("train-d", "--gpus", "2", "--memory", "1G", "--memory-factor", "2"),
                                  ("train-d", "--gpus", "2", "--vcpus", "0"), ("train-d", "--gpus", "x;reboot")])
def test_bad_input_is_one_line_and_exit_2(state, capsys, argv):
    before = tree_state(state, skip=())
    rc, out, err = _cli(capsys, "prepare", *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert changed(before, tree_state(state, skip=())) == set()
