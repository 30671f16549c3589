"""vCPU steal on a live host: the wait time of a running VM's vCPU threads (/proc/PID/task/TID/schedstat,
second field, ns), as a share of the time between two reads, per vCPU thread."""
from __future__ import annotations

from pathlib import Path

from nodeconsole.console.model import Vm
from nodeconsole.console.root import Root
from nodeconsole.console.sources.pressure import VcpuWaitReader


def _tree(root: Path, waits: dict[str, int]) -> None:
    (root / "run/libvirt/qemu").mkdir(parents=True, exist_ok=True)
    (root / "run/libvirt/qemu/train-a.pid").write_text("4242\n")
    for tid, (comm, wait) in {"4242": ("qemu-system-x86", 10**12), "4250": ("CPU 0/KVM", waits["0"]),
                              "4251": ("CPU 1/KVM", waits["1"])}.items():
        task = root / "proc/4242/task" / tid
        task.mkdir(parents=True, exist_ok=True)
        (task / "comm").write_text(comm + "\n")
        (task / "schedstat").write_text(f"123456 {wait} 77\n")


def test_steal_is_the_vcpu_threads_wait_between_two_reads(tmp_path):
    now = [100.0]
    reader = VcpuWaitReader(Root(tmp_path), clock=lambda: now[0])
    vm = Vm("train-a", "running", 2)
    _tree(tmp_path, {"0": 0, "1": 0})
    assert reader.steal(vm) is None  # one read: no interval yet
    now[0] += 2.0
    _tree(tmp_path, {"0": 200_000_000, "1": 600_000_000})  # 0.8 s waited over 2 s by 2 vCPU threads
    assert reader.steal(vm) == 20.0  # the emulator thread's wait does not count
    assert reader.steal(Vm("train-a", "shut off", 2)) is None
    assert reader.steal(Vm("ghost", "running", 2)) is None  # no pid file


def test_steal_of_all_vms_lists_the_pid_files_once(tmp_path, monkeypatch):
    """steal_all answers what steal() answers for each VM, reading no pid file that is not there."""
    now = [100.0]
    root = Root(tmp_path)
    reader, each = VcpuWaitReader(root, clock=lambda: now[0]), VcpuWaitReader(root, clock=lambda: now[0])
    vms = [Vm("train-a", "running", 2), Vm("ghost", "running", 2), Vm("off", "shut off", 1)]
    reads: list[str] = []
    real_read = Root.read_bytes

    def read_bytes(self, rel, *args):
        reads.append(rel)
        return real_read(self, rel, *args)

    monkeypatch.setattr(Root, "read_bytes", read_bytes)
    _tree(tmp_path, {"0": 0, "1": 0})
    assert reader.steal_all(vms) == {vm.name: each.steal(vm) for vm in vms} == dict.fromkeys(["train-a", "ghost", "off"])
    now[0] += 2.0
    _tree(tmp_path, {"0": 200_000_000, "1": 600_000_000})
    reads.clear()
    got = reader.steal_all(vms)
    assert [r for r in reads if r.endswith(".pid")] == ["run/libvirt/qemu/train-a.pid"]
    assert got == {vm.name: each.steal(vm) for vm in vms} == {"train-a": 20.0, "ghost": None, "off": None}
    assert VcpuWaitReader(Root(tmp_path / "nowhere")).steal_all(vms) == dict.fromkeys(["train-a", "ghost", "off"])
