"""Inside a collection pass (Root.one_pass) the sysfs source reads through the pass's memory of resolved
directories (SysfsRoot's own way): every read, listing and readlink answers exactly what Root's way
answers, hostile links, loops, devices and FIFOs included, and links leading out still read as absent."""
from __future__ import annotations

import os
from pathlib import Path

from nodeconsole.console.pciids import PciIds
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs import read_sysfs
from nodeconsole.console.sources.sysfs_root import SysfsRoot
from tests.console.sysfs_tree import FakeSys
from tests.console.test_sysfs_synthetic import gpu_host

SECRET = "not for the console"


def _hostile_tree(tmp_path: Path) -> FakeSys:
    t = FakeSys(tmp_path / "root")
    gpu_host(t)
    secret = tmp_path / "elsewhere" / "secret"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    gpu = Path(os.path.realpath(t.root / "sys/bus/pci/devices/0000:17:00.0"))
    os.unlink(gpu / "class")
    os.symlink(str(secret), gpu / "class")  # an attribute linking out (absolute)
    os.unlink(gpu / "device")
    os.symlink("vendor", gpu / "device")  # an attribute linking to a sibling: followed
    os.unlink(gpu / "subsystem_vendor")
    os.symlink("/dev/zero", gpu / "subsystem_vendor")  # a device: absent
    os.mkfifo(gpu / "boot_vga")  # a FIFO: absent, never blocks
    t.raw_link("sys/out", "../../elsewhere")  # a directory linking out (relative)
    t.raw_link("sys/loop_a", "loop_b")
    t.raw_link("sys/loop_b", "loop_a")
    t.raw_link("sys/dangling", "../nowhere/at/all")
    t.raw_link("sys/bus/pci/devices/0000:99:00.0", "../../../out")  # a device directory linking out
    return t


def _paths(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            out += [rel, f"{rel}/x", f"{rel}/secret"]
    devices = root / "sys/bus/pci/devices"
    for addr in os.listdir(devices):  # and every attribute through the bus's links, as sysfs reads them
        real = devices / addr
        for name in (os.listdir(real) if real.is_dir() else ["secret"]):
            out += [f"sys/bus/pci/devices/{addr}/{name}", f"sys/bus/pci/devices/{addr}/{name}/x"]
    return out


def _answers(fs: SysfsRoot, paths: list[str]) -> list[tuple[object, ...]]:
    return [(p, fs.read(p), fs.listdir(p), fs.readlink(p)) for p in paths]


def test_reads_in_a_pass_answer_as_root_does(tmp_path: Path) -> None:
    t = _hostile_tree(tmp_path)
    root = Root(t.root)
    paths = _paths(t.root)
    assert len(paths) > 300
    outside = _answers(SysfsRoot(root), paths)  # no pass open: Root's own way
    for _ in range(2):  # a first and a warm walk through the pass's memory
        with root.one_pass():
            assert _answers(SysfsRoot(root), paths) == outside
    got = {p: text for p, text, _, _ in outside}
    gpu = "sys/bus/pci/devices/0000:17:00.0"
    assert got[f"{gpu}/device"] == got[f"{gpu}/vendor"] == "0x10de"
    assert got[f"{gpu}/class"] is None and got[f"{gpu}/subsystem_vendor"] is None and got[f"{gpu}/boot_vga"] is None
    assert got["sys/out/secret"] is None and got["sys/bus/pci/devices/0000:99:00.0/secret"] is None
    assert all(SECRET not in (text or "") for _, text, _, _ in outside)


def test_a_pass_reads_the_same_host(tmp_path: Path) -> None:
    t = _hostile_tree(tmp_path)
    root = Root(t.root)
    ids = PciIds(paths=None)
    plain = read_sysfs(root, ids)
    with root.one_pass():
        assert read_sysfs(root, ids) == plain
    assert any(d.address == "0000:17:00.0" for d in plain.pci_devices)
