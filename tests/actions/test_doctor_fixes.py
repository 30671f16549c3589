"""The doctor's fixes as plans (actions/doctor_fixes.py): plan text and operations, apply + verify + undo
restoring every edited file byte for byte for each boot loader, batching, refusals, the audit record
of a change pending a reboot, and rollback after a failed last step. Small trees built in tmp_path stand
for the hosts (the demo's simulated programs rebuild grub.cfg and the initramfs in them)."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from nodeconsole.actions.audit import APPLIED, FAILED
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import RequestError
from nodeconsole.actions.progress import DONE, FAILED_RESULT, REFUSED
from nodeconsole.actions.session import ActionSession, DoctorFix, Undo
from nodeconsole.console.demo.commands import DemoCommands
from nodeconsole.console.doctor import bootloader as bl
from nodeconsole.console.doctor import facts
from nodeconsole.console.kernel_writer import Kernel
from nodeconsole.console.model import Cpu, NumaNode, VcpuPin, Vm
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams

RELEASE = "6.8.0-31-generic"
BOOT_ID = "2f0c6f1e-5b1e-4bb4-9a55-0d6c1c1d2e3f"
# a comment in Latin-1 (not UTF-8): the old bytes must come back exactly all the same
GRUB = (b'# If you change this file, run update-grub\n\xe9t\xe9\nGRUB_DEFAULT=0\nGRUB_TIMEOUT=5\n'
        b'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash pcie_acs_override=downstream,multifunction"\n'
        b'GRUB_CMDLINE_LINUX=""\n')
GRUB_CFG = (f"### BEGIN /etc/grub.d/10_linux ###\nmenuentry 'Ubuntu' {{\n\tlinux\t/boot/vmlinuz-{RELEASE} "
            f"root=UUID=0b1c ro quiet splash\n\tinitrd\t/boot/initrd.img-{RELEASE}\n}}\n"
            f"menuentry 'Ubuntu (recovery mode)' {{\n\tlinux\t/boot/vmlinuz-{RELEASE} root=UUID=0b1c ro single\n}}\n")
ENTRY = (f"title Linux\nversion {RELEASE}\nlinux /vmlinuz-{RELEASE}\ninitrd /initrd.img-{RELEASE}\n"
         f"options root=UUID=0b1c rw quiet pcie_acs_override=downstream\n")
OTHER_ENTRY = "title Linux old\nversion 6.5.0-1\nlinux /vmlinuz-6.5.0-1\noptions root=UUID=0b1c rw quiet\n"
LOADERS = ("grub", "grub2", "proxmox", "systemd-boot", "grubby")


def _write(root: Path, rel: str, data: str | bytes, mode: int = 0o644) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    p.chmod(mode)


class Recording(DemoCommands):
    """The demo's programs, remembering every command line run."""

    def __init__(self, root: Root) -> None:
        super().__init__(root)
        self.ran: list[list[str]] = []

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.ran.append(list(argv))
        return super().run(argv)


def make_tree(root: Path, loader: str = "grub", initramfs: str | None = "initramfs-tools") -> None:
    """A small host tree: an Intel CPU, the running kernel's files, one boot loader, an initramfs tool."""
    _write(root, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vmx\n")
    _write(root, "proc/cmdline", f"BOOT_IMAGE=/boot/vmlinuz-{RELEASE} root=UUID=0b1c ro quiet splash\n")
    _write(root, "proc/sys/kernel/osrelease", RELEASE + "\n")
    _write(root, facts.BOOT_ID, BOOT_ID + "\n")
    _write(root, facts.NUMA_BALANCING, "1\n")
    _write(root, "sys/firmware/acpi/tables/DMAR", b"DMAR\x30\x00")
    _write(root, "sys/module/nouveau/refcnt", "1\n")
    _write(root, "usr/bin/systemctl", "", 0o755)
    if loader in ("grub", "grub2"):
        _write(root, bl.GRUB_DEFAULT, GRUB)
        cfg = "boot/grub/grub.cfg" if loader == "grub" else "boot/grub2/grub.cfg"
        _write(root, cfg, GRUB_CFG)
        _write(root, "usr/sbin/update-grub" if loader == "grub" else "usr/sbin/grub2-mkconfig", "#!/bin/sh\n", 0o755)
        regen = ["update-grub"] if loader == "grub" else ["grub2-mkconfig", "-o", f"/{cfg}"]
        assert DemoCommands(Root(root)).run(regen)[0] == 0  # grub.cfg as the generator writes it
    elif loader == "proxmox":
        _write(root, bl.PROXMOX_CMDLINE, "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet pcie_acs_override=downstream\n")
        _write(root, bl.PROXMOX_UUIDS, "5A1B-2C3D\n")
        _write(root, "usr/sbin/proxmox-boot-tool", "#!/bin/sh\n", 0o755)
    elif loader in ("systemd-boot", "grubby"):
        _write(root, f"boot/loader/entries/a-{RELEASE}.conf", ENTRY)
        _write(root, "boot/loader/entries/b-old.conf", OTHER_ENTRY)
        if loader == "grubby":
            _write(root, "usr/sbin/grubby", "#!/bin/sh\n", 0o755)
    if initramfs == "initramfs-tools":
        _write(root, facts.INITRAMFS_MODULES, "# List of modules that you want to include in your initramfs.\n")
        _write(root, "usr/sbin/update-initramfs", "#!/bin/sh\n", 0o755)
        assert DemoCommands(Root(root)).run(["update-initramfs", "-c"])[0] == 0
    elif initramfs == "dracut":
        _write(root, "etc/dracut.conf.d/01-dist.conf", 'hostonly="yes"\n')
        _write(root, "usr/bin/dracut", "#!/bin/sh\n", 0o755)
        assert DemoCommands(Root(root)).run(["dracut", "-f"])[0] == 0


class TreeKernel(Kernel):
    """Writes kernel attributes in the tree (read back with a newline, as the kernel shows them);
    `modprobe` makes the module's sysfs directories appear."""

    def write(self, path: str, text: str) -> None:
        super().write(path, text.strip() + "\n")

    def load_module(self, name: str) -> None:
        for rel in (f"sys/bus/pci/drivers/{name}", f"sys/module/{name.replace('-', '_')}"):
            self.root.p(rel).mkdir(parents=True, exist_ok=True)


def make_host(root: Path, kernel=None) -> ActionHost:
    r = Root(root)
    state = root.parent / "state"
    seams = Seams(root=r, libvirt_uri=None, use_real_nvml=False, state_dir=state)
    return ActionHost(seams=seams, kernel=kernel or TreeKernel(r), domains=None, state_dir=state,
                      commands=Recording(r), is_root=lambda: True)


def tree_bytes(root: Path) -> dict[str, object]:
    """Every file's bytes and mode and every link's target below the root."""
    out: dict[str, object] = {}
    for d, dirs, files in os.walk(root):
        for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else (
                Path(p).read_bytes(), os.stat(p).st_mode & 0o777)
    return out


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "root"
    make_tree(root)
    return root


def _apply(host: ActionHost, plan) -> object:
    result = ActionSession(host).apply(plan)
    assert result.status == DONE, result.message
    return result


def _undo(host: ActionHost, record_id: str) -> None:
    session = ActionSession(host)
    plan = session.plan(Undo(record_id))
    assert plan.ok and plan.steps, plan.lines()
    result = session.apply(plan)
    assert result.status == DONE, result.message


# -- plan text and operations -----------------------------------------------------------------------

def test_grub_plan_is_one_edit_with_its_regenerate_command_and_says_reboot(tree):
    host = make_host(tree)
    plan = ActionSession(host).plan(DoctorFix(("iommu", "iommu-pt", "acs-override")))
    assert plan.ok and plan.request == {"fixes": ["iommu", "iommu-pt", "acs-override"], "role": "mixed"}
    assert plan.ops() == [{"kind": "boot_cmdline", "loader": "grub", "paths": ["etc/default/grub"],
                           "add": ["intel_iommu=on", "iommu=pt"], "remove": ["pcie_acs_override"],
                           "regenerate": ["update-grub"], "cfg": "boot/grub/grub.cfg"}]
    assert plan.needs_reboot and plan.steps[0].needs_reboot
    text = "\n".join(plan.lines())
    assert "edit /etc/default/grub: GRUB_CMDLINE_LINUX_DEFAULT +intel_iommu=on +iommu=pt -pcie_acs_override" in text
    assert "$ update-grub" in text and "takes effect at the next boot" in text
    assert "apply these, then reboot once" in text
    # the old bytes (not UTF-8) are in the inverse, so in the audit record
    (restore,) = plan.steps[0].inverse["restore"]
    assert restore["path"] == "etc/default/grub" and restore["encoding"] == "base64"


def test_each_fix_plans_its_files_and_live_changes(tree):
    host = make_host(tree)
    plan = ActionSession(host).plan(DoctorFix(("vfio-modules", "nouveau", "numa-balancing")))
    kinds = [op["kind"] for op in plan.ops()]
    assert kinds == ["config_file", "module", "config_file", "kernel_value"]
    boot = plan.ops()[0]
    assert boot["run"] == [["update-initramfs", "-u"]] and boot["needs_reboot"]
    files = {f["path"]: f["content"] for f in boot["files"]}
    assert files[facts.VFIO_MODULES_FILE].splitlines()[1:] == ["vfio", "vfio_pci", "vfio_iommu_type1"]
    assert files[facts.INITRAMFS_MODULES].startswith("# List of modules")  # the old lines kept, vfio appended
    assert files[facts.INITRAMFS_MODULES].endswith("vfio\nvfio_pci\nvfio_iommu_type1\n")
    assert "blacklist nouveau\noptions nouveau modeset=0\n" in files[facts.NOUVEAU_BLACKLIST_FILE]
    assert plan.ops()[1] == {"kind": "module", "name": "vfio-pci"}
    assert plan.ops()[2]["files"][0]["path"] == facts.SYSCTL_FILE
    assert plan.ops()[2]["files"][0]["content"].endswith("kernel.numa_balancing = 0\n")
    assert plan.ops()[3] == dict(plan.ops()[3], path=facts.NUMA_BALANCING, value="0")
    text = "\n".join(plan.lines())
    assert "$ update-initramfs -u" in text and "nouveau is loaded now" in text


def test_dracut_host_gets_force_drivers_and_dracut(tmp_path):
    root = tmp_path / "root"
    make_tree(root, "grub", initramfs="dracut")
    host = make_host(root)
    (op,) = ActionSession(host).plan(DoctorFix(("vfio-modules",))).ops()[:1]
    assert op["run"] == [["dracut", "-f"]]
    dracut = next(f["content"] for f in op["files"] if f["path"] == facts.DRACUT_VFIO_FILE)
    assert 'force_drivers+=" vfio vfio_pci vfio_iommu_type1 "' in dracut


# -- apply, verify and undo, byte for byte, for every boot loader ------------------------------------

def _loader_words(root: Path, loader: str) -> list[str]:
    r = Root(root)
    if loader in ("grub", "grub2"):
        return (bl.grub_value(r.read(bl.GRUB_DEFAULT) or "") or "").split()
    if loader == "proxmox":
        return (r.read(bl.PROXMOX_CMDLINE) or "").split()
    return (bl.entry_options(r.read(f"boot/loader/entries/a-{RELEASE}.conf") or "") or "").split()


@pytest.mark.parametrize("loader", LOADERS)
def test_apply_verify_undo_restores_every_file(tmp_path, loader):
    root = tmp_path / "root"
    make_tree(root, loader)
    host = make_host(root)
    before = tree_bytes(root)
    ids = ("iommu", "iommu-pt", "acs-override", "vfio-modules", "nouveau", "numa-balancing")
    plan = ActionSession(host).plan(DoctorFix(ids))
    assert plan.ops()[0]["loader"] == ("grub" if loader == "grub2" else loader)
    result = _apply(host, plan)
    words = _loader_words(root, loader)
    assert "intel_iommu=on" in words and "iommu=pt" in words
    assert not any(w.startswith("pcie_acs_override") for w in words)
    if loader in ("grub", "grub2"):
        cfg = (root / ("boot/grub/grub.cfg" if loader == "grub" else "boot/grub2/grub.cfg")).read_text()
        linux = [line.split() for line in cfg.splitlines() if line.strip().startswith("linux")]
        assert "intel_iommu=on" in linux[0] and "iommu=pt" in linux[0]  # regenerated
    if loader == "systemd-boot":  # only the running kernel's entry
        assert (root / "boot/loader/entries/b-old.conf").read_text() == OTHER_ENTRY
    if loader == "grubby":  # grubby --update-kernel=ALL edits every entry
        assert "iommu=pt" in (root / "boot/loader/entries/b-old.conf").read_text()
    assert (root / facts.NUMA_BALANCING).read_text().strip() == "0"
    assert (root / facts.SYSCTL_FILE).stat().st_mode & 0o777 == 0o644
    assert tree_bytes(root) != before
    _undo(host, result.record_id)
    after = tree_bytes(root)
    assert after == before
    ran = host.commands.ran
    if loader == "grubby":
        assert ran[0][:2] == ["grubby", "--update-kernel=ALL"]
        assert ["grubby", "--update-kernel=ALL", "--remove-args=intel_iommu=on iommu=pt"] in ran


def test_a_file_link_is_refused_not_followed(tree):
    elsewhere = tree.parent / "elsewhere.conf"
    elsewhere.write_text("x\n")
    target = tree / facts.SYSCTL_FILE
    target.parent.mkdir(parents=True)
    target.symlink_to(elsewhere)
    host = make_host(tree)
    with pytest.raises(Exception, match="symbolic link"):
        ActionSession(host).plan(DoctorFix(("numa-balancing",)))
    assert elsewhere.read_text() == "x\n"


# -- batching ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HugeVm(Vm):
    hugepages_kib: int | None = None  # page size asked for (0: the default size), None: no hugepages


def _numa_tree(root: Path, nodes: int = 2) -> None:
    for n in range(nodes):
        d = root / f"{facts.NODE_DIR}/node{n}/hugepages/hugepages-1048576kB"
        _write(root, f"{facts.NODE_DIR}/node{n}/hugepages/hugepages-1048576kB/nr_hugepages", "0\n")
        (d / "free_hugepages").write_text("0\n")


def _with_vms(host: ActionHost, vms, nodes: int = 2) -> None:
    """The host's snapshots get these VMs and NUMA nodes (a tree has no libvirt)."""
    real = host.snapshot()
    cpus = tuple(Cpu(id=i, package=i % nodes, core=i % 4, numa_node=(i % 4) % nodes, online=True,
                     siblings=tuple(sorted({i % 4, i % 4 + 4}))) for i in range(8))
    snap = dataclasses.replace(real, vms=tuple(vms), cpus=cpus, numa_nodes=tuple(
        NumaNode(id=n, cpus=tuple(c.id for c in cpus if c.numa_node == n), memory_kib=256 << 20)
        for n in range(nodes)))
    host.snapshot = lambda: snap  # type: ignore[method-assign]


def test_batch_one_boot_loader_edit_and_one_initramfs_rebuild(tree):
    _numa_tree(tree)
    host = make_host(tree)
    _with_vms(host, [HugeVm("train", "shut off", 8, memory_kib=40 << 20, hugepages_kib=1048576,
                            numa_mode="strict", numa_nodeset=(0,)),
                     HugeVm("web", "shut off", 2, memory_kib=8 << 20, hugepages_kib=1048576, numa_mode="strict",
                            numa_nodeset=(1,)),
                     HugeVm("spread", "shut off", 2, memory_kib=4 << 20, hugepages_kib=1048576),  # 2 + 2
                     HugeVm("plain", "shut off", 2, memory_kib=64 << 20)])
    before = tree_bytes(tree)
    plan = ActionSession(host).plan(DoctorFix(("iommu", "iommu-pt", "hugepages", "vfio-modules", "nouveau")))
    kinds = [op["kind"] for op in plan.ops()]
    assert kinds.count("boot_cmdline") == 1 and kinds.count("config_file") == 1
    (cmd,) = [op for op in plan.ops() if op["kind"] == "boot_cmdline"]
    # 42 pages on node 0, 10 on node 1; spread evenly at boot, so 2 x 42
    assert cmd["add"] == ["intel_iommu=on", "iommu=pt", "default_hugepagesz=1G", "hugepagesz=1G", "hugepages=84"]
    live = {op["node"]: op["count"] for op in plan.ops() if op["kind"] == "hugepages"}
    assert live == {0: 42, 1: 10}
    text = "\n".join(plan.lines())
    assert "node 0 needs 42 (spread, train), node 1 needs 10 (spread, web)" in text
    assert "hugepages=0:42,1:10" in text
    result = _apply(host, plan)
    ran = host.commands.ran
    assert ran.count(["update-initramfs", "-u"]) == 1 and ran.count(["update-grub"]) == 1
    assert (tree / f"{facts.NODE_DIR}/node0/hugepages/hugepages-1048576kB/nr_hugepages").read_text() == "42\n"
    _undo(host, result.record_id)
    assert ran.count(["update-initramfs", "-u"]) == 2  # once more, after the files came back
    assert tree_bytes(tree) == before


class ShortKernel(TreeKernel):
    """A kernel that finds room for only `room` 1 GiB pages per node (fragmented memory)."""

    def __init__(self, root: Root, room: int) -> None:
        super().__init__(root)
        self.room = room

    def write(self, path: str, text: str) -> None:
        if path.endswith("nr_hugepages"):
            text = str(min(int(text), self.room))
        super().write(path, text)


def test_kernel_reserving_fewer_pages_is_said_and_the_boot_reservation_stays(tree):
    _numa_tree(tree, nodes=1)
    host = make_host(tree, kernel=ShortKernel(Root(tree), room=3))
    _with_vms(host, [HugeVm("train", "shut off", 8, memory_kib=10 << 20, hugepages_kib=1048576)], nodes=1)
    plan = ActionSession(host).plan(DoctorFix(("hugepages",)))
    result = _apply(host, plan)
    assert any("only 3 of 10 1 GiB pages" in w for w in result.warnings)
    assert "hugepages=10" in (bl.grub_value((tree / bl.GRUB_DEFAULT).read_bytes().decode("latin-1")) or "")
    assert any("only 3 of 10" in n for n in host.audit.find(result.record_id).to_json()["notes"])


def test_live_reservation_alone_fails_when_the_kernel_reserves_fewer(tree):
    _numa_tree(tree, nodes=1)
    host = make_host(tree, kernel=ShortKernel(Root(tree), room=3))
    from nodeconsole.actions.plan import Plan, build_step

    step = build_step(host, {"kind": "hugepages", "node": 0, "size_kib": 1048576, "count": 10})
    plan = Plan("doctor fix", "t", {}, steps=[step])
    result = ActionSession(host).apply(plan)
    assert result.status == FAILED_RESULT and "has 3 1 GiB pages reserved, expected 10" in result.error
    assert (tree / f"{facts.NODE_DIR}/node0/hugepages/hugepages-1048576kB/nr_hugepages").read_text() == "0\n"


def test_host_cores_keep_a_free_core_per_node_in_a_systemd_dropin(tree):
    host = make_host(tree)
    # CPU 0 (core 0, node 0) is pinned by a VM: node 0 keeps core 2 (CPUs 2 and 6), node 1 core 1 (1, 5)
    _with_vms(host, [Vm("db", "running", 1, pins=(VcpuPin(0, (0,)),))])
    plan = ActionSession(host).plan(DoctorFix(("host-cores",)))
    (op,) = plan.ops()
    assert op["files"][0]["path"] == facts.HOST_CORES_FILE
    assert "[Manager]\nCPUAffinity=2,6,1,5\n" in op["files"][0]["content"]
    assert plan.needs_reboot and "daemon-reexec" in "\n".join(plan.notes)


# -- refusals ---------------------------------------------------------------------------------------

def test_unknown_boot_loader_refuses_and_changes_nothing(tmp_path):
    root = tmp_path / "root"
    make_tree(root, "none")
    host = make_host(root)
    before = tree_bytes(root)
    plan = ActionSession(host).plan(DoctorFix(("iommu", "vfio-modules")))
    assert not plan.ok
    text = "\n".join(plan.lines())
    assert "set it by hand: add intel_iommu=on on the kernel command line" in text
    assert "Refused: nothing will be changed." in text
    assert ActionSession(host).apply(plan).status == REFUSED
    assert tree_bytes(root) == before and host.commands.ran == []


def test_unknown_ids_are_a_request_error_and_hand_fixes_refuse(tree):
    session = ActionSession(make_host(tree))
    with pytest.raises(RequestError, match="unknown check id 'iommu-on'"):
        session.plan(DoctorFix(("iommu-on",)))
    with pytest.raises(RequestError, match="unknown role"):
        session.plan(DoctorFix(("iommu",), role="gaming"))
    for ids in (("pcie-link",), ("kvm",), ("iommu", "vcpu-commit")):
        plan = session.plan(DoctorFix(ids))
        assert not plan.ok and not plan.empty and not plan.steps
        assert "by hand:" in "\n".join(plan.lines())
    assert "reseat the GPU" in "\n".join(session.plan(DoctorFix(("pcie-link",))).lines())
    assert "BIOS" in "\n".join(session.plan(DoctorFix(("kvm",))).lines())


def test_already_configured_says_nothing_to_do_and_reboot(tree):
    host = make_host(tree)
    session = ActionSession(host)
    _apply(host, session.plan(DoctorFix(("iommu-pt",))))
    again = session.plan(DoctorFix(("iommu-pt",)))
    assert again.empty
    assert any("reboot for it to take effect" in n for n in again.notes)


# -- audit and rollback -----------------------------------------------------------------------------

def test_audit_record_says_pending_reboot_with_boot_id_and_fixes(tree):
    host = make_host(tree)
    result = _apply(host, ActionSession(host).plan(DoctorFix(("iommu", "numa-balancing"))))
    assert "reboot once" in result.message
    record = host.audit.find(result.record_id).to_json()
    assert record["result"] == APPLIED and record["needs_reboot"] is True
    assert record["boot_id"] == BOOT_ID and record["fixes"] == ["iommu", "numa-balancing"]
    assert [s.get("needs_reboot", False) for s in record["steps"]] == [True, False, False]


def test_live_only_change_has_no_pending_reboot(tree):
    host = make_host(tree)
    result = _apply(host, ActionSession(host).plan(DoctorFix(("numa-balancing",))))
    record = host.audit.find(result.record_id).to_json()
    assert "needs_reboot" not in record and "boot_id" not in record and record["fixes"] == ["numa-balancing"]


def test_failure_in_the_last_step_rolls_every_file_back(tree, monkeypatch):
    host = make_host(tree)
    before = tree_bytes(tree)
    plan = ActionSession(host).plan(DoctorFix(("iommu", "acs-override", "vfio-modules", "nouveau",
                                               "numa-balancing")))
    monkeypatch.setenv("NODECONSOLE_FAIL_STEP", str(len(plan.steps)))
    result = ActionSession(host).apply(plan)
    assert result.status == FAILED_RESULT and not result.undo_failed
    assert host.audit.find(result.record_id).to_json()["result"] == FAILED
    assert tree_bytes(tree) == before


def test_a_fix_the_role_does_not_need_is_planned_with_a_note(tree):
    plan = ActionSession(make_host(tree)).plan(DoctorFix(("vfio-modules",), role="vgpu"))
    assert plan.ok and plan.steps and plan.request["role"] == "vgpu"
    assert "vfio-modules is not needed for role vgpu (planned because it was asked for)" in plan.notes
    plan = ActionSession(make_host(tree)).plan(DoctorFix(("nouveau",), role="vgpu"))
    assert plan.ok and not any("not needed" in n for n in plan.notes)  # nouveau: every role


def test_a_boot_reservation_that_covers_the_vms_is_kept_not_shrunk(tree):
    grub = tree / bl.GRUB_DEFAULT
    grub.write_bytes(GRUB.replace(b'splash ', b'splash hugepagesz=1G hugepages=100 '))
    _numa_tree(tree)
    host = make_host(tree)
    _with_vms(host, [HugeVm("train", "shut off", 8, memory_kib=40 << 20, hugepages_kib=1048576,
                            numa_mode="strict", numa_nodeset=(0,))])
    plan = ActionSession(host).plan(DoctorFix(("hugepages",)))
    assert [op["kind"] for op in plan.ops()] == ["hugepages"]  # live only: 100 at boot covers 2 x 40
    assert any("already reserves enough at boot (hugepagesz=1G hugepages=100)" in n for n in plan.notes)


def test_boot_covers_reads_both_forms_of_hugepages():
    from nodeconsole.actions.doctor_fixes import boot_covers

    need = {0: 40, 1: 8}
    assert boot_covers(["hugepagesz=1G", "hugepages=80"], "1G", need)
    assert not boot_covers(["hugepagesz=1G", "hugepages=79"], "1G", need)
    assert not boot_covers(["hugepagesz=2M", "hugepages=80"], "1G", need)
    assert boot_covers(["hugepagesz=1G", "hugepages=0:40,1:8"], "1G", need)
    assert not boot_covers(["hugepagesz=1G", "hugepages=0:40"], "1G", need)
    assert not boot_covers(["hugepagesz=1G", "hugepages=0:x"], "1G", need)


class NodeKernel(TreeKernel):
    """modprobe of a module that makes a device node makes it (as udev would)."""

    def load_module(self, name: str) -> None:
        super().load_module(name)
        node = facts.MODULE_DEVICE.get(name)
        if node:
            _write(self.root.path, node, "")


def test_vhost_net_and_tun_load_now_and_at_boot_and_undo_exactly(tree):
    host = make_host(tree, NodeKernel(Root(tree)))
    before = tree_bytes(tree)
    plan = ActionSession(host).plan(DoctorFix(("vhost-net", "tun")))
    assert plan.ok and not plan.needs_reboot, plan.refusal
    assert [op["kind"] for op in plan.ops()] == ["config_file", "module", "config_file", "module"]
    assert [op.get("device") for op in plan.ops() if op["kind"] == "module"] == [facts.DEV_VHOST_NET, facts.DEV_TUN]
    result = _apply(host, plan)
    assert (tree / facts.MODULE_CONF["vhost_net"]).read_text().endswith("\nvhost_net\n")
    assert (tree / facts.DEV_VHOST_NET).exists() and (tree / facts.DEV_TUN).exists()
    assert ActionSession(host).plan(DoctorFix(("vhost-net", "tun"))).empty  # done: nothing left to do
    _apply(host, ActionSession(host).plan(Undo(result.record_id)))
    after = tree_bytes(tree)
    assert {k: v for k, v in after.items() if not k.startswith("dev/")} == before  # the files, byte for byte
    assert sorted(k for k in after if k.startswith("dev/")) == ["dev/net/tun", "dev/vhost-net"]  # still loaded


def test_a_module_step_loads_only_the_modules_it_knows_with_their_node(tree):
    from nodeconsole.actions.plan import StepError, build_step

    host = make_host(tree)
    with pytest.raises(StepError, match="not one nodeconsole loads"):
        build_step(host, {"kind": "module", "name": "vhost_net", "device": "dev/sda"})
    with pytest.raises(StepError, match="not one nodeconsole loads"):
        build_step(host, {"kind": "module", "name": "evil", "device": facts.DEV_TUN})
