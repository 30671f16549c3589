"""The doctor's checks on tiny host trees built here (a few files each) plus hand-built snapshots.

`ready()` builds a host that passes every check (role mixed: vgpu-host is skipped, no vGPU in use);
each test then breaks one thing and asserts what that check says. The skip rule is tested by removing
what a check needs: it must skip naming it, never pass."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.files import HostFiles, systemd_setting
from nodeconsole.console.doctor.model import CHECK_IDS, DoctorReport
from nodeconsole.console.doctor.run import run_doctor
from nodeconsole.console.model import (
    Cpu,
    Gpu,
    GpuOwner,
    Hostdev,
    HostInfo,
    HostSnapshot,
    Iommu,
    IommuGroup,
    Load,
    Mig,
    MigInstance,
    NumaNode,
    PciDevice,
    PciLink,
    Sources,
    VcpuPin,
    Vgpu,
    VgpuInstance,
    VgpuType,
    Vm,
)
from nodeconsole.console.root import Root

GIB = 1024 * 1024  # KiB
H100 = "NVIDIA H100 80GB HBM3"
CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.8.0 root=/dev/sda1 ro intel_iommu=on iommu=pt"
# 2 nodes x 2 cores x 2 threads: node 0 = CPUs 0,1,4,5; node 1 = 2,3,6,7 (c and c+4 are siblings)
NODE_CPUS = {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
GPU0, GPU1 = "0000:03:00.0", "0000:04:00.0"  # GPU0 on nvidia (node 0), GPU1 on vfio-pci → VM train (node 1)
ROOT_PORT, UPSTREAM, DOWN0, DOWN1 = "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:02:01.0"
ISOLATING = facts.ACS_SV | facts.ACS_RR | facts.ACS_CR | facts.ACS_UF


# -- building hosts ---------------------------------------------------------------------------------

class Tree:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, rel: str, text: str = "") -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def write_bytes(self, rel: str, data: bytes) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def mkdir(self, rel: str) -> None:
        (self.path / rel).mkdir(parents=True, exist_ok=True)

    def rm(self, rel: str) -> None:
        p = self.path / rel
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()

    @property
    def root(self) -> Root:
        return Root(self.path)


PVE = ("pve-vfio", "pve-mappings", "pve-hookscripts")  # Proxmox VE's checks: skipped on other hosts

def port_config(acs: int | None, kind: int = 6) -> bytes:
    """4096 bytes of a PCIe port's config space: a PCI Express capability (port type `kind`) and, unless
    `acs` is None, an ACS extended capability with that control register."""
    c = bytearray(4096)
    c[0x06] = 0x10  # capability list
    c[0x34] = 0x40
    c[0x40], c[0x41], c[0x42] = 0x10, 0x00, (kind << 4) | 2
    if acs is not None:
        c[0x100:0x104] = (facts.ACS_CAP_ID | (1 << 16)).to_bytes(4, "little")
        c[0x106:0x108] = acs.to_bytes(2, "little")
    else:  # another extended capability (AER), and no ACS
        c[0x100:0x104] = (0x0001 | (1 << 16)).to_bytes(4, "little")
    return bytes(c)


def ready_tree(t: Tree) -> None:
    """The files of a configured Intel host (GRUB, Debian-style initramfs)."""
    cpuinfo = "".join(f"processor\t: {i}\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vmx sse\n\n" for i in range(8))
    t.write("proc/cpuinfo", cpuinfo)
    t.write("proc/cmdline", CMDLINE + "\n")
    t.write("proc/meminfo", "MemTotal:       536870912 kB\nHugepagesize:       2048 kB\n")
    t.write(facts.NUMA_BALANCING, "0\n")
    t.write(facts.BOOT_ID, "11111111-2222-3333-4444-555555555555\n")
    t.write("dev/kvm")
    t.write(facts.DEV_VHOST_NET)
    t.write(facts.DEV_TUN)
    t.write(facts.PROC_MOUNTS, "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n")
    t.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids\n")
    for m in ("kvm", "kvm_intel", "vfio", "vfio_pci", "vfio_iommu_type1", "nvidia", "vhost_net"):
        t.mkdir(f"sys/module/{m}")
    t.write(facts.NVIDIA_VERSION, "550.90.07\n")
    t.write(facts.ALLOW_UNSAFE_INTERRUPTS, "N\n")
    t.write(f"{facts.ACPI_TABLES}/DMAR", "DMAR")
    t.mkdir(f"{facts.CLASS_IOMMU}/dmar0")
    for g in (1, 2):
        t.mkdir(f"{facts.IOMMU_GROUPS}/{g}/devices")
    t.write("etc/default/grub", 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on iommu=pt"\n')
    t.write("boot/grub/grub.cfg", "# generated\n")
    t.write("usr/sbin/update-grub", "")
    t.write("etc/modules-load.d/vfio.conf", "# vfio for passthrough\nvfio\nvfio_pci\nvfio_iommu_type1\n")
    t.write("etc/initramfs-tools/modules", "vfio\nvfio_pci\n")
    t.write("etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
    t.write("etc/sysctl.d/90-numa.conf", "kernel.numa_balancing = 0\n")
    t.write("etc/systemd/system.conf", "[Manager]\n#CPUAffinity=\n")
    t.write("etc/systemd/system.conf.d/host-cores.conf", "[Manager]\nCPUAffinity=0 4 2,6\n")
    t.write(facts.PERSISTENCED_WANTS, "")
    for node in (0, 1):
        base = f"{facts.NODE_DIR}/node{node}/hugepages/hugepages-1048576kB"
        t.write(f"{base}/nr_hugepages", "0\n" if node == 0 else "160\n")
        t.write(f"{base}/free_hugepages", "0\n")
    for addr, acs in ((DOWN0, ISOLATING), (DOWN1, ISOLATING)):
        t.write_bytes(f"sys/bus/pci/devices/{addr}/config", port_config(acs))
    t.write_bytes(f"sys/bus/pci/devices/{UPSTREAM}/config", port_config(None, kind=5))
    t.write_bytes(f"sys/bus/pci/devices/{ROOT_PORT}/config", port_config(ISOLATING, kind=4))


def _cpus() -> tuple[Cpu, ...]:
    out = []
    for node, ids in NODE_CPUS.items():
        for c in ids:
            core = c % 4
            out.append(Cpu(id=c, package=node, core=core, numa_node=node, online=True,
                           siblings=(core, core + 4)))
    return tuple(sorted(out, key=lambda c: c.id))


def _pci(address: str, parent: str | None, *, bridge: bool = False, driver: str | None = None, group: int = 0,
         device_id: int = 0x2330, link: PciLink | None = None, **kw) -> PciDevice:
    return PciDevice(address=address, vendor_id=0x10DE if not bridge else 0x1000,
                     device_id=device_id if not bridge else 0xC010, class_id=0x030200 if not bridge else 0x060400,
                     driver=driver if not bridge else "pcieport", numa_node=0, iommu_group=group, parent=parent,
                     is_bridge=bridge, link=link or PciLink("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16), **kw)


def ready_snap(**changes) -> HostSnapshot:
    full = PciLink("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
    pci = (_pci(ROOT_PORT, None, bridge=True, group=10), _pci(UPSTREAM, ROOT_PORT, bridge=True, group=11),
           _pci(DOWN0, UPSTREAM, bridge=True, group=12), _pci(DOWN1, UPSTREAM, bridge=True, group=13),
           _pci(GPU0, DOWN0, driver="nvidia", group=1), _pci(GPU1, DOWN1, driver="vfio-pci", group=2))
    gpus = (Gpu(address=GPU0, name=H100, uuid="GPU-0", driver="nvidia", numa_node=0, owner=GpuOwner("host"),
                index=0, nvml_index=0, iommu_group=1, link=full, memory_total_mib=81559,
                persistence_mode="enabled", mig=Mig(mode="disabled", pending_mode="disabled")),
            Gpu(address=GPU1, name=H100, uuid=None, driver="vfio-pci", numa_node=1,
                owner=GpuOwner("vfio", ("train",)), index=1, iommu_group=2, link=full))
    train = Vm(name="train", state="running", vcpus=2, pins=(VcpuPin(0, (3,)), VcpuPin(1, (7,))),
               memory_kib=160 * GIB, hostdevs=(Hostdev("pci", GPU1, gpu=GPU1),), numa_mode="strict",
               numa_nodeset=(1,), hugepages_kib=1048576)
    web = Vm(name="web", state="running", vcpus=2, memory_kib=4 * GIB)
    nodes = (NumaNode(0, NODE_CPUS[0], 256 * GIB, hugepages=((2048, 0), (1048576, 0))),
             NumaNode(1, NODE_CPUS[1], 256 * GIB, hugepages=((2048, 0), (1048576, 160))))
    groups = (IommuGroup(1, (GPU0,), True), IommuGroup(2, (GPU1,), True))
    snap = HostSnapshot(schema=1, taken_at=0.0, host=HostInfo("h", "6.8.0", CMDLINE, "intel"), cpus=_cpus(),
                        numa_nodes=nodes, pci_devices=pci, iommu=Iommu(True, groups), gpus=gpus, vms=(train, web),
                        load=Load(), sources=Sources(), nvml_driver_version="550.90.07")
    return replace(snap, **changes)


@pytest.fixture
def t(tmp_path) -> Tree:
    tree = Tree(tmp_path / "host")
    ready_tree(tree)
    return tree


def doctor(t: Tree, snap: HostSnapshot | None = None, role: str = "mixed", changes=()) -> DoctorReport:
    return run_doctor(snap or ready_snap(), t.root, role=role, changes=changes)


def status(report: DoctorReport, cid: str) -> tuple[str, str]:
    c = report.check(cid)
    assert c is not None
    return c.status, c.finding


def with_vm(snap: HostSnapshot, name: str, **changes) -> HostSnapshot:
    return replace(snap, vms=tuple(replace(v, **changes) if v.name == name else v for v in snap.vms))


# -- the ready host ---------------------------------------------------------------------------------

def test_a_ready_host_passes_every_check(t):
    report = doctor(t)
    assert [c.id for c in report.checks] == list(CHECK_IDS)
    got = {c.id: c.status for c in report.checks}
    assert got == {**dict.fromkeys(CHECK_IDS, "pass"), "vgpu-host": "skip", "secure-guest": "skip",
                   **dict.fromkeys(PVE, "skip")}, [
        (c.id, c.finding) for c in report.checks if c.status != "pass"]
    assert report.check("vgpu-host").finding == "no vGPU in use"
    # every skip is "not applicable", said so: the rest apply
    assert {c.id: c.applies_why for c in report.checks if not c.applies} == {
        "vgpu-host": "no vGPU in use", "secure-guest": report.check("secure-guest").finding,
        **dict.fromkeys(PVE, "not a Proxmox VE host (no /etc/pve/qemu-server)")}
    assert report.exit_code == 0 and report.boot_id == "11111111-2222-3333-4444-555555555555"
    for c in report.checks:  # every result carries its title and why; passes carry no fix
        assert c.title and c.why and c.finding and (c.fix is None or c.status != "pass")
    assert report.check("host-cores").finding.startswith("kept for the host by CPUAffinity=0 4 2,6")
    assert "GPU 0-1" in report.check("acs").finding  # RR/CR on: their P2P goes through the root complex


def test_roles_skip_what_they_do_not_need(t):
    for role, skipped in (("passthrough", {"mig-pending", "vgpu-host"}), ("mig", {"vfio-modules", "vgpu-host"}),
                          ("vgpu", {"vfio-modules", "mig-pending"})):
        report = doctor(t, role=role)
        assert {c.id for c in report.checks if c.status == "skip"} == skipped | {"secure-guest"} | set(PVE), role
        for cid in skipped - {"vgpu-host"}:
            c = report.check(cid)
            assert c.finding == c.applies_why == f"not needed for role {role}" and c.applies is False
        assert report.check("nouveau").status == "pass"  # nouveau must not hold the GPUs of any role's host
    with pytest.raises(ValueError):
        doctor(t, role="gaming")


def test_role_vgpu_without_a_vgpu_manager_fails(t):
    s, finding = status(doctor(t, role="vgpu"), "vgpu-host")
    assert s == "fail" and "vGPU manager" in finding


def test_json_interface(t):
    d = doctor(t).to_dict()
    assert set(d) == {"schema", "role", "boot_id", "summary", "checks", "notes"}
    assert d["summary"] == {"pass": 20, "warn": 0, "fail": 0, "skip": 2 + len(PVE)}
    for c in d["checks"]:
        assert {"id", "group", "title", "status", "finding", "why", "evidence", "fix", "pending", "applies",
                "applies_why"} <= set(c)
        assert isinstance(c["applies"], bool) and (c["applies_why"] == "") == c["applies"]
        assert all(set(e) == {"path", "value"} for e in c["evidence"])


# -- firmware & kernel ------------------------------------------------------------------------------

def test_kvm(t):
    assert status(doctor(t), "kvm")[0] == "pass"
    t.rm("sys/module/kvm_intel")
    s, finding = status(doctor(t), "kvm")
    assert s == "fail" and "kvm_intel is not loaded" in finding
    t.write("proc/cpuinfo", "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse\n")
    s, finding = status(doctor(t), "kvm")
    assert s == "fail" and "neither vmx nor svm" in finding
    c = doctor(t).check("kvm")
    assert c.fix is not None and "firmware" in c.fix.summary and not c.fix.plannable


def test_kvm_skips_without_dev_or_sys_module(t):
    t.rm("dev")
    s, finding = status(doctor(t), "kvm")
    assert s == "skip" and "the tree has no /dev" in finding
    t.write("dev/null")
    t.rm("sys/module")
    s, finding = status(doctor(t), "kvm")
    assert s == "skip" and "/sys/module" in finding


def test_iommu_off_fails_with_a_boot_loader_fix(t):
    t.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt\n")
    t.write("etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n')
    t.rm(f"{facts.CLASS_IOMMU}/dmar0")
    for g in (1, 2):
        t.rm(f"{facts.IOMMU_GROUPS}/{g}")
    c = doctor(t, ready_snap(iommu=Iommu(False))).check("iommu")
    assert c.status == "fail" and "intel_iommu=on is not on the kernel command line" in c.finding
    assert c.fix is not None and c.fix.needs_reboot and c.fix.plannable
    assert c.fix.commands == ("edit /etc/default/grub: GRUB_CMDLINE_LINUX_DEFAULT +intel_iommu=on", "update-grub")
    # the IOMMU off: interrupt remapping is skipped, saying why
    s, finding = status(doctor(t), "interrupt-remapping")
    assert s == "skip" and "the IOMMU is off" in finding


def test_iommu_flag_already_in_the_boot_config_only_needs_a_reboot(t):
    t.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt\n")
    t.rm(f"{facts.CLASS_IOMMU}/dmar0")
    for g in (1, 2):
        t.rm(f"{facts.IOMMU_GROUPS}/{g}")
    c = doctor(t).check("iommu")
    assert c.status == "fail" and c.fix is not None
    assert c.fix.summary.startswith("reboot: intel_iommu=on is already in the boot loader's configuration")
    assert not c.fix.plannable and c.fix.needs_reboot


@pytest.mark.parametrize("loader, files, commands", [
    ("proxmox", {"etc/kernel/cmdline": "root=ZFS=rpool/ROOT quiet\n", "etc/kernel/proxmox-boot-uuids": "A\n"},
     ("edit /etc/kernel/cmdline: options +intel_iommu=on", "proxmox-boot-tool refresh")),
    ("grubby", {"usr/sbin/grubby": "", "boot/loader/entries/x.conf": "options quiet\n"},
     ("grubby --update-kernel=ALL --args=intel_iommu=on",)),
    ("unknown", {}, ()),
])
def test_iommu_fix_names_the_boot_loader_found(t, loader, files, commands):
    t.write("proc/cmdline", "root=/dev/sda1 ro iommu=pt\n")
    for rel in ("etc/default/grub", "boot/grub/grub.cfg", f"{facts.CLASS_IOMMU}/dmar0", facts.IOMMU_GROUPS):
        t.rm(rel)
    t.mkdir(facts.IOMMU_GROUPS)  # the kernel's folder is there, empty: the IOMMU is off
    for rel, text in files.items():
        t.write(rel, text)
    c = doctor(t).check("iommu")
    assert c.status == "fail" and c.fix is not None
    assert c.fix.commands == commands
    assert c.fix.plannable == (loader != "unknown")
    if loader == "unknown":
        assert "set +intel_iommu=on on the kernel command line by hand" in c.fix.summary


def test_iommu_without_the_firmware_table_fails_firmware_first(t):
    t.rm(f"{facts.ACPI_TABLES}/DMAR")
    c = doctor(t).check("iommu")
    assert c.status == "fail" and "no DMAR table" in c.finding and not c.fix.plannable


def test_iommu_skips_when_the_tree_has_neither_iommu_folder(t):
    t.rm(facts.CLASS_IOMMU)
    t.rm(facts.IOMMU_GROUPS)
    s, finding = status(doctor(t), "iommu")
    assert s == "skip" and "/sys/kernel/iommu_groups" in finding


def test_iommu_pt_and_acs_override(t):
    t.write("proc/cmdline", "root=/dev/sda1 intel_iommu=on pcie_acs_override=downstream,multifunction\n")
    t.write("etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="intel_iommu=on pcie_acs_override=downstream,multifunction"\n')
    r = doctor(t)
    assert status(r, "iommu-pt")[0] == "warn"
    assert r.check("iommu-pt").fix.commands[0].endswith("+iommu=pt")
    s, finding = status(r, "acs-override")
    assert s == "warn" and "pcie_acs_override=downstream,multifunction" in finding
    assert r.check("acs-override").fix.commands[0].endswith("-pcie_acs_override=downstream,multifunction")
    # the boot loader's configuration already has what the next boot needs: only a reboot is left
    t.write("etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="intel_iommu=on iommu=pt"\n')
    r = doctor(t)
    for cid in ("iommu-pt", "acs-override"):
        fix = r.check(cid).fix
        assert fix.summary.startswith("reboot: ") and fix.needs_reboot and not fix.plannable and not fix.commands
    t.rm("proc/cmdline")
    r = doctor(t)
    for cid in ("iommu-pt", "acs-override"):
        s, finding = status(r, cid)
        assert s == "skip" and "/proc/cmdline is absent" in finding


def test_interrupt_remapping(t):
    t.write(facts.ALLOW_UNSAFE_INTERRUPTS, "Y\n")
    s, finding = status(doctor(t), "interrupt-remapping")
    assert s == "fail" and "allow_unsafe_interrupts=Y" in finding
    t.write(facts.ALLOW_UNSAFE_INTERRUPTS, "N\n")
    t.write("proc/cmdline", CMDLINE + " intremap=off\n")
    s, finding = status(doctor(t), "interrupt-remapping")
    assert s == "warn" and "intremap=off" in finding
    # not loaded: what modprobe.d would give it at the next load counts
    t.write("proc/cmdline", CMDLINE + "\n")
    t.rm("sys/module/vfio_iommu_type1")
    t.write("etc/modprobe.d/unsafe.conf", "options vfio_iommu_type1 allow_unsafe_interrupts=1\n")
    s, finding = status(doctor(t), "interrupt-remapping")
    assert s == "fail" and "/etc/modprobe.d/unsafe.conf" in finding


# -- modules & driver -------------------------------------------------------------------------------

def test_vfio_modules(t):
    t.rm("etc/modules-load.d/vfio.conf")
    t.rm("etc/initramfs-tools/modules")
    c = doctor(t).check("vfio-modules")
    assert c.status == "warn" and "not configured to load at boot" in c.finding
    assert c.fix is not None and c.fix.plannable and "update-initramfs -u" in c.fix.commands
    for m in facts.VFIO_MODULES:
        t.rm(f"sys/module/{m}")
    assert status(doctor(t), "vfio-modules")[0] == "fail"
    t.write("etc/modprobe.d/vfio.conf", "softdep nvidia pre: vfio-pci\n")  # loads at boot, not now
    s, finding = status(doctor(t), "vfio-modules")
    assert s == "warn" and "configured to load at boot but not loaded now" in finding


def test_vfio_modules_skip_rule(t):
    t.rm("etc")
    s, finding = status(doctor(t), "vfio-modules")
    assert s == "skip" and "the tree has no /etc" in finding
    for m in facts.VFIO_MODULES:  # not loaded is proven: a warning even without /etc
        t.rm(f"sys/module/{m}")
    assert status(doctor(t), "vfio-modules")[0] == "warn"


def test_nouveau(t):
    t.rm("etc/modprobe.d/blacklist-nouveau.conf")
    c = doctor(t).check("nouveau")
    assert c.status == "warn" and "not blacklisted" in c.finding and not c.fix.needs_reboot
    t.mkdir("sys/module/nouveau")
    c = doctor(t).check("nouveau")
    assert c.status == "fail" and c.fix.needs_reboot and c.fix.plannable
    t.write("etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\n")  # loaded, but not after a reboot
    c = doctor(t).check("nouveau")
    assert c.status == "fail" and "gone after a reboot" in c.finding
    assert c.fix.summary == "reboot: nouveau is already blacklisted" and not c.fix.plannable
    t.rm("sys/module/nouveau")
    t.write("proc/cmdline", CMDLINE + " modprobe.blacklist=nouveau\n")
    assert status(doctor(t), "nouveau")[0] == "pass"


def test_nvidia_driver(t):
    snap = ready_snap()
    off = replace(snap, gpus=(replace(snap.gpus[0], persistence_mode="disabled"), snap.gpus[1]))
    c = doctor(t, off).check("nvidia-driver")
    assert c.status == "warn" and "persistence mode is off on GPU 0" in c.finding and c.fix.plannable
    t.rm(facts.PERSISTENCED_WANTS)
    s, finding = status(doctor(t), "nvidia-driver")
    assert s == "warn" and "nvidia-persistenced is not enabled at boot" in finding
    t.write(facts.NVIDIA_VERSION, "535.54.03\n")
    s, finding = status(doctor(t), "nvidia-driver")
    assert s == "fail" and "535.54.03" in finding and "550.90.07" in finding
    t.rm("sys/module/nvidia")
    s, finding = status(doctor(t), "nvidia-driver")
    assert s == "fail" and "the nvidia module is not loaded" in finding


def test_nvidia_driver_skip_rule(t):
    down = ready_snap(sources=Sources(nvml="unavailable: NVIDIA driver not loaded"), nvml_driver_version=None)
    s, finding = status(doctor(t, down), "nvidia-driver")
    assert s == "skip" and "nvml unavailable" in finding
    assert status(doctor(t, ready_snap(gpus=())), "nvidia-driver") == ("skip", "no NVIDIA GPU on this host")
    sysfs_down = ready_snap(gpus=(), sources=Sources(sysfs="unavailable: permission denied"))
    s, finding = status(doctor(t, sysfs_down), "nvidia-driver")
    assert s == "skip" and finding.startswith("no NVIDIA GPU found (sysfs unavailable")
    vfio_only = ready_snap(gpus=(ready_snap().gpus[1],))
    s, finding = status(doctor(t, vfio_only, role="passthrough"), "nvidia-driver")
    assert s == "skip" and "not needed for role passthrough" in finding


# -- memory & CPUs ----------------------------------------------------------------------------------

def test_hugepages(t):
    r = doctor(t)
    assert status(r, "hugepages") == ("pass", "node 1: 160 GiB of 1 GiB pages needed, 160 GiB reserved")
    big = with_vm(ready_snap(), "train", memory_kib=192 * GIB)
    c = doctor(t, big).check("hugepages")
    assert c.status == "fail" and "node 1: 192 GiB" in c.finding and "160 GiB reserved" in c.finding
    assert c.fix.plannable and c.fix.commands[0] == (
        "echo 192 > /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages")
    assert c.fix.commands[1:] == ("edit /etc/default/grub: GRUB_CMDLINE_LINUX_DEFAULT +hugepagesz=1G +hugepages=384",
                                  "update-grub")  # spread evenly over 2 nodes at boot
    off = with_vm(big, "train", state="shut off")
    s, finding = status(doctor(t, off), "hugepages")
    assert s == "warn" and "shut-off VMs cannot all start" in finding
    # <hugepages/> without <page>: the host's default size (2 MiB here), none reserved → fail
    default = with_vm(ready_snap(), "train", hugepages_kib=0)
    s, finding = status(doctor(t, default), "hugepages")
    assert s == "fail" and "of 2 MiB pages" in finding


def test_hugepages_spread_and_none_with_pinned_gpu_vms(t):
    spread = with_vm(ready_snap(), "train", numa_mode=None, numa_nodeset=())
    s, finding = status(doctor(t, spread), "hugepages")  # 80 GiB per node: node 0 has none
    assert s == "fail" and "node 0: 80 GiB" in finding
    nodes = tuple(replace(n, hugepages=((1048576, 0),)) for n in ready_snap().numa_nodes)
    none = with_vm(ready_snap(numa_nodes=nodes), "train", hugepages_kib=None)
    s, finding = status(doctor(t, none), "hugepages")
    assert s == "warn" and "no huge pages are reserved on a host with pinned GPU VMs (train)" in finding
    plain = replace(none, vms=(none.vms[1],))
    assert status(doctor(t, plain), "hugepages") == ("pass", "no VM asks for huge pages")
    down = ready_snap(sources=Sources(libvirt="unavailable: no libvirt URI"))
    s, finding = status(doctor(t, down), "hugepages")
    assert s == "skip" and "libvirt unavailable" in finding


def test_hugepages_for_the_gpu_vms_to_come_on_a_host_without_vms(t):
    """Free GPUs, no VM, nothing reserved: never "nothing to reserve" — 1 GiB pages for the largest
    training VM of each node (twice its free GPUs' memory, at most 75 % of the node's memory)."""
    from nodeconsole.actions.doctor_sizing import hugepage_needs

    t.write(f"{facts.NODE_DIR}/node1/hugepages/hugepages-1048576kB/nr_hugepages", "0\n")  # nothing reserved
    nodes = tuple(replace(n, hugepages=((1048576, 0),)) for n in ready_snap().numa_nodes)
    gpus = tuple(replace(g, owner=GpuOwner("host"), memory_total_mib=81559) for g in ready_snap().gpus)
    bare = ready_snap(numa_nodes=nodes, gpus=gpus, vms=())
    c = doctor(t, bare).check("hugepages")
    assert c.status == "warn" and "2 free GPU(s) and no VM" in c.finding and c.fix.plannable
    # 2 x 79.6 GiB = 160 GiB per node (one free GPU each), under 75 % of 256 GiB
    assert c.fix.commands[:2] == tuple(
        f"echo 160 > /sys/devices/system/node/node{n}/hugepages/hugepages-1048576kB/nr_hugepages" for n in (0, 1))
    needs = hugepage_needs(bare, t.root)  # no 1 GiB pages in /sys/kernel/mm: place cannot size one
    assert needs.per_node == {0: 160, 1: 160} and any("place cannot size one there" in n for n in needs.notes)
    t.mkdir("sys/kernel/mm/hugepages/hugepages-1048576kB")  # the host offers 1 GiB pages: `place` sizes it
    needs = hugepage_needs(bare, t.root)  # the plan: the VM `nodeconsole place` would make on each node
    assert needs.size_kib == GIB and needs.per_node == {0: 160, 1: 160} and not needs.checks
    assert any("as `nodeconsole place` sizes it" in n for n in needs.notes)
    assert not any("place cannot size one" in n for n in needs.notes)
    small = tuple(replace(n, memory_kib=128 * GIB) for n in nodes)
    assert hugepage_needs(replace(bare, numa_nodes=small), t.root).per_node == {0: 96, 1: 96}  # 75 % cap
    # a free GPU on vfio-pci: NVML does not say its memory; `place` knows an H100's (80 GiB: 160 pages)
    unseen = replace(bare, gpus=(gpus[0], replace(gpus[1], memory_total_mib=None, driver="vfio-pci")))
    assert hugepage_needs(unseen, t.root).per_node == {0: 160, 1: 160}
    reserved = tuple(replace(n, hugepages=((1048576, 160),)) for n in nodes)
    c = doctor(t, replace(bare, numa_nodes=reserved)).check("hugepages")
    assert (c.status, c.finding) == ("pass", "no VM asks for huge pages; 320 GiB reserved for the GPU VMs to come")
    held = replace(bare, gpus=tuple(replace(g, owner=GpuOwner("vfio", ("old",))) for g in gpus))
    assert status(doctor(t, held), "hugepages") == ("pass", "no VM asks for huge pages")  # no free GPU
    assert hugepage_needs(held, t.root).per_node == {}


def test_host_cores(t):
    onto = with_vm(ready_snap(), "train", pins=(VcpuPin(0, (2,)), VcpuPin(1, (7,))))
    c = doctor(t, onto).check("host-cores")
    assert c.status == "fail" and "train on CPU 2" in c.finding and not c.fix.plannable
    assert c.fix.commands == ("nodeconsole pin train",)
    t.write("etc/systemd/system.conf.d/host-cores.conf", "[Manager]\nCPUAffinity=0,4\n")
    s, finding = status(doctor(t), "host-cores")
    assert s == "warn" and "node(s) 1" in finding
    t.rm("etc/systemd/system.conf.d/host-cores.conf")
    c = doctor(t).check("host-cores")
    assert c.status == "warn" and "no CPUs are kept" in c.finding and c.fix.plannable and c.fix.needs_reboot
    # one core per node, none that a VM is pinned to (train is on 3 and 7)
    assert c.fix.commands == (f"printf '[Manager]\\nCPUAffinity=0,2,4,6\\n' > /{facts.HOST_CORES_FILE}",)
    t.write("proc/cmdline", CMDLINE + " isolcpus=managed_irq,domain,1,3,5,7\n")
    s, finding = status(doctor(t), "host-cores")
    assert s == "pass" and "isolcpus=managed_irq,domain,1,3,5,7" in finding
    t.rm("etc")
    s, finding = status(doctor(t), "host-cores")  # isolcpus alone tells the kept CPUs
    assert s == "pass"
    t.write("proc/cmdline", CMDLINE + "\n")
    s, finding = status(doctor(t), "host-cores")
    assert s == "skip" and "the tree has no /etc" in finding


def test_vcpu_commit(t):
    snap = ready_snap()
    many = replace(snap, vms=snap.vms + (Vm("big", "shut off", 4),))  # 8 of 8 threads defined
    s, finding = status(doctor(t, many), "vcpu-commit")
    assert s == "warn" and "8 vCPUs of the defined VMs on 8 host threads = 100 %" in finding
    clash = replace(snap, vms=snap.vms + (Vm("other", "paused", 1, pins=(VcpuPin(0, (3,)),)),))
    c = doctor(t, clash).check("vcpu-commit")
    assert c.status == "fail" and "train, other: 2 on 1 CPU(s) 3 = 200 %" in c.finding
    # the same pins on a shut-off VM: not running together, no failure
    idle = replace(snap, vms=snap.vms + (Vm("other", "shut off", 1, pins=(VcpuPin(0, (3,)),)),))
    assert status(doctor(t, idle), "vcpu-commit")[0] == "pass"


def test_numa_balancing(t):
    t.write(facts.NUMA_BALANCING, "1\n")
    c = doctor(t).check("numa-balancing")
    assert c.status == "warn" and "numa_balancing is 1" in c.finding and c.fix.plannable
    t.write(facts.NUMA_BALANCING, "0\n")
    t.rm("etc/sysctl.d/90-numa.conf")
    s, finding = status(doctor(t), "numa-balancing")
    assert s == "warn" and "nothing sets it at boot" in finding
    unpinned = with_vm(ready_snap(), "train", pins=())
    assert status(doctor(t, unpinned), "numa-balancing") == ("pass", "no VM is pinned")
    t.write("etc/sysctl.d/90-numa.conf", "kernel.numa_balancing = 0\n")
    t.rm(facts.NUMA_BALANCING)
    s, finding = status(doctor(t), "numa-balancing")
    assert s == "skip" and "numa_balancing is absent" in finding


# -- PCIe -------------------------------------------------------------------------------------------

def test_acs_switch_without_acs_names_the_group(t):
    for addr in (DOWN0, DOWN1):
        t.write_bytes(f"sys/bus/pci/devices/{addr}/config", port_config(None))
    snap = ready_snap()
    shared = IommuGroup(1, (DOWN0, DOWN1, GPU0, GPU1), False)
    snap = replace(snap, iommu=Iommu(True, (shared,)),
                   gpus=tuple(replace(g, iommu_group=1) for g in snap.gpus))
    c = doctor(t, snap).check("acs")
    assert c.status == "warn" and f"switch {UPSTREAM} has no ACS: group 1 holds GPU 0, GPU 1" in c.finding
    assert "through the root complex" not in c.finding
    assert any(e.path == f"/sys/bus/pci/devices/{DOWN0}/config" and "no ACS capability" in e.value
               for e in c.evidence)


def test_acs_skips_on_unreadable_config_space(t):
    for addr in (DOWN0, DOWN1):
        t.write_bytes(f"sys/bus/pci/devices/{addr}/config", bytes(64))  # what a non-root read gets
    s, finding = status(doctor(t), "acs")
    assert s == "skip" and "unreadable (64 bytes" in finding


def test_pcie_link(t):
    snap = ready_snap()
    narrow = replace(snap.gpus[1], link=PciLink("32.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16))
    idle = replace(snap.gpus[0], link=PciLink("2.5 GT/s PCIe", 16, "32.0 GT/s PCIe", 16))
    s, finding = status(doctor(t, replace(snap, gpus=(idle, narrow))), "pcie-link")
    assert s == "warn" and "GPU 1 0000:04:00.0 at x8 of x16" in finding and "GPU 0 0000:03:00.0" not in finding
    unread = replace(snap, gpus=tuple(replace(g, link=PciLink()) for g in snap.gpus))
    assert status(doctor(t, unread), "pcie-link")[0] == "skip"


# -- GPUs -------------------------------------------------------------------------------------------

def test_mig_pending(t):
    snap = ready_snap()
    pend = replace(snap, gpus=(replace(snap.gpus[0], mig=Mig("disabled", "enabled")), snap.gpus[1]))
    c = doctor(t, pend).check("mig-pending")
    assert c.status == "warn" and "disabled -> enabled" in c.finding and c.fix.commands == ("nvidia-smi -r -i 0",)
    down = ready_snap(sources=Sources(nvml="unavailable: not read for a captured tree"))
    s, finding = status(doctor(t, down), "mig-pending")
    assert s == "skip" and "nvml unavailable" in finding


def test_vgpu_host_sriov(t):
    snap = ready_snap()
    types = (VgpuType("1110", "NVIDIA H100XM-1-10C", via="sriov", parent=GPU0),)
    g0 = replace(snap.gpus[0], vgpu=Vgpu(types=types))
    pci = tuple(replace(d, sriov_totalvfs=32, sriov_numvfs=0) if d.address == GPU0 else d for d in snap.pci_devices)
    s, finding = status(doctor(t, replace(snap, gpus=(g0, snap.gpus[1]), pci_devices=pci), role="vgpu"), "vgpu-host")
    assert s == "warn" and "SR-IOV virtual functions are not enabled on GPU 0" in finding
    pci = tuple(replace(d, sriov_numvfs=4) if d.address == GPU0 else d for d in pci)
    assert status(doctor(t, replace(snap, gpus=(g0, snap.gpus[1]), pci_devices=pci), role="vgpu"), "vgpu-host")[0] == "pass"


# -- VMs --------------------------------------------------------------------------------------------

def test_vm_memory_whole_gpu_vgpu_and_mig(t):
    small = with_vm(ready_snap(), "train", memory_kib=120 * GIB)
    c = doctor(t, small).check("vm-memory")
    assert c.status == "warn" and "train has 120 GiB for 80 GiB of GPU memory (1.5x)" in c.finding
    assert c.fix.commands[:2] == ("virsh setmaxmem train 160G --config", "virsh setmem train 160G --config")
    snap = ready_snap()
    vf = "0000:03:00.4"
    inst = VgpuInstance(vf, "NVIDIA H100XM-3-40C", vf, vm="infer")
    mdev = VgpuInstance("aaaa-1", "NVIDIA H100XM-10C", GPU0, vm="desk")
    g0 = replace(snap.gpus[0], vgpu=Vgpu(instances=(inst, mdev)),
                 mig=Mig("enabled", "enabled", (MigInstance("2g.20gb", 0, 2, vm="slice"),)))
    vms = snap.vms + (Vm("infer", "running", 4, memory_kib=64 * GIB, hostdevs=(Hostdev("pci", vf, gpu=GPU0),)),
                      Vm("desk", "running", 2, memory_kib=16 * GIB, hostdevs=(Hostdev("mdev", uuid="aaaa-1", gpu=GPU0),)),
                      Vm("slice", "running", 2, memory_kib=64 * GIB, hostdevs=(Hostdev("pci", "0000:03:00.5", gpu=GPU0),)))
    pci = snap.pci_devices + (replace(snap.pci_devices[-2], address=vf, physfn=GPU0),
                              replace(snap.pci_devices[-2], address="0000:03:00.5", physfn=GPU0))
    c = doctor(t, replace(snap, gpus=(g0, snap.gpus[1]), vms=vms, pci_devices=pci)).check("vm-memory")
    assert c.status == "warn", c.finding
    assert "infer has 64 GiB for 40 GiB of GPU memory (1.6x)" in c.finding
    assert "desk has 16 GiB for 10 GiB" in c.finding
    assert "slice" not in c.finding  # 64 GiB for a 20 GB MIG slice
    assert any("slice: 64 GiB for 20 GiB" in e.value for e in c.evidence)


def test_vm_memory_host_commit_and_no_vms(t):
    huge = replace(ready_snap(), vms=(Vm("huge", "running", 2, memory_kib=500 * GIB),))
    s, finding = status(doctor(t, huge), "vm-memory")
    assert s == "warn" and "running VMs hold 500 GiB of 512 GiB" in finding
    assert status(doctor(t, ready_snap(vms=())), "vm-memory") == ("pass", "no VMs")


# -- pending reboot ---------------------------------------------------------------------------------

BOOT = "11111111-2222-3333-4444-555555555555"


def _change(rid: str, boot_id: str, fixes=("iommu",), **extra) -> AuditRecord:
    return AuditRecord.from_dict({"id": rid, "result": "applied", "needs_reboot": True, "boot_id": boot_id,
                                  "fixes": list(fixes), **extra})


def test_pending_reboot_then_took_effect_or_not(t):
    r = doctor(t, changes=[_change("c1", BOOT, ("iommu", "iommu-pt"))])
    assert r.check("iommu").pending == "pending reboot (change c1)"
    assert r.check("iommu-pt").pending == "pending reboot (change c1)"
    assert r.check("kvm").pending == ""
    r = doctor(t, changes=[_change("c1", "an-older-boot")])
    assert r.check("iommu").pending == "took effect after reboot (change c1)"
    t.write("proc/cmdline", "root=/dev/sda1 iommu=pt\n")
    r = doctor(t, changes=[_change("c1", "an-older-boot", ("iommu-pt", "acs-override")),
                           _change("c2", "older", ("iommu-pt",), result="failed"),
                           _change("c3", BOOT, ("acs-override",), undone_by="c4")])
    assert r.check("iommu-pt").pending == "took effect after reboot (change c1)"
    assert r.check("acs-override").pending == "took effect after reboot (change c1)"
    t.write("proc/cmdline", "root=/dev/sda1\n")
    r = doctor(t, changes=[_change("c1", "an-older-boot", ("iommu-pt",))])
    assert r.check("iommu-pt").pending == "did not take effect after reboot (change c1)"


# -- reading ----------------------------------------------------------------------------------------

def test_files_are_read_once(t, monkeypatch):
    calls: list[str] = []
    real = Root.read_bytes

    def counting(self, rel, limit=1 << 22):
        calls.append(rel)
        return real(self, rel, limit)

    monkeypatch.setattr(Root, "read_bytes", counting)
    doctor(t)
    repeated = {p for p in calls if calls.count(p) > 1}
    assert calls and not repeated, repeated


def test_systemd_setting_last_assignment_wins_and_empty_resets():
    files = [("a", "[Manager]\nCPUAffinity=0-3\n"), ("b", "[Other]\nCPUAffinity=9\n"), ("c", "[Manager]\nCPUAffinity=\n")]
    assert systemd_setting(files, "Manager", "CPUAffinity") == ("c", "")
    assert systemd_setting(files[:2], "Manager", "CPUAffinity") == ("a", "0-3")


def test_missing_names_the_highest_absent_folder(tmp_path):
    (tmp_path / "proc").mkdir()
    f = HostFiles(Root(tmp_path))
    assert f.missing("etc/modprobe.d") == "the tree has no /etc"
    assert f.missing("proc/cmdline") == "/proc/cmdline is absent"


def test_a_config_file_that_cannot_be_read_is_unknown_not_absent(t, monkeypatch):
    real = Root.read_bytes

    def refusing(self, rel, limit=1 << 22):
        if rel.startswith("etc/modprobe.d/") or rel.startswith("etc/modules-load.d/") or rel.startswith(
                "etc/initramfs-tools/") or rel.startswith("etc/systemd/") or rel.startswith("etc/sysctl.d/"):
            raise PermissionError(13, "Permission denied", rel)
        return real(self, rel, limit)

    monkeypatch.setattr(Root, "read_bytes", refusing)
    r = doctor(t)
    for cid in ("nouveau", "host-cores", "numa-balancing", "vfio-modules"):
        s, finding = status(r, cid)
        assert s == "skip" and "permission denied reading /etc/" in finding, (cid, s, finding)


def test_a_broken_check_is_skipped_and_noted(t, monkeypatch):
    from nodeconsole.console.doctor import run

    def broken(ctx):
        raise KeyError("surprise")

    monkeypatch.setitem(run.CHECKS, "pcie-link", broken)
    r = doctor(t)
    assert status(r, "pcie-link") == ("skip", "the check could not run: KeyError: 'surprise'")
    assert r.notes == ("pcie-link: KeyError: 'surprise'",) and status(r, "acs")[0] == "pass"
