"""`--root` reads stay inside the root: links leading out are refused, reads are bounded, never block
and take regular files only; the demo's writes (simulated kernel, files actions write) stay in the demo
root; a partial tree is read for what it holds."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeconsole.console.demo.kernel import SimulatedKernel
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.pciids import PciIds
from nodeconsole.console.root import MAX_READ, Root
from nodeconsole.console.sources.sysfs import read_sysfs
from tests.actions.test_passthrough import changed, tree_state
from tests.console.sysfs_tree import FakeSys
from tests.console.test_sysfs_synthetic import gpu_host

REPO = Path(__file__).resolve().parents[2]
SECRET = "root:$6$secret-hash:19000:0:99999:7:::"


def _snapshot(root: Path) -> subprocess.CompletedProcess:
    code = "import sys; from nodeconsole.console.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "snapshot", "--root", str(root), "--libvirt",
                           "test:///default", "--json"], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.fixture
def tree(tmp_path: Path) -> FakeSys:
    t = FakeSys(tmp_path / "root")
    gpu_host(t)
    return t


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "elsewhere" / "shadow"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    return secret


def test_an_absolute_link_out_of_the_root_is_not_read(tree: FakeSys, outside: Path) -> None:
    host = tree.root / "proc/sys/kernel/hostname"
    host.unlink()
    host.symlink_to(outside)  # ln -sf /etc/shadow ROOT/proc/sys/kernel/hostname
    root = Root(tree.root)
    assert root.read("proc/sys/kernel/hostname") is None
    assert read_sysfs(root, PciIds(paths=None)).host.hostname == ""
    r = _snapshot(tree.root)
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout and json.loads(r.stdout)["host"]["hostname"] == ""


def test_a_relative_link_climbing_out_and_a_linked_directory_are_not_followed(tree: FakeSys, outside: Path) -> None:
    root = Root(tree.root)
    tree.raw_link("proc/sys/kernel/osrelease.lnk", "../../../../elsewhere/shadow")
    os.replace(tree.root / "proc/sys/kernel/osrelease.lnk", tree.root / "proc/sys/kernel/osrelease")
    assert root.read("proc/sys/kernel/osrelease") is None
    (tree.root / "etc").symlink_to(outside.parent, target_is_directory=True)  # a directory link out
    assert root.read("etc/shadow") is None and root.listdir("etc") == [] and not root.isdir("etc")
    assert not root.exists("etc/shadow") and root.readlink("etc/anything") is None


def test_links_inside_the_root_still_read(tree: FakeSys) -> None:
    root = Root(tree.root)
    # sys/bus/pci/devices/ADDR is a relative link into sys/devices; driver/iommu_group are readlink'ed
    assert root.read("sys/bus/pci/devices/0000:17:00.0/vendor") == "0x10de"
    assert root.link_name("sys/bus/pci/devices/0000:17:00.0/iommu_group") is not None
    tree.raw_link("etc/hostname", "/proc/sys/kernel/hostname")  # absolute: means the *machine's* /proc
    assert Root(tree.root).read("etc/hostname") in (None, Root("/").read("proc/sys/kernel/hostname"))
    data = read_sysfs(root, PciIds(paths=None))
    assert {d.address for d in data.pci_devices} >= {"0000:17:00.0"}


def test_an_attribute_pointing_at_a_device_or_a_huge_file_reads_as_absent(tree: FakeSys, tmp_path: Path) -> None:
    root = Root(tree.root)
    cls = tree.root / "sys/bus/pci/devices/0000:17:00.0/class"
    real = Path(os.path.realpath(cls))
    real.unlink()
    os.symlink("/dev/zero", real)  # would read gigabytes
    assert root.read("sys/bus/pci/devices/0000:17:00.0/class") is None
    real.unlink()
    with open(real, "wb") as f:  # a regular file over the cap (sparse: no disk used)
        f.truncate(MAX_READ + 1)
    assert root.read_bytes("sys/bus/pci/devices/0000:17:00.0/class") is None
    assert root.read_bytes("proc/cmdline") is not None


def test_a_fifo_does_not_hang_the_snapshot(tree: FakeSys) -> None:
    cmdline = tree.root / "proc/cmdline"
    cmdline.unlink()
    os.mkfifo(cmdline)
    assert Root(tree.root).read("proc/cmdline") is None
    r = _snapshot(tree.root)  # timeout=60: a blocking open would hang here
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["host"]["cmdline"] == ""


def test_a_partial_pci_directory_still_appears_with_unknown_ids(tree: FakeSys) -> None:
    dev = Path(os.path.realpath(tree.root / "sys/bus/pci/devices/0000:17:00.0"))
    for name in ("vendor", "device", "driver", "iommu_group"):
        os.unlink(dev / name)
    data = read_sysfs(Root(tree.root), PciIds(paths=None))
    d = next(d for d in data.pci_devices if d.address == "0000:17:00.0")
    assert (d.vendor_id, d.device_id, d.driver, d.iommu_group) == (0, 0, None, None)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return Path(ensure_demo(tmp_path / "demo").root)


def test_simulated_kernel_writes_stay_in_the_demo_root(demo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    drivers = demo / "sys/bus/pci/drivers"
    os.rename(drivers, elsewhere)
    drivers.symlink_to(elsewhere, target_is_directory=True)  # ln -s /elsewhere ROOT/sys/bus/pci/drivers
    before = tree_state(elsewhere)
    k = SimulatedKernel(demo)
    with pytest.raises(PermissionError) as e:
        k.write("sys/bus/pci/drivers_probe", "0000:9a:00.0")
    assert e.value.errno == errno.EACCES and "leads out" in str(e.value)
    assert changed(before, tree_state(elsewhere)) == set()


def test_kernel_writes_refuse_a_link_out_of_the_root(tmp_path: Path, outside: Path) -> None:
    from nodeconsole.console.kernel_writer import Kernel

    (tmp_path / "r/sys").mkdir(parents=True)
    (tmp_path / "r/sys/attr").symlink_to(outside)
    with pytest.raises(PermissionError):
        Kernel(tmp_path / "r").write("sys/attr", "x")
    assert outside.read_text() == SECRET + "\n"


def test_one_pass_resolves_every_path_as_realpath_does(tree: FakeSys, outside: Path) -> None:
    """Inside Root.one_pass() each directory is resolved once: every path of the tree (and a child and
    a `..` below each) still resolves exactly as os.path.realpath does — links into sys/devices,
    dangling links, a loop, links climbing out — and links out still read as absent."""
    from nodeconsole.console.root import _resolve_cached

    tree.raw_link("sys/loop_a", "loop_b")
    tree.raw_link("sys/loop_b", "loop_a")
    tree.raw_link("sys/dangling", "../nowhere/at/all")
    tree.raw_link("sys/out", "../../elsewhere")
    tree.raw_link("sys/dotted", "devices/./x/../y")
    dirs: dict[str, str] = {}
    checked = 0
    for dirpath, dirnames, filenames in os.walk(tree.root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            for p in (path, os.path.join(path, "x"), os.path.join(path, "..", "y")):
                assert _resolve_cached(p, dirs) == os.path.realpath(p), p
                checked += 1
    assert checked > 300
    root = Root(tree.root)
    host = tree.root / "proc/sys/kernel/hostname"
    host.unlink()
    host.symlink_to(outside)
    with root.one_pass():
        assert root.read("proc/sys/kernel/hostname") is None
        assert root.read("sys/out/shadow") is None
        assert root.read("sys/bus/pci/devices/0000:17:00.0/vendor") == "0x10de"
        assert root.read("sys/loop_a/x") is None


def test_a_root_replaced_by_a_link_out_reads_nothing(tree: FakeSys, outside: Path) -> None:
    """The root's real path is taken when the Root is made: a root directory replaced afterwards by a
    link out of it (say a capture re-extracted over it by someone else) reads as absent, in a pass and
    out of one, rather than following the new link."""
    root = Root(tree.root)
    assert root.read("sys/bus/pci/devices/0000:17:00.0/vendor") == "0x10de"
    decoy = outside.parent / "sys/bus/pci/devices/0000:17:00.0"
    decoy.mkdir(parents=True)
    (decoy / "vendor").write_text(SECRET + "\n")
    moved = tree.root.parent / "moved-away"
    tree.root.rename(moved)
    tree.root.symlink_to(outside.parent)
    assert root.read("sys/bus/pci/devices/0000:17:00.0/vendor") is None
    with root.one_pass():
        assert root.read("sys/bus/pci/devices/0000:17:00.0/vendor") is None
        assert root.listdir("sys/bus/pci/devices") == []


def test_a_link_that_cannot_be_read_is_not_taken_for_a_directory(tree: FakeSys, monkeypatch) -> None:
    """A component that is a link whose target cannot be read (readlink refused) is not walked into as
    if it were a directory: resolution fails as os.path.realpath does."""
    link = tree.root / "sys/bus/pci/devices/0000:17:00.0"
    assert link.is_symlink()
    real_readlink = os.readlink

    def readlink(path, *a, **k):
        if os.fspath(path) == str(link):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_readlink(path, *a, **k)

    monkeypatch.setattr(os, "readlink", readlink)
    root = Root(tree.root)
    for passing in (False, True):
        with root.one_pass() if passing else contextlib.nullcontext():
            with pytest.raises(PermissionError):
                root.resolve("sys/bus/pci/devices/0000:17:00.0/vendor")
