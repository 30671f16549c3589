"""Round trip: the sysfs source reads a generated host back into what its spec describes, and follows the
simulated kernel's changes."""
from __future__ import annotations

import pytest

from nodeconsole.console.demo.generator import demo_spec, generate
from nodeconsole.console.demo.kernel import SimulatedKernel
from nodeconsole.console.demo.spec import walk
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs import read_sysfs

IDLE = "0000:9a:00.0"


@pytest.fixture
def host(tmp_path):
    return generate(demo_spec(), tmp_path)


def test_gpu_drivers_groups_and_topology_read_back(host):
    spec = demo_spec()
    data = read_sysfs(Root(host.root))
    assert len(data.cpus) == spec.cpu.count and len(data.numa_nodes) == spec.cpu.nodes
    assert data.host.hostname == spec.hostname and data.iommu.enabled
    by_addr = {d.address: d for d in data.pci_devices}
    expected = {a: (dev.driver, hb.numa_node, dev.link) for a, dev, _p, hb in walk(spec) if dev.gpu}
    assert len(expected) == 10
    for addr, (driver, node, link) in expected.items():
        got = by_addr[addr]
        assert (got.driver, got.numa_node) == (driver, node), addr
        assert (got.link.current_width, got.link.max_width) == (link.width, link.max_width or link.width)
        group = data.iommu.groups[[g.id for g in data.iommu.groups].index(got.iommu_group)]
        companion = addr[:-1] + "1"
        assert companion in group.devices  # GPU and its audio function share a group
    bad = [g for g in data.iommu.groups if not g.viable and set(g.devices) & set(expected)]
    assert len(bad) == 1 and "nvme" in bad[0].reason and "mlx5_core" in bad[0].reason
    assert {i.uuid for i in data.vgpu_instances} >= {m.uuid for a, d, _p, _h in walk(spec) if d.gpu
                                                    for m in d.gpu.mdevs}


def test_sysfs_source_follows_the_simulated_kernel(host):
    k = SimulatedKernel(host.root)
    for addr in (IDLE, IDLE[:-1] + "1"):
        k.write(f"/sys/bus/pci/devices/{addr}/driver_override", "vfio-pci")
        k.write(f"/sys/bus/pci/devices/{addr}/driver/unbind", addr)
        k.write("/sys/bus/pci/drivers_probe", addr)
    data = read_sysfs(Root(host.root))
    gpu = next(d for d in data.pci_devices if d.address == IDLE)
    assert gpu.driver == "vfio-pci" and gpu.driver_override == "vfio-pci"
    group = next(g for g in data.iommu.groups if g.id == gpu.iommu_group)
    assert group.viable
