"""PCI names: the pci.ids parser, its lazy single load, and the built-in fallback."""
from __future__ import annotations

from pathlib import Path

from nodeconsole.console.pciids import CLASSES, PciIds
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs import read_sysfs
from tests.console.sysfs_tree import FakeSys

SAMPLE = """\
#
#	List of PCI ID's
#
# Syntax:
# vendor  vendor_name
#	device  device_name				<-- single tab
#		subvendor subdevice  subsystem_name	<-- two tabs

10de  NVIDIA Corporation
	2330  GH100 [H100 SXM5 80GB]
		10de 16c1  H100 SXM5 80GB
	22a3  GH100 [H100 NVSwitch]
15b3  Mellanox Technologies
# a comment between entries
	101d  MT2892 Family [ConnectX-6 Dx]
ffff  Illegal Vendor ID

# List of known device classes, subclasses and programming interfaces
C 03  Display controller
	00  VGA compatible controller
		00  VGA controller
	02  3D controller
C 04  Multimedia controller
	03  Audio device
C 0c  Serial bus controller
	03  USB controller
		30  XHCI
"""


def test_parses_vendors_devices_and_classes(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    path.write_text(SAMPLE)
    ids = PciIds((path,))
    assert ids.vendor_name(0x10DE) == "NVIDIA Corporation"
    assert ids.device_name(0x10DE, 0x2330) == "GH100 [H100 SXM5 80GB]"
    assert ids.device_name(0x10DE, 0x16C1) == ""  # a subsystem line is no device
    assert ids.device_name(0x15B3, 0x101D) == "MT2892 Family [ConnectX-6 Dx]"
    assert ids.class_name(0x030200) == "3D controller"
    assert ids.class_name(0x0C0330) == "USB controller"
    assert ids.class_name(0x040300) == "Audio device"
    assert ids.source == path


def test_builtin_names_fill_what_the_database_lacks(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    path.write_text(SAMPLE)
    ids = PciIds((path,))
    assert ids.device_name(0x10DE, 0x2335) == "GH100 [H200 SXM 141GB]"  # newer than this database
    assert ids.vendor_name(0x8086) == "Intel Corporation"
    assert ids.class_name(0x060400) == "PCI bridge"
    assert ids.class_name(0x030000) == "VGA compatible controller"


def test_no_database_uses_builtin_names() -> None:
    ids = PciIds((Path("/nonexistent/pci.ids"),))
    assert ids.source is None
    assert ids.vendor_name(0x10DE) == "NVIDIA Corporation"
    assert ids.vendor_name(0x15B3) == "Mellanox Technologies"
    assert ids.vendor_name(0x1234) == ""
    assert ids.class_name(0x020700) == "Infiniband controller"
    assert ids.class_name(0x12FF00) == "Processing accelerators"  # unknown subclass: the base class
    assert ids.class_name(0x7F0000) == ""
    assert all(name for name, _ in CLASSES.values())


def test_loaded_lazily_and_once(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    ids = PciIds((path,))
    path.write_text(SAMPLE.replace("NVIDIA Corporation", "Nvidia From File"))  # after construction
    assert ids.vendor_name(0x10DE) == "Nvidia From File"
    path.write_text(SAMPLE.replace("NVIDIA Corporation", "Changed Later"))
    assert ids.vendor_name(0x10DE) == "Nvidia From File"


def test_a_database_updated_while_running_is_indexed_again(tmp_path: Path) -> None:
    """Devices are parsed per vendor when first asked for, from the file's byte ranges: a file rewritten
    since it was indexed (update-pciids) is indexed again, not read at stale offsets."""
    path = tmp_path / "pci.ids"
    path.write_text(SAMPLE)
    ids = PciIds((path,))
    assert ids.device_name(0x10DE, 0x2330) == "GH100 [H100 SXM5 80GB]"
    longer = SAMPLE.replace("10de  NVIDIA Corporation\n", "10de  NVIDIA Corporation\n\t1234  A New Card Line\n"
                            "\t1235  Another New Card Line\n")
    path.write_text(longer)
    assert ids.device_name(0x15B3, 0x101D) == "MT2892 Family [ConnectX-6 Dx]"  # Mellanox moved in the file
    assert ids.device_name(0x10DE, 0x1235) == "Another New Card Line"


def test_names_come_from_the_console_machine_not_the_captured_root(tmp_path: Path) -> None:
    t = FakeSys(tmp_path)
    t.write("usr/share/misc/pci.ids", SAMPLE.replace("NVIDIA Corporation", "Captured Root Vendor"))
    t.write("usr/share/hwdata/pci.ids", SAMPLE.replace("NVIDIA Corporation", "Captured Root Vendor"))
    t.pci("0000:17:00.0", 0x10DE, 0x2330, 0x030200)
    dev = read_sysfs(Root(tmp_path)).pci_devices[0]
    assert dev.vendor_name != "Captured Root Vendor"
    assert dev.class_name == "3D controller"


def test_a_device_is_found_only_in_its_own_vendors_lines(tmp_path: Path) -> None:
    """Lookups search the file itself: a device id under another vendor, a subsystem line, a vendor on
    the file's very first line and a class section after the vendors are each told apart."""
    path = tmp_path / "pci.ids"
    path.write_text("15b3  Mellanox Technologies\n\t101d  MT2892 Family [ConnectX-6 Dx]\n" + SAMPLE.split("\n", 8)[8])
    ids = PciIds((path,))
    assert ids.vendor_name(0x15B3) == "Mellanox Technologies"  # the first line of the file
    assert ids.device_name(0x15B3, 0x101D) == "MT2892 Family [ConnectX-6 Dx]"
    assert ids.device_name(0x10DE, 0x101D) == ""  # Mellanox's device, not NVIDIA's
    assert ids.device_name(0x10DE, 0x10DE) == ""  # no such device (10de appears only as a subvendor)
    assert ids.device_name(0x10DE, 0x22A3) == "GH100 [H100 NVSwitch]"  # after a subsystem line
    assert ids.device_name(0xFFFF, 0x0000) == ""
    assert ids.class_name(0x0C0330) == "USB controller" and ids.class_name(0x030000) == "VGA compatible controller"


def test_names_follow_a_database_replaced_while_running(tmp_path: Path) -> None:
    """A database replaced (update-pciids writes a new file) is read afresh at the next lookup: vendor
    names too, including a vendor the old file did not have."""
    path = tmp_path / "pci.ids"
    path.write_text(SAMPLE)
    ids = PciIds((path,))
    assert ids.vendor_name(0xABCD) == "" and ids.vendor_name(0x15B3) == "Mellanox Technologies"
    new = tmp_path / "pci.ids.new"
    new.write_text(SAMPLE.replace("15b3  Mellanox Technologies", "15b3  Mellanox Technologies (NVIDIA)")
                   + "abcd  Added Vendor\n\tbeef  Added Device\n")
    new.replace(path)
    assert ids.device_name(0xABCD, 0xBEEF) == "Added Device"  # a new lookup notices the new file
    assert ids.vendor_name(0xABCD) == "Added Vendor"
    assert ids.vendor_name(0x15B3) == "Mellanox Technologies (NVIDIA)"


def test_a_database_cut_short_while_running_gives_no_name_and_no_crash(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    path.write_text(SAMPLE)
    ids = PciIds((path,))
    assert ids.vendor_name(0x10DE) == "NVIDIA Corporation"
    with open(path, "r+b") as f:  # rewritten in place, shorter (cp over it truncates first)
        f.truncate(40)
    assert ids.device_name(0x15B3, 0x101D) == "MT2892 Family [ConnectX-6 Dx]"  # the built-in table
    assert ids.device_name(0x10DE, 0x22A3) == "GH100 [H100 NVSwitch]"  # the built-in table
    assert ids.device_name(0x10DE, 0x1234) == ""
