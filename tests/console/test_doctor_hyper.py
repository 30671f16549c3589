"""The hypervisor checks (libvirtd, vhost-net, tun, cgroups, secure-guest) and the GPU checks' "not
applicable" on tiny trees: the ready host of test_doctor.py with one thing changed each time."""
from __future__ import annotations

from dataclasses import replace

import pytest

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.model import GPU_CHECKS, NO_GPU
from nodeconsole.console.doctor.run import run_doctor
from nodeconsole.console.model import Sources
from nodeconsole.console.sources.types import Hypervisor
from tests.console.test_doctor import Tree, doctor, ready_snap, ready_tree, status

# /proc/mounts of a host with cgroup v1 controllers mounted one per hierarchy beside an empty unified one
# (this shape was read on a CI machine: cpu and cpuacct apart, systemd's named hierarchy)
HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0
cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


@pytest.fixture
def t(tmp_path) -> Tree:
    tree = Tree(tmp_path / "host")
    ready_tree(tree)
    return tree


def check(t: Tree, cid: str, snap=None):
    c = doctor(t, snap).check(cid)
    assert c is not None
    return c


# -- vhost-net, tun ------------------------------------------------------------------------------------

def test_vhost_net_and_tun(t):
    assert status(doctor(t), "vhost-net") == ("pass", "/dev/vhost-net exists (vhost_net loaded)")
    assert status(doctor(t), "tun") == ("pass", "/dev/net/tun exists")
    t.rm(facts.DEV_VHOST_NET)
    t.rm(facts.DEV_TUN)
    vhost, tun = check(t, "vhost-net"), check(t, "tun")
    assert vhost.status == "warn" and "virtio networking runs in QEMU's userspace" in vhost.finding
    assert tun.status == "fail" and "VMs get no network" in tun.finding  # virt-host-validate: FAIL
    for c, module in ((vhost, "vhost_net"), (tun, "tun")):
        assert c.fix is not None and c.fix.plannable and not c.fix.needs_reboot
        assert c.fix.commands == (f"modprobe {module}", f"printf '{module}\\n' > /{facts.MODULE_CONF[module]}")
        assert c.evidence[0].value == "absent"


def test_device_checks_skip_without_dev_or_on_a_partial_dev(t):
    t.rm("dev")
    assert check(t, "vhost-net").status == check(t, "tun").status == "skip"
    assert check(t, "tun").applies  # could not read: it applies
    t.write("dev/kvm")
    t.rm("sys/module")  # a captured tree: a few nodes of /dev, no /sys/module
    c = check(t, "vhost-net")
    assert c.status == "skip" and "partial /dev" in c.finding


# -- cgroups -----------------------------------------------------------------------------------------

def test_cgroups_v2_as_libvirt_judges_them(t):
    c = check(t, "cgroups")
    assert c.status == "pass"
    assert c.finding == ("cgroup controllers for QEMU: cpu (v2), cpuacct (v2: cpu.stat), cpuset (v2), memory (v2), "
                         "devices (v2: BPF), blkio (v2: io)")
    assert [(e.path, e.value) for e in c.evidence] == [
        ("/proc/mounts", "v2 at /sys/fs/cgroup"), ("/sys/fs/cgroup/cgroup.controllers", "cpu cpuset hugetlb io memory pids")]
    t.write("sys/fs/cgroup/cgroup.controllers", "cpuset memory pids\n")  # cpu and io not enabled
    c = check(t, "cgroups")
    assert c.status == "warn" and "controllers cpu, blkio missing" in c.finding
    assert c.fix is not None and not c.fix.plannable


def test_cgroups_v1_hierarchies(t):
    t.write(facts.PROC_MOUNTS, HYBRID)
    c = check(t, "cgroups")
    assert c.status == "pass" and "cpuacct (v1)" in c.finding and "devices (v1)" in c.finding
    no_devices = HYBRID.replace("cgroup rw,relatime,devices", "cgroup rw,relatime,freezer")
    t.write(facts.PROC_MOUNTS, no_devices)
    t.write("sys/fs/cgroup/unified/cgroup.controllers", "\n")  # hybrid: the unified hierarchy holds none
    c = check(t, "cgroups")  # as libvirt: devices through a BPF program on the unified hierarchy
    assert c.status == "pass" and "cpu (v1)" in c.finding and "devices (v2: BPF)" in c.finding
    assert c.evidence[1].path == "/sys/fs/cgroup/unified/cgroup.controllers" and c.evidence[1].value == "empty"
    t.write(facts.PROC_MOUNTS, no_devices.replace("cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n", ""))
    c = check(t, "cgroups")  # v1 alone: devices is not mounted
    assert c.status == "warn" and "controller devices missing" in c.finding


def test_cgroups_from_proc_self_cgroup_then_skip(t):
    t.rm(facts.PROC_MOUNTS)
    t.write(facts.PROC_SELF_CGROUP, "7:blkio:/\n5:devices:/\n4:memory:/\n3:cpuset:/\n2:cpu,cpuacct:/\n0::/\n")
    c = check(t, "cgroups")
    assert c.status == "pass" and c.evidence[0].path == "/proc/self/cgroup"
    t.rm(facts.PROC_SELF_CGROUP)
    c = check(t, "cgroups")
    assert c.status == "skip" and c.applies and "/proc/mounts is absent" in c.finding


# -- secure-guest --------------------------------------------------------------------------------------

def _flags(t: Tree, flags: str, vendor: str = "AuthenticAMD") -> None:
    t.write("proc/cpuinfo", f"processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: fpu svm {flags}\n\n")


def test_secure_guest_not_applicable_without_the_platform(t):
    c = check(t, "secure-guest")
    assert c.status == "skip" and not c.applies and c.applies_why == c.finding and c.fix is None
    t.rm("proc/cpuinfo")
    c = check(t, "secure-guest")
    assert c.status == "skip" and c.applies  # unknown, not "not applicable"


def test_secure_guest_sev(t):
    _flags(t, "sev sev_es")
    c = check(t, "secure-guest")
    assert c.status == "warn" and "the CPU offers SEV/SEV-ES but kvm_amd has it off (kvm_amd is not loaded)" in c.finding
    t.write("sys/module/kvm_amd/parameters/sev", "N\n")
    t.write("sys/module/kvm_amd/parameters/sev_es", "N\n")
    c = check(t, "secure-guest")
    assert c.status == "warn" and "kvm_amd.sev=1" in c.fix.summary and not c.fix.plannable
    t.write("sys/module/kvm_amd/parameters/sev", "Y\n")
    c = check(t, "secure-guest")
    assert c.status == "warn" and "/dev/sev is missing" in c.finding  # virt-host-validate: off in firmware
    t.write(facts.DEV_SEV)
    assert status(doctor(t), "secure-guest") == ("pass", "secure guests on: SEV")


def test_secure_guest_tdx(t):
    _flags(t, "tdx_host_platform", "GenuineIntel")
    c = check(t, "secure-guest")
    assert c.status == "warn" and "offers TDX (tdx_host_platform) but kvm_intel has it off" in c.finding
    t.write("sys/module/kvm_intel/parameters/tdx", "Y\n")
    assert status(doctor(t), "secure-guest") == ("pass", "secure guests on: TDX")


# -- libvirtd ------------------------------------------------------------------------------------------

DOWN = ("unavailable: cannot connect to qemu:///system: Failed to connect socket to "
        "'/var/run/libvirt/libvirt-sock-ro': No such file or directory (is libvirtd running? are you in the "
        "libvirt group?)")


def test_libvirtd_answers(t):
    assert status(doctor(t), "libvirtd") == ("pass", "libvirt answers")
    hv = Hypervisor("qemu:///system", "10.0.0", "QEMU", "8.2.2", ("qemu", "kvm"), "x86_64")
    report = run_doctor(ready_snap(), t.root, hypervisor=hv)
    c = report.check("libvirtd")
    assert c.status == "pass" and c.finding == "libvirt 10.0.0 answers: QEMU 8.2.2, domain types qemu, kvm"
    assert c.evidence[0].path == "libvirt"
    report = run_doctor(ready_snap(), t.root, hypervisor=replace(hv, domain_types=("qemu",)))
    assert "offers no kvm domains" in report.check("libvirtd").finding


def test_libvirtd_down_fails_with_the_daemon_this_host_uses(t):
    down = ready_snap(sources=Sources(libvirt=DOWN))
    c = check(t, "libvirtd", down)
    assert c.status == "fail" and c.finding.startswith("libvirt does not answer: cannot connect to qemu:///system")
    assert c.fix.commands == ("systemctl enable --now libvirtd",) and "install libvirt's daemon" in c.fix.summary
    t.write("usr/lib/systemd/system/libvirtd.service")
    assert check(t, "libvirtd", down).fix.summary == "start libvirtd and start it at boot"
    t.write("usr/lib/systemd/system/virtqemud.socket")
    assert check(t, "libvirtd", down).fix.commands == ("systemctl enable --now libvirtd",)  # both: the monolith
    t.write("etc/systemd/system/sockets.target.wants/virtqemud.socket")  # the modular daemons are in use
    assert check(t, "libvirtd", down).fix.commands == ("systemctl enable --now virtqemud.socket virtqemud-ro.socket",)
    refused = ready_snap(sources=Sources(libvirt="unavailable: cannot connect to qemu:///system: authentication "
                                                  "failed (are you in the libvirt group, or root?)"))
    assert "join the libvirt group" in check(t, "libvirtd", refused).fix.summary
    # the checks that need libvirt's VMs still skip, naming it
    for cid in ("hugepages", "vcpu-commit", "numa-balancing"):
        assert status(doctor(t, down), cid)[0] == "skip"


def test_libvirtd_skips_where_no_hypervisor_was_asked(t):
    for state in ("unavailable: no libvirt URI for a captured tree (use --libvirt URI)", "pending"):
        c = check(t, "libvirtd", ready_snap(sources=Sources(libvirt=state)))
        assert c.status == "skip" and c.applies and c.fix is None


def test_libvirtd_on_proxmox_is_pve_cluster_and_etc_pve(t):
    t.mkdir(facts.PVE_QEMU_SERVER)
    t.write(facts.PROC_MOUNTS, "/dev/fuse /etc/pve fuse rw,nosuid,nodev,relatime 0 0\n")
    t.write("proc/1/comm", "systemd\n")
    t.write("proc/812/comm", "pmxcfs\n")
    c = check(t, "libvirtd", ready_snap(sources=Sources(libvirt=DOWN)))  # libvirt is not Proxmox's way
    assert c.status == "pass" and c.finding.startswith("Proxmox VE")
    assert {e.value for e in c.evidence} == {"/dev/fuse /etc/pve fuse", "pmxcfs pid 812"}
    t.write(facts.PROC_MOUNTS, "sysfs /sys sysfs rw 0 0\n")
    t.write("proc/812/comm", "bash\n")
    c = check(t, "libvirtd")
    assert c.status == "fail" and "/etc/pve is not mounted" in c.finding and "pve-cluster is not running" in c.finding
    assert c.fix.commands == ("systemctl enable --now pve-cluster",)


# -- GPU checks on a host without an NVIDIA GPU -----------------------------------------------------------

def test_gpu_checks_do_not_apply_without_a_gpu(t):
    t.rm("etc/modules-load.d")  # vfio not configured, nouveau not blacklisted: nothing to say without GPUs
    t.rm("etc/modprobe.d")
    report = doctor(t, ready_snap(gpus=(), vms=()))
    for cid in GPU_CHECKS:
        c = report.check(cid)
        assert (c.status, c.finding, c.applies, c.applies_why, c.fix) == ("skip", NO_GPU, False, NO_GPU, None)
    assert {c.id for c in report.checks if c.status in ("warn", "fail")} == set()
    assert report.check("kvm").applies and report.check("iommu").status == "pass"  # the rest still apply
    d = report.to_dict()
    assert [c["applies"] for c in d["checks"] if c["id"] in GPU_CHECKS] == [False] * len(GPU_CHECKS)
    assert all(c["applies_why"] == "" for c in d["checks"] if c["applies"])


def test_the_proxmox_demo_has_its_cluster_file_system_up_across_a_reboot(tmp_path, monkeypatch):
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import demo_host, reboot_demo, reset_demo

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    reset_demo(proxmox=True)
    for _ in range(2):
        seams = demo_host()
        collector = Collector(seams)
        try:
            snap = collector.collect()
        finally:
            collector.close()
        report = run_doctor(snap, seams.root)
        assert {c.id: c.status for c in report.checks if c.group == "hypervisor"} == {
            "libvirtd": "pass", "vhost-net": "pass", "tun": "pass", "cgroups": "pass", "secure-guest": "skip"}
        assert report.check("libvirtd").finding.startswith("Proxmox VE: pve-cluster runs")
        reboot_demo()
