"""LibvirtSource against a real libvirtd with real QEMU guests, and the live-pin call shape that actions
use (the vCPU thread's kernel affinity must really change). One daemon for the module; tests run in
file order and the last ones change the guests (pin, destroy, drop the connection)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from nodeconsole.console.model import VcpuPin
from nodeconsole.console.sources.libvirt_src import LibvirtSource
from nodeconsole.console.sources.types import SourceError

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.real_libvirtd


@pytest.fixture
def rw(real_libvirtd):
    conn = libvirt.open(real_libvirtd.uri)
    yield conn
    conn.close()


def _vcpu_thread(dom, qemu_pid: int, vcpu: int) -> int:
    """Thread id of one vCPU, from QEMU's own answer (query-cpus-fast)."""
    import libvirt_qemu

    reply = json.loads(libvirt_qemu.qemuMonitorCommand(dom, json.dumps({"execute": "query-cpus-fast"}), 0))
    tids = {c["cpu-index"]: c["thread-id"] for c in reply["return"]}
    tid = tids[vcpu]
    # cross-check with the kernel: the thread belongs to that QEMU and QEMU named it "CPU <n>/KVM|TCG"
    comm = Path(f"/proc/{qemu_pid}/task/{tid}/comm").read_text().strip()
    assert comm.startswith(f"CPU {vcpu}/"), comm
    return tid


def _allowed(pid: int, tid: int) -> str:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_poll_sees_running_guests_and_cpu_percent(real_libvirtd):
    src = LibvirtSource(real_libvirtd.uri)
    first = {vm.name: vm for vm in src.poll().vms}
    assert set(first) == {"rv1", "rv2"}
    for vm in first.values():
        assert vm.state == "running"
        assert vm.vcpus == 2
        assert vm.memory_kib == 128 * 1024
        assert vm.cpu_percent is None  # no earlier sample yet
        assert len(vm.uuid) == 36 and vm.pins == () and vm.hostdevs == ()
    time.sleep(0.5)
    second = {vm.name: vm for vm in src.poll().vms}
    for vm in second.values():
        # relative to one host CPU; 2 vCPUs can use at most ~200 % plus QEMU's own threads
        assert vm.cpu_percent is not None and 0.0 <= vm.cpu_percent <= 300.0, vm
    src.close()


def test_live_vcpu_pin_changes_thread_affinity(real_libvirtd, rw):
    dom = rw.lookupByName("rv1")
    ncpus = rw.getCPUMap()[0]
    qemu_pid = real_libvirtd.qemu_pid("rv1")
    tid = _vcpu_thread(dom, qemu_pid, 0)
    src = LibvirtSource(real_libvirtd.uri)
    src.poll()
    # two different targets, so a match cannot be the thread's previous affinity by chance
    for target in sorted({ncpus - 1, 0}):
        cpumap = tuple(i == target for i in range(ncpus))
        dom.pinVcpuFlags(0, cpumap, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        assert _allowed(qemu_pid, tid) == str(target)
        assert dom.vcpuPinInfo(libvirt.VIR_DOMAIN_AFFECT_LIVE)[0] == cpumap
        # the read-only source sees the live XML once told the domain changed
        src.invalidate()
        rv1 = next(vm for vm in src.poll().vms if vm.name == "rv1")
        assert VcpuPin(vcpu=0, cpus=(target,)) in rv1.pins

    dom.pinEmulator(tuple(i == 0 for i in range(ncpus)), libvirt.VIR_DOMAIN_AFFECT_LIVE)
    assert _allowed(qemu_pid, qemu_pid) == "0"  # QEMU's main thread is an emulator thread
    src.invalidate()
    assert next(vm for vm in src.poll().vms if vm.name == "rv1").emulator_pins == (0,)
    src.close()


def test_destroyed_then_undefined_domain(real_libvirtd, rw):
    src = LibvirtSource(real_libvirtd.uri)
    src.poll()
    time.sleep(0.2)
    assert next(vm for vm in src.poll().vms if vm.name == "rv2").cpu_percent is not None
    dom = rw.lookupByName("rv2")
    dom.destroy()
    vms = {vm.name: vm for vm in src.poll().vms}
    assert vms["rv2"].state == "shut off"
    assert vms["rv2"].cpu_percent is None
    assert vms["rv1"].state == "running"
    dom.undefine()
    assert [vm.name for vm in src.poll().vms] == ["rv1"]
    src.close()


def test_dropped_connection_is_reported_then_reopened(real_libvirtd):
    src = LibvirtSource(real_libvirtd.uri)
    before = [vm.name for vm in src.poll().vms]
    assert "rv1" in before
    # the daemon closes our client (as when it restarts): find it by our pid and read-only flag
    listing = _admin(real_libvirtd, "client-list", "libvirtd").splitlines()[2:]
    ours = []
    for cid in (line.split()[0] for line in listing if line.strip()):
        lines = _admin(real_libvirtd, "client-info", "libvirtd", cid).splitlines()
        info = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}
        if info.get("unix_process_id") == str(os.getpid()) and info.get("readonly") == "yes":
            ours.append(cid)
    assert len(ours) == 1, listing
    _admin(real_libvirtd, "client-disconnect", "libvirtd", ours[0])
    with pytest.raises(SourceError, match=r"libvirt connection to .* lost"):
        src.poll()
    assert [vm.name for vm in src.poll().vms] == before  # a new connection
    src.close()


def _admin(d, *args: str) -> str:
    out = subprocess.run(["virt-admin", "-c", d.admin_uri, *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout
