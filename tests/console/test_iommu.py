"""IOMMU state, group verdicts and blockers: on PciDevice values, and end to end through read_sysfs on
synthetic trees."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from nodeconsole.console.iommu import (
    group_blockers,
    group_verdict,
    has_acs_override,
    how_to_enable,
    iommu_cmdline_flags,
    slot_of,
)
from nodeconsole.console.model import IommuGroup, PciDevice
from nodeconsole.console.pciids import PciIds
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs import read_sysfs
from tests.console.sysfs_tree import FakeSys

BUILTIN = PciIds(paths=None)


def dev(address: str, driver: str | None, class_id: int = 0x030200, group: int = 14, name: str = "",
        boot_vga: bool = False) -> PciDevice:
    return PciDevice(address=address, vendor_id=0x10DE, device_id=0x2330, class_id=class_id, driver=driver,
                     numa_node=0, iommu_group=group, parent=None, class_name=name or BUILTIN.class_name(class_id),
                     is_bridge=(class_id >> 8) == 0x0604, boot_vga=boot_vga)


def by_addr(*devs: PciDevice) -> dict[str, PciDevice]:
    return {d.address: d for d in devs}


GPU = dev("0000:01:00.0", "nvidia")
GPU_AUDIO = dev("0000:01:00.1", "snd_hda_intel", 0x040300)
PCH_AUDIO = dev("0000:00:1f.3", "snd_hda_intel", 0x040300)
ROOT_PORT = dev("0000:00:01.0", "pcieport", 0x060400)


# -- verdicts -------------------------------------------------------------------------------------

def test_group_on_vfio_is_viable() -> None:
    devs = by_addr(dev("0000:01:00.0", "vfio-pci"), dev("0000:01:00.1", "vfio-pci", 0x040300),
                   dev("0000:02:00.0", None, 0x0c0330), dev("0000:03:00.0", "pci-stub", 0x020000))
    assert group_verdict(list(devs), devs, acs_override=False) == (True, "")


def test_one_card_on_host_drivers_is_viable() -> None:
    """Passing the card hands over all its functions: its audio never blocks it."""
    devs = by_addr(GPU, GPU_AUDIO)
    assert group_verdict(list(devs), devs, False) == (True, "")


def test_group_shared_with_a_host_device_names_it() -> None:
    devs = by_addr(GPU, GPU_AUDIO, PCH_AUDIO)
    viable, reason = group_verdict(list(devs), devs, False)
    assert not viable
    assert reason == "shares group 14 with 0000:00:1f.3 Audio device bound to snd_hda_intel"


def test_each_blocking_member_is_named() -> None:
    nic = dev("0000:00:19.0", "e1000e", 0x020000)
    free = dev("0000:00:1a.0", None, 0x0c0320)  # no driver: not serving the host
    devs = by_addr(GPU, PCH_AUDIO, nic, free)
    viable, reason = group_verdict(list(devs), devs, False)
    assert not viable
    assert reason == ("shares group 14 with 0000:00:19.0 Ethernet controller bound to e1000e; "
                      "shares group 14 with 0000:00:1f.3 Audio device bound to snd_hda_intel")


def test_bridges_are_exempt() -> None:
    plx = dev("0000:02:08.0", "pcieport", 0x060400)
    devs = by_addr(ROOT_PORT, plx, dev("0000:03:00.0", "vfio-pci"))
    assert group_verdict(list(devs), devs, False) == (True, "")


def test_two_gpus_behind_a_switch_without_acs() -> None:
    switch_port = dev("0000:1a:00.0", "pcieport", 0x060400)
    devs = by_addr(dev("0000:1b:00.0", "nvidia"), dev("0000:1c:00.0", "nvidia"), switch_port)
    viable, reason = group_verdict(list(devs), devs, False)
    assert not viable and reason == "shares group 14 with 0000:1c:00.0 3D controller bound to nvidia"


def test_boot_vga_warning_keeps_viability() -> None:
    vga = dev("0000:03:00.0", "vfio-pci", 0x030000, boot_vga=True)
    devs = by_addr(vga)
    viable, reason = group_verdict(list(devs), devs, False)
    assert viable
    assert reason == "warning: 0000:03:00.0 is the boot VGA device (the host console draws on it)"


def test_acs_override_warning() -> None:
    devs = by_addr(GPU, PCH_AUDIO)
    viable, reason = group_verdict(IommuGroup(14, tuple(devs), False), devs, True)
    assert not viable
    assert reason.startswith("shares group 14 with 0000:00:1f.3 Audio device bound to snd_hda_intel; ")
    assert reason.endswith("warning: ACS override is on the kernel command line, so this group's isolation "
                           "is not guaranteed by the hardware")


def test_unknown_member_blocks() -> None:
    devs = by_addr(GPU)
    viable, reason = group_verdict(IommuGroup(7, ("0000:01:00.0", "0000:05:00.0"), False), devs, False)
    assert not viable
    assert reason == "shares group 7 with 0000:05:00.0 (not a PCI device this console can read)"


# -- blockers -------------------------------------------------------------------------------------

def test_blockers_for_the_card_being_passed() -> None:
    devs = by_addr(GPU, GPU_AUDIO, PCH_AUDIO, ROOT_PORT, dev("0000:01:00.2", "xhci_hcd", 0x0c0330))
    group = IommuGroup(14, tuple(sorted(devs)), False)
    # passing the GPU takes its audio and USB-C functions with it; the PCH audio is the host's
    assert group_blockers(group, devs, {"0000:01:00.0"}) == ["0000:00:1f.3"]
    # from the PCH audio's side, the whole GPU card would be taken from the host
    assert group_blockers(group, devs, {"0000:00:1f.3"}) == ["0000:01:00.0", "0000:01:00.1", "0000:01:00.2"]
    assert group_blockers(group, devs, {"0000:01:00.0", "0000:00:1f.3"}) == []


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2),
                          st.sampled_from([None, "nvidia", "vfio-pci", "pci-stub", "pcieport", "snd_hda_intel"]),
                          st.sampled_from([0x030200, 0x040300, 0x060400, 0x020000])), min_size=1, max_size=8),
       st.integers(0, 3))
def test_blockers_properties(members, passing_bus) -> None:
    devs = {}
    for bus, fn, driver, cls in members:
        d = dev(f"0000:{bus:02x}:00.{fn}", driver, cls)
        devs[d.address] = d
    passing = {f"0000:{passing_bus:02x}:00.0"}
    blockers = group_blockers(list(devs), devs, passing)
    for a in blockers:  # never a function of the passed card, a bridge, or a device free for vfio
        assert slot_of(a) != f"0000:{passing_bus:02x}:00"
        assert not devs[a].is_bridge and devs[a].driver not in (None, "vfio-pci", "pci-stub", "pcieport")
    for a, d in devs.items():  # and every device the host still uses outside the card is one
        if slot_of(a) not in {slot_of(p) for p in passing} and not d.is_bridge \
                and d.driver not in (None, "vfio-pci", "pci-stub", "pcieport"):
            assert a in blockers


# -- kernel command line and advice ---------------------------------------------------------------

def test_cmdline_flags() -> None:
    cmdline = ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet intel_iommu=on iommu=pt vfio-pci.ids=10de:2330 "
               "iommu.passthrough=1 pcie_acs_override=downstream,multifunction pci=noaer")
    flags = iommu_cmdline_flags(cmdline)
    assert flags == ("intel_iommu=on", "iommu=pt", "vfio-pci.ids=10de:2330", "iommu.passthrough=1",
                     "pcie_acs_override=downstream,multifunction")
    assert has_acs_override(flags)
    assert has_acs_override(iommu_cmdline_flags("pci=noaer,acs_override=downstream"))
    assert not has_acs_override(iommu_cmdline_flags("intel_iommu=on pci=noaer"))


def test_how_to_enable_by_vendor() -> None:
    intel = how_to_enable("intel")
    for words in ("VT-d", "intel_iommu=on iommu=pt", "GRUB_CMDLINE_LINUX", "/etc/default/grub", "update-grub",
                  "reboot"):
        assert words in intel
    amd = how_to_enable("amd")
    assert "AMD-Vi" in amd and "amd_iommu=on iommu=pt" in amd and "intel_iommu" not in amd
    assert "intel_iommu=on" in how_to_enable("") and "amd_iommu=on" in how_to_enable("")
    assert how_to_enable("intel", ("intel_iommu=off",)).startswith("Remove intel_iommu=off")
    firmware = how_to_enable("intel", ("intel_iommu=on", "iommu=pt"))  # the flag is there: firmware is off
    assert "VT-d" in firmware and "firmware" in firmware and "GRUB_CMDLINE_LINUX" not in firmware


# -- end to end through read_sysfs ----------------------------------------------------------------

def _host(t: FakeSys, cmdline: str = "ro quiet intel_iommu=on iommu=pt", vendor: str = "GenuineIntel") -> None:
    t.host(cmdline=cmdline, vendor_id=vendor)
    t.cpu_lists(online="0-1", present="0-1")
    t.cpu(0, 0, 0, "0")
    t.cpu(1, 0, 1, "1")
    t.node(0, "0-1", 1 << 20)


def test_iommu_groups_from_sysfs(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    _host(t)
    t.iommu_unit("dmar0")
    t.pci("0000:00:01.0", 0x8086, 0x1901, 0x060400, driver="pcieport", iommu_group=2)
    t.pci("0000:01:00.0", 0x10DE, 0x2330, 0x030200, parent="0000:00:01.0", driver="vfio-pci", iommu_group=2)
    t.pci("0000:01:00.1", 0x10DE, 0x22A3, 0x040300, parent="0000:00:01.0", driver="vfio-pci", iommu_group=2)
    t.pci("0000:02:00.0", 0x10DE, 0x2330, 0x030200, driver="nvidia", iommu_group=14)
    t.pci("0000:00:1f.3", 0x8086, 0xA348, 0x040300, driver="snd_hda_intel", iommu_group=14)
    t.pci("0000:00:02.0", 0x8086, 0x3E92, 0x030000, driver="i915", iommu_group=0, extra={"boot_vga": "1"})
    iommu = read_sysfs(Root(tmp_path), ids=BUILTIN).iommu
    assert iommu.enabled and iommu.how_to_enable == ""
    assert iommu.cmdline_flags == ("intel_iommu=on", "iommu=pt") and not iommu.acs_override
    groups = {g.id: g for g in iommu.groups}
    assert list(groups) == [0, 2, 14]
    assert groups[2].devices == ("0000:00:01.0", "0000:01:00.0", "0000:01:00.1")
    assert groups[2].viable and groups[2].reason == ""
    assert not groups[14].viable
    assert groups[14].reason == "shares group 14 with 0000:00:1f.3 Audio device bound to snd_hda_intel"
    assert groups[0].viable and "boot VGA" in groups[0].reason


def test_acs_override_from_cmdline(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    _host(t, cmdline="ro intel_iommu=on pcie_acs_override=downstream,multifunction")
    t.pci("0000:01:00.0", driver="vfio-pci", iommu_group=5)
    iommu = read_sysfs(Root(tmp_path), ids=BUILTIN).iommu
    assert iommu.acs_override
    assert iommu.groups[0].viable and "ACS override" in iommu.groups[0].reason


def test_iommu_off_gives_advice(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    _host(t, cmdline="ro quiet", vendor="AuthenticAMD")
    t.pci("0000:01:00.0", driver="nvidia")
    (tmp_path / "sys/kernel/iommu_groups").mkdir(parents=True)  # present but empty: IOMMU off
    iommu = read_sysfs(Root(tmp_path), ids=BUILTIN).iommu
    assert not iommu.enabled and iommu.groups == ()
    assert "amd_iommu=on iommu=pt" in iommu.how_to_enable and "GRUB_CMDLINE_LINUX" in iommu.how_to_enable
    assert read_sysfs(Root(tmp_path), ids=BUILTIN).pci_devices[0].iommu_group is None


def test_iommu_unit_alone_means_enabled(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    _host(t)
    t.iommu_unit("ivhd0")
    assert read_sysfs(Root(tmp_path), ids=BUILTIN).iommu.enabled
