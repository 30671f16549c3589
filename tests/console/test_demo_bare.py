"""The demo host carries what `nodeconsole doctor` reads (modules, ACPI tables, config space with ACS,
boot configuration under /etc, NVML persistence), `demo reset --bare` makes the same hardware freshly
installed, and `demo reboot` brings the host up as its /etc says, keeping the disk byte for byte."""
from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.cpulist import parse_cpulist
from nodeconsole.console.demo.boot import (
    BootConfig,
    bare_spec,
    boot_hugepages,
    boot_spec,
    iommu_on,
    read_boot_config,
)
from nodeconsole.console.demo.commands import DemoCommands
from nodeconsole.console.demo.gen_config import config_space
from nodeconsole.console.demo.gen_pci import Func
from nodeconsole.console.demo.generator import demo_spec, generate, small_spec
from nodeconsole.console.demo.kernel import SimulatedKernel
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.spec import Link, walk
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.doctor import bootloader, facts
from nodeconsole.console.root import Root

HOST_CORES = "0-1,32-33,64-65,96-97"
SW0_PORTS = ("0000:15:01.0", "0000:17:00.0", "0000:17:01.0", "0000:17:02.0")  # root port, downstream ports
SW3_PORTS = ("0000:b9:00.0", "0000:b9:01.0", "0000:b9:02.0", "0000:b9:03.0")  # the switch without ACS
GPUS = ("0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0", "0000:9a:00.0", "0000:9b:00.0",
        "0000:ba:00.0", "0000:bb:00.0", "0000:da:00.0", "0000:db:00.0")
GIB = 1048576
ACS_ON = facts.ACS_SV | facts.ACS_RR | facts.ACS_CR | facts.ACS_UF


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    host = generate(demo_spec(), tmp_path_factory.mktemp("demo-files"))
    return host, Root(host.root)


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    state = tmp_path_factory.mktemp("bare") / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NODECONSOLE_STATE_DIR", str(state))
        assert main(["demo", "reset", "--bare"]) == 0
    return state, Root(state / "root")


def _cli(capsys, monkeypatch, state: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(state))
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _disk(root: Path, top: str = "etc") -> dict[str, tuple[str, bytes]]:
    """Every file and link below root/top: ("file", bytes) or ("link", target)."""
    out = {}
    for d, dirs, files in os.walk(root / top):
        for name in dirs + files:
            p = Path(d) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
    return out


def _modules(root: Root) -> set[str]:
    return set(root.listdir(facts.MODULES))


def _pages(root: Root, node: int, what: str = "nr") -> int | None:
    return root.read_int(f"{facts.NODE_DIR}/node{node}/hugepages/hugepages-1048576kB/{what}_hugepages")


# -- the configured demo -------------------------------------------------------------------------------

def test_running_kernel_files(demo):
    host, root = demo
    assert root.read(facts.NUMA_BALANCING) == "0"
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", root.read(facts.BOOT_ID))
    kvm = host.root / facts.DEV_KVM
    assert kvm.is_file() and not kvm.is_symlink() and kvm.stat().st_size == 0
    assert "vmx" in root.read(facts.CPUINFO).split()
    mods = _modules(root)
    assert {"kvm", "kvm_intel", "vfio", "vfio_pci", "vfio_iommu_type1", "nvidia"} <= mods
    assert not mods & {"nouveau", "kvm_amd"}
    assert root.read(facts.ALLOW_UNSAFE_INTERRUPTS) == "N"
    assert root.read(facts.NVIDIA_VERSION) == json.loads(host.nvml_state.read_text())["driver_version"]
    assert root.isdir("sys/bus/pci/drivers/vfio-pci") and root.exists("dev/vfio/vfio")
    dmar = root.read_bytes(f"{facts.ACPI_TABLES}/DMAR")
    assert dmar[:4] == b"DMAR" and int.from_bytes(dmar[4:8], "little") == len(dmar) and sum(dmar) % 256 == 0
    assert dmar[37] & 1  # INTR_REMAP
    assert not root.exists(f"{facts.ACPI_TABLES}/IVRS")
    units = sorted(root.listdir(facts.CLASS_IOMMU))
    assert units == [f"dmar{i}" for i in range(7)]  # one per host bridge
    assert int(root.read(f"{facts.CLASS_IOMMU}/dmar0/intel-iommu/ecap"), 16) & 0x8  # IR capable
    assert len(root.listdir(facts.IOMMU_GROUPS)) == 57


def test_boot_configuration_files(demo):
    host, root = demo
    cmdline = root.read(facts.CMDLINE)
    words = cmdline.split()
    assert words[:3] == ["BOOT_IMAGE=/boot/vmlinuz-6.8.0-45-generic", "root=/dev/mapper/vg0-root", "ro"]
    assert bootloader.grub_value(root.read(bootloader.GRUB_DEFAULT)) == " ".join(words[3:])
    loader = bootloader.detect(root)
    assert loader.kind == "grub" and loader.regenerate == ("update-grub",)
    assert f"ro  {' '.join(words[3:])}" in root.read("boot/grub/grub.cfg")
    assert bootloader.loader_cmdline(root, loader) == " ".join(words[3:])
    assert root.read("etc/modules-load.d/vfio.conf").splitlines()[1:] == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    assert root.read(facts.INITRAMFS_MODULES).splitlines()[-3:] == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    assert "blacklist nouveau" in root.read("etc/modprobe.d/blacklist-nouveau.conf").splitlines()
    assert "kernel.numa_balancing = 0" in root.read("etc/sysctl.d/80-vm-host.conf").splitlines()
    affinity = root.read("etc/systemd/system.conf.d/60-host-cores.conf").splitlines()
    assert "[Manager]" in affinity and f"CPUAffinity={HOST_CORES}" in affinity
    assert root.exists(facts.PERSISTENCED_WANTS) and root.read(facts.PERSISTENCED_WANTS).startswith("[Unit]")
    assert not os.path.isabs(os.readlink(host.root / facts.PERSISTENCED_WANTS))
    # the host's cores hold emulator threads at most: no VM's vCPU is pinned there
    kept = set(parse_cpulist(HOST_CORES))
    node = ET.parse(host.libvirt_xml).getroot()
    pinned = {c for pin in node.iter("vcpupin") for c in parse_cpulist(pin.get("cpuset"))}
    assert pinned and not pinned & kept


def test_hugepages_hold_the_vms_that_ask_for_them(demo):
    host, root = demo
    assert "hugepages=288" in root.read(facts.CMDLINE).split()
    assert [_pages(root, n) for n in (0, 1)] == [144, 144]
    # train-a (128 GiB, strict on node 0) and db-1 (64 GiB, strict on node 1) run on their pages
    assert [_pages(root, n, "free") for n in (0, 1)] == [16, 80]
    meminfo = dict(line.split(":") for line in root.read("proc/meminfo").splitlines())
    assert int(meminfo["HugePages_Total"]) == 288 and int(meminfo["HugePages_Free"]) == 96
    node = ET.parse(host.libvirt_xml).getroot()
    backed = {d.findtext("name"): int(d.find("memory").text) // 1048576 for d in node.iter("domain")
              if d.find("memoryBacking/hugepages/page[@size='1048576']") is not None}
    assert backed == {"train-a": 128, "db-1": 64}


def test_config_space_header_and_acs(demo):
    _host, root = demo
    for addr in root.listdir("sys/bus/pci/devices"):
        cfg = root.read_bytes(f"sys/bus/pci/devices/{addr}/config")
        base = f"sys/bus/pci/devices/{addr}"
        behind_pci_bridge = addr == "0000:02:00.0"  # the BMC's VGA: conventional PCI
        assert len(cfg) == (256 if behind_pci_bridge else 4096), addr
        assert int.from_bytes(cfg[0:2], "little") == int(root.read(f"{base}/vendor"), 16)
        assert int.from_bytes(cfg[2:4], "little") == int(root.read(f"{base}/device"), 16)
        assert int.from_bytes(cfg[9:12], "little") == int(root.read(f"{base}/class"), 16)
    acs = {a: facts.acs_control(root.read_bytes(f"sys/bus/pci/devices/{a}/config")) for a in SW0_PORTS + SW3_PORTS}
    assert all(acs[a] == ACS_ON for a in SW0_PORTS) and all(acs[a] is None for a in SW3_PORTS)
    assert facts.acs_control(root.read_bytes("sys/bus/pci/devices/0000:b7:01.0/config")) == ACS_ON  # its root port
    assert all(facts.acs_control(root.read_bytes(f"sys/bus/pci/devices/{g}/config")) is None for g in GPUS)


@pytest.mark.parametrize("kind, acs, want", [(0x4, True, ACS_ON), (0x6, None, ACS_ON), (0x6, False, None),
                                             (0x5, True, None), (0x0, None, None)])
def test_acs_round_trips_through_the_doctors_parser(kind, acs, want):
    from nodeconsole.console.demo.spec import PciDev
    dev = PciDev(1, 0, 0x1000, 0xC030, 0x060400, secondary_bus=3, acs=acs) if kind != 0 else PciDev(0, acs=acs)
    f = Func("0000:02:01.0", "x", dev, 0, dev.vendor, dev.device, dev.class_id, dev.vendor, 0, None, None, None,
             Link(4, 8, 5, 16), 3 if dev.is_bridge else None)
    cfg = config_space(f, kind, False, 2)
    assert facts.acs_control(cfg) == want
    assert facts.acs_control(cfg[:64]) is None  # an unprivileged read: 64 bytes, no extended space
    if dev.is_bridge:
        assert cfg[0x18:0x1B] == bytes([2, 3, 3]) and cfg[0x0E] == 1


def test_nvml_persistence_mode(demo, tmp_path):
    host, root = demo
    path = tmp_path / "nvml.json"
    path.write_bytes(host.nvml_state.read_bytes())
    state = json.loads(path.read_text())
    assert {g["persistence_mode"] for g in state["gpus"]} == {1}
    lib = SimulatedNvml.from_file(path, root=root, privileged=False).install()
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByPciBusId(GPUS[0])
        assert pynvml.nvmlDeviceGetPersistenceMode(h) == 1
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlDeviceSetPersistenceMode(h, 0)
        lib.privileged = True
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceSetPersistenceMode(h, 2)
        pynvml.nvmlDeviceSetPersistenceMode(h, 0)
        assert pynvml.nvmlDeviceGetPersistenceMode(h) == 0
        pynvml.nvmlShutdown()
    finally:
        lib.uninstall()
    saved = {g["address"]: g["persistence_mode"] for g in json.loads(path.read_text())["gpus"]}
    assert saved[GPUS[0]] == 0 and saved[GPUS[4]] == 1


# -- bare ---------------------------------------------------------------------------------------------

def test_bare_host_is_not_set_up(bare):
    state, root = bare
    assert json.loads((state / "demo-host.json").read_text()) == {"bare": True, "boot_count": 0}
    words = root.read(facts.CMDLINE).split()
    assert not {w.split("=")[0] for w in words} & {"intel_iommu", "iommu", "hugepages", "hugepagesz",
                                                   "default_hugepagesz"}
    assert bootloader.grub_value(root.read(bootloader.GRUB_DEFAULT)) == ""
    assert root.listdir(facts.IOMMU_GROUPS) == [] and root.listdir(facts.CLASS_IOMMU) == []
    assert root.exists(f"{facts.ACPI_TABLES}/DMAR")  # the firmware still has VT-d: only the kernel is off
    mods = _modules(root)
    assert "nouveau" in mods and {"kvm", "kvm_intel", "nvidia"} <= mods
    assert not mods & {"vfio", "vfio_pci", "vfio_iommu_type1", "vfio_pci_core"}
    assert not root.exists("sys/bus/pci/drivers/vfio-pci") and not root.exists("dev/vfio/vfio")
    assert root.exists(facts.DEV_KVM)
    assert not root.exists("etc/modules-load.d/vfio.conf") and "vfio" not in root.read(facts.INITRAMFS_MODULES)
    assert not any("nouveau" in (root.read(f"{facts.MODPROBE_D}/{n}") or "") for n in root.listdir(facts.MODPROBE_D))
    assert [_pages(root, n) for n in (0, 1)] == [0, 0]
    assert not root.exists(facts.SYSTEMD_CONF_D) and "\nCPUAffinity=" not in root.read(facts.SYSTEMD_CONF)
    assert root.read(facts.NUMA_BALANCING) == "1"
    assert not any("numa_balancing" in (root.read(f"{facts.SYSCTL_D}/{n}") or "") for n in root.listdir(facts.SYSCTL_D))
    assert not root.exists(facts.PERSISTENCED_WANTS)
    nvml = json.loads((state / "nvml.json").read_text())
    assert len(nvml["gpus"]) == 10 and all(g["persistence_mode"] == 0 for g in nvml["gpus"])
    assert all(g["mig"]["current"] == 0 and not g["mig"]["instances"] and not g["vgpu"]["supported_type_ids"]
               for g in nvml["gpus"])
    assert [root.link_name(f"sys/bus/pci/devices/{g}/driver") for g in GPUS] == ["nvidia"] * 10
    assert root.listdir("sys/bus/mdev/devices") == [] and root.read("sys/bus/pci/devices/0000:3a:00.0/sriov_numvfs") == "0"
    assert root.link_name("sys/bus/pci/devices/0000:1a:00.1/driver") == "mlx5_core"  # NIC VFs as before
    assert ET.parse(state / "libvirt.xml").getroot().find("domain") is None


def test_bare_set_up_by_hand_then_rebooted(tmp_path, capsys, monkeypatch):
    state = tmp_path / "demo"
    assert _cli(capsys, monkeypatch, state, "demo", "reset", "--bare")[0] == 0
    root = Root(state / "root")
    boot_id = root.read(facts.BOOT_ID)
    grub = root.p(bootloader.GRUB_DEFAULT)
    grub.write_text(bootloader.set_grub_value(grub.read_text(), "intel_iommu=on iommu=pt default_hugepagesz=1G "
                                                                 "hugepagesz=1G hugepages=288"))
    commands = DemoCommands(root)
    assert commands.which("update-grub") and commands.run(["update-grub"])[0] == 0
    assert "intel_iommu=on" in root.read("boot/grub/grub.cfg")
    root.p(facts.VFIO_MODULES_FILE).write_text("vfio\nvfio_iommu_type1\nvfio_pci\n")
    root.p(facts.NOUVEAU_BLACKLIST_FILE).write_text("blacklist nouveau\noptions nouveau modeset=0\n")
    root.p(facts.SYSCTL_FILE).write_text("kernel.numa_balancing = 0\n")
    assert commands.run(["systemctl", "enable", "nvidia-persistenced"])[0] == 0
    assert commands.run(["update-initramfs", "-u"])[0] == 0
    # live changes a reboot drops: a sysctl write, modprobe of vfio-pci, modprobe -r of nouveau
    kernel = SimulatedKernel(root)
    kernel.write("/" + facts.NUMA_BALANCING, "0")
    kernel.load_module("vfio-pci")
    assert {"vfio", "vfio_pci", "vfio_iommu_type1"} <= _modules(root) and root.isdir("sys/bus/pci/drivers/vfio-pci")
    kernel.unload_module("nouveau")
    assert "nouveau" not in _modules(root)
    disk = _disk(state / "root")

    rc, out, err = _cli(capsys, monkeypatch, state, "demo", "reboot")
    assert rc == 0, err
    assert "intel_iommu=on iommu=pt" in out and "vfio_pci" in out and "nouveau not loaded" in out
    assert "node0 144×1G, node1 144×1G" in out
    assert root.read(facts.CMDLINE).endswith(" ro intel_iommu=on iommu=pt default_hugepagesz=1G hugepagesz=1G "
                                             "hugepages=288")
    assert root.listdir(facts.CLASS_IOMMU) and len(root.listdir(facts.IOMMU_GROUPS)) > 30
    assert all(root.link_name(f"sys/bus/pci/devices/{g}/iommu_group") for g in GPUS)
    mods = _modules(root)
    assert {"vfio", "vfio_pci", "vfio_iommu_type1"} <= mods and "nouveau" not in mods
    assert root.isdir("sys/bus/pci/drivers/vfio-pci") and not root.exists("sys/bus/pci/drivers/nouveau")
    assert [_pages(root, n) for n in (0, 1)] == [144, 144] and root.read(facts.NUMA_BALANCING) == "0"
    assert root.read(facts.BOOT_ID) not in (boot_id, None)
    assert all(g["persistence_mode"] == 1 for g in json.loads((state / "nvml.json").read_text())["gpus"])
    assert _disk(state / "root") == disk  # /etc byte for byte, links included
    assert json.loads((state / "demo-host.json").read_text()) == {"bare": True, "boot_count": 1}

    # the next boot is bare again, with whatever /etc says now
    root.p(facts.NOUVEAU_BLACKLIST_FILE).unlink()
    second = root.read(facts.BOOT_ID)
    assert _cli(capsys, monkeypatch, state, "demo", "reboot")[0] == 0
    assert "nouveau" in _modules(root) and root.read(facts.BOOT_ID) not in (boot_id, second)
    assert ET.parse(state / "libvirt.xml").getroot().find("domain") is None
    # a demo from an older release is regenerated as the variant it was
    (state / "demo-stamp.json").write_text("{}")
    ensure_demo(state)
    assert json.loads((state / "demo-host.json").read_text()) == {"bare": True, "boot_count": 0}
    assert "nouveau" in _modules(root) and root.listdir(facts.IOMMU_GROUPS) == []


# -- what a boot reads and brings up (pure) -------------------------------------------------------------

@pytest.mark.parametrize("words, sysctl, want", [
    ("default_hugepagesz=1G hugepagesz=1G hugepages=288", {}, {(0, GIB): 144, (1, GIB): 144}),
    ("hugepagesz=1G hugepages=5", {}, {(0, GIB): 3, (1, GIB): 2}),  # the first nodes take the remainder
    ("hugepagesz=1G hugepages=0:42,1:10", {}, {(0, GIB): 42, (1, GIB): 10}),
    ("hugepages=512 hugepagesz=1G hugepages=4", {}, {(0, 2048): 256, (1, 2048): 256, (0, GIB): 2, (1, GIB): 2}),
    ("default_hugepagesz=1G hugepages=8", {}, {(0, GIB): 4, (1, GIB): 4}),
    ("", {"vm.nr_hugepages": "1024"}, {(0, 2048): 512, (1, 2048): 512}),
    ("intel_iommu=on", {}, {}),
])
def test_boot_hugepages(words, sysctl, want):
    assert boot_hugepages(words.split(), sysctl, 2) == want


@pytest.mark.parametrize("vendor, words, want", [
    ("GenuineIntel", "intel_iommu=on", True), ("GenuineIntel", "", False),
    ("GenuineIntel", "intel_iommu=on iommu=off", False), ("GenuineIntel", "intel_iommu=on intel_iommu=off", False),
    ("AuthenticAMD", "", True), ("AuthenticAMD", "amd_iommu=off", False),
])
def test_iommu_flags(vendor, words, want):
    spec = replace(small_spec(), cpu=replace(small_spec().cpu, vendor_id=vendor))
    assert iommu_on(spec, words.split()) is want
    assert not iommu_on(replace(spec, acpi_iommu_table=False), words.split())  # no firmware table, no IOMMU


def _boot(**kw) -> BootConfig:
    cfg = dict(cmdline_words=("intel_iommu=on",), modules=(), blacklist=frozenset(), vfio_ids=frozenset(),
               vfio_softdep=False, allow_unsafe_interrupts=False, sysctl={}, persistenced=False, driverctl={},
               mig_pending={})
    cfg.update(kw)
    return BootConfig(**cfg)  # type: ignore[arg-type]


def _drivers(spec) -> dict[str, tuple[str | None, str | None]]:
    return {a: (d.driver, d.driver_override) for a, d, _p, _h in walk(spec) if d.gpu}


def test_boot_spec_binds_by_driverctl_ids_and_the_iommu():
    base = bare_spec(small_spec(gpus=2))
    gpu0, gpu1 = "0000:18:00.0", "0000:19:00.0"
    assert _drivers(boot_spec(base, _boot(), 1)) == {gpu0: ("nvidia", None), gpu1: ("nvidia", None)}
    ids = frozenset({(0x10DE, 0x2330)})
    # ids= takes every card of the model, but only when vfio-pci loads before nvidia
    assert set(_drivers(boot_spec(base, _boot(vfio_ids=ids, modules=("vfio_pci",)), 1)).values()) == {("vfio-pci", None)}
    assert set(_drivers(boot_spec(base, _boot(vfio_ids=ids), 1)).values()) == {("nvidia", None)}
    # driverctl names one device; without the IOMMU vfio-pci cannot take it and it stays unbound
    saved = {gpu1: "vfio-pci"}
    spec = boot_spec(base, _boot(driverctl=saved), 2)
    assert _drivers(spec) == {gpu0: ("nvidia", None), gpu1: ("vfio-pci", "vfio-pci")} and spec.vfio_loaded
    spec = boot_spec(base, _boot(cmdline_words=(), driverctl=saved, vfio_ids=ids, vfio_softdep=True), 2)
    assert _drivers(spec) == {gpu0: ("nvidia", None), gpu1: (None, "vfio-pci")} and not spec.iommu
    assert spec.boot_count == 2 and spec.nouveau_loaded and spec.numa_balancing == 1
    spec = boot_spec(base, _boot(blacklist=frozenset({"nouveau"}), sysctl={"kernel.numa_balancing": "0"},
                                 persistenced=True, modules=("vfio", "br_netfilter")), 3)
    assert not spec.nouveau_loaded and spec.numa_balancing == 0 and spec.persistence_mode
    assert not spec.vfio_loaded and spec.modules_extra == ("br_netfilter", "vfio", "vfio_iommu_type1")


def test_read_boot_config(tmp_path):
    root = tmp_path
    files = {
        "etc/default/grub": 'GRUB_CMDLINE_LINUX="console=ttyS0"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on"\n',
        "etc/modules-load.d/a.conf": "# vfio\nvfio-pci\n; comment\n",
        "etc/modules-load.d/ignored.txt": "nouveau\n",
        "etc/initramfs-tools/modules": "vfio_iommu_type1 dma_entry_limit=1\n",
        "etc/modprobe.d/x.conf": ("blacklist nouveau\ninstall nvidiafb /bin/false\noptions vfio-pci ids=10de:2330,10de:22a3\n"
                                 "softdep nvidia pre: vfio-pci\noptions vfio_iommu_type1 allow_unsafe_interrupts=1\n"),
        "etc/sysctl.d/10-a.conf": "kernel.numa_balancing = 1\n",
        "etc/sysctl.d/90-b.conf": "kernel/numa_balancing=0  # pinned VMs\n",
        "etc/driverctl.d/pci-0000:19:00.0": "vfio-pci\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    boot = read_boot_config(Root(root), {"gpus": [{"address": "0000:18:00.0", "mig": {"current": 0, "pending": 1}}]})
    assert boot.cmdline_words == ("console=ttyS0", "quiet", "intel_iommu=on")
    assert boot.modules == ("vfio_pci", "vfio_iommu_type1")
    assert boot.blacklist == {"nouveau", "nvidiafb"} and boot.vfio_softdep and boot.allow_unsafe_interrupts
    assert boot.vfio_ids == {(0x10DE, 0x2330), (0x10DE, 0x22A3)}
    assert boot.sysctl["kernel.numa_balancing"] == "0" and not boot.persistenced
    assert boot.driverctl == {"0000:19:00.0": "vfio-pci"} and boot.mig_pending == {"0000:18:00.0": True}


# -- reboot of the configured demo ----------------------------------------------------------------------

def _view(seams) -> dict:
    from nodeconsole.console.collector import Collector

    snap = Collector(seams).collect()
    gpus = {g.address: (g.driver, g.owner.kind, g.owner.vms, g.iommu_group, g.mig.mode,
                        tuple((i.profile, i.start) for i in g.mig.instances),
                        tuple(sorted(v.uuid for v in g.vgpu.instances))) for g in snap.gpus}
    vms = {v.name: (v.state, v.vcpus, v.memory_kib, v.pins, v.hostdevs) for v in snap.vms}
    groups = {g.id: g.devices for g in snap.iommu.groups}
    return {"gpus": gpus, "vms": vms, "groups": groups}


def test_reboot_keeps_the_demo_but_its_run_time_changes(tmp_path, capsys, monkeypatch):
    from nodeconsole.console.seams import demo_host

    state = tmp_path / "demo"
    assert _cli(capsys, monkeypatch, state, "demo", "reset")[0] == 0
    root = Root(state / "root")
    before = _view(demo_host(state))
    libvirt = (state / "libvirt.xml").read_bytes()
    (state / "audit.jsonl").write_text("{}\n")
    kernel = SimulatedKernel(root)
    idle, busy_audio = "0000:9a:00.0", "0000:18:00.1"
    kernel.write("/sys/bus/pci/drivers/snd_hda_intel/unbind", busy_audio)  # by hand: lost
    kernel.write(f"/{facts.NODE_DIR}/node0/hugepages/hugepages-1048576kB/nr_hugepages", "100")  # live: lost
    kernel.write("/" + facts.NUMA_BALANCING, "1")  # live: lost
    commands = DemoCommands(root)
    for fn in (idle, "0000:9a:00.1"):  # saved with driverctl: kept
        assert commands.run(["driverctl", "set-override", fn, "vfio-pci"])[0] == 0
    nvml = json.loads((state / "nvml.json").read_text())
    next(g for g in nvml["gpus"] if g["address"] == idle)["mig"]["pending"] = 1  # waits for a reset
    (state / "nvml.json").write_text(json.dumps(nvml))
    disk = _disk(state / "root")

    rc, out, err = _cli(capsys, monkeypatch, state, "demo", "reboot")
    assert rc == 0, err
    assert f"driverctl:      {idle} on vfio-pci" in out and f"MIG mode on:    0000:3a:00.0, {idle}" in out
    after = _view(demo_host(state))
    assert root.link_name(f"sys/bus/pci/devices/{busy_audio}/driver") == "snd_hda_intel"
    assert [_pages(root, n) for n in (0, 1)] == [144, 144] and root.read(facts.NUMA_BALANCING) == "0"
    assert after["vms"] == before["vms"] and after["groups"] == before["groups"]
    assert {a: g for a, g in after["gpus"].items() if a != idle} == \
        {a: g for a, g in before["gpus"].items() if a != idle}
    driver, _kind, _vms, group, _mig, _instances, _vgpu = after["gpus"][idle]
    assert (driver, group) == ("vfio-pci", before["gpus"][idle][3])
    mig = next(g for g in json.loads((state / "nvml.json").read_text())["gpus"] if g["address"] == idle)["mig"]
    assert (mig["current"], mig["pending"], mig["instances"]) == (1, 1, [])  # NVML sees it again on nvidia
    assert (state / "libvirt.xml").read_bytes() == libvirt and (state / "audit.jsonl").read_text() == "{}\n"
    assert _disk(state / "root") == disk
