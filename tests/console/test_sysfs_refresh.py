"""Between whole reads the collector refreshes the sysfs picture every 30 s while the signs of a change
stay still (sysfs.refresh_sysfs): what can change without moving a sign is read again and equals a whole
read of the same tree; what did not change keeps its objects."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeconsole.console.collector import Collector
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.pciids import PciIds
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams
from nodeconsole.console.sources.sysfs import read_sysfs, refresh_sysfs
from nodeconsole.console.sources.sysfs_nic import is_network


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return ensure_demo(tmp_path_factory.mktemp("refresh") / "demo")


def _real(root: Root, rel: str) -> Path:
    return Path(os.path.realpath(root.p(rel)))


def _ids(path: Path, vendor: str) -> PciIds:
    path.write_text(f"10de  {vendor}\n\t2330  Accelerator H\n")
    return PciIds(paths=(path,))


def test_a_refresh_equals_a_whole_read(demo, tmp_path: Path) -> None:
    root = Root(demo.root)
    ids = PciIds(paths=None)
    last = read_sysfs(root, ids)
    same = refresh_sysfs(root, ids, last)
    assert same == last  # nothing changed: equal, and the same objects
    assert same.pci_devices is last.pci_devices and same.iommu is last.iommu and same.cpus is last.cpus
    assert same.net_functions is last.net_functions

    # what may change without a sign moving: the host name, a node's huge pages, a NIC's port state and
    # link, a non-GPU function's driver_override
    nic = next(d for d in last.pci_devices if is_network(d) and d.link.current_width)
    port_fn = next(n for n in last.net_functions if n.ports)
    port = port_fn.ports[0]
    (root.p("proc/sys/kernel/hostname")).write_text("renamed-node\n")
    pages = next(p for p in sorted(root.p("sys/devices/system/node/node0/hugepages").iterdir()))
    (pages / "nr_hugepages").write_text("7\n")
    (_real(root, f"sys/bus/pci/devices/{port_fn.address}") / f"infiniband/{port.device}/ports/{port.port}/state"
     ).write_text("1: DOWN\n")
    (_real(root, f"sys/bus/pci/devices/{nic.address}") / "current_link_width").write_text("4\n")
    (_real(root, f"sys/bus/pci/devices/{nic.address}") / "driver_override").write_text("vfio-pci\n")
    fresh = refresh_sysfs(root, ids, last)
    whole = read_sysfs(root, ids)
    assert fresh == whole
    assert fresh.host.hostname == "renamed-node"
    got = next(d for d in fresh.pci_devices if d.address == nic.address)
    assert (got.link.current_width, got.driver_override) == (4, "vfio-pci")
    assert next(n for n in fresh.net_functions if n.address == port_fn.address).ports[0].state == "DOWN"
    kept = [d for d in fresh.pci_devices if d.address != nic.address]
    assert all(a is b for a, b in zip(kept, (d for d in last.pci_devices if d.address != nic.address)))

    # the names are looked up again (a pci.ids replaced meanwhile names them anew)
    other = _ids(tmp_path / "pci.ids", "Other Name Inc")
    renamed = refresh_sysfs(root, other, whole)
    assert {d.vendor_name for d in renamed.pci_devices if d.vendor_id == 0x10DE} == {"Other Name Inc"}
    assert renamed == read_sysfs(root, other)


def test_the_collector_refreshes_while_the_signs_are_still(demo) -> None:
    root = Root(demo.root)
    lib = SimulatedNvml.from_file(demo.nvml_state, root=root, privileged=True)
    c = Collector(Seams(root=root, libvirt_uri=demo.libvirt_uri, nvml_lib=lib), sysfs_ttl=1e9, sysfs_full=1e9,
                  sysfs_refresh=0.0)
    first = c.collect(partial=True)
    (root.p("proc/sys/kernel/hostname")).write_text("node-b\n")
    second = c.collect(partial=True)
    assert second.host.hostname == "node-b"
    assert second.pci_devices is first.pci_devices  # refreshed, not read again whole
    gpu = next(g for g in first.gpus if g.driver == "nvidia")
    override = root.p(f"sys/bus/pci/devices/{gpu.address}/driver_override")
    override.write_text("vfio-pci\n")  # a sign: read whole
    third = c.collect(partial=True)
    assert next(d for d in third.pci_devices if d.address == gpu.address).driver_override == "vfio-pci"
    override.write_text("\n")


@pytest.mark.parametrize("during", ["refresh_sysfs", "read_sysfs"])
def test_an_invalidation_during_a_read_is_not_lost(demo, monkeypatch, during) -> None:
    """An action's invalidate() (its own thread) that lands while a poll reads sysfs wins: the poll does
    not keep what it read, and the next one reads the whole tree."""
    from nodeconsole.console.sources import sysfs as sysfs_module

    root = Root(demo.root)
    lib = SimulatedNvml.from_file(demo.nvml_state, root=root, privileged=True)
    c = Collector(Seams(root=root, libvirt_uri=demo.libvirt_uri, nvml_lib=lib), sysfs_ttl=1e9, sysfs_full=1e9,
                  sysfs_refresh=0.0)
    c.collect(partial=True)
    if during == "read_sysfs":
        c._sysfs_at = -1e18  # due for a whole read
    calls: list[str] = []

    def counted(name: str):
        real = getattr(sysfs_module, name)

        def read(*a, **kw):
            data = real(*a, **kw)
            if name == during and during not in calls:
                c.invalidate()  # the action's change lands while this read is under way
            calls.append(name)
            return data
        return read

    for name in ("read_sysfs", "refresh_sysfs"):
        monkeypatch.setattr(sysfs_module, name, counted(name))
    snap = c.collect(partial=True)
    assert len(snap.gpus) == 10 and calls == [during]
    assert c._sysfs is None  # not kept: it may predate the change
    c.collect(partial=True)
    assert calls == [during, "read_sysfs"]  # the next poll read the tree whole
