"""The VM backend the seams hold: the collector reads VMs through it; libvirt's (and the demo's node
file) lists, reads one, and saves and restores a definition exactly."""
from __future__ import annotations

import pytest

pytest.importorskip("libvirt")

from nodeconsole.console.collector import Collector
from nodeconsole.console.demo.generator import generate, small_spec
from nodeconsole.console.model import Vm
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, simulated_host
from nodeconsole.console.sources.types import LibvirtData


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return generate(small_spec(gpus=1), tmp_path_factory.mktemp("vms") / "host")


class _Reader:
    version = "fake 1.0"

    def __init__(self) -> None:
        self.closed = False

    def poll(self) -> LibvirtData:
        return LibvirtData((Vm(name="from-the-backend", uuid="u-1", state="shut off", vcpus=1, memory_kib=1024),))

    def invalidate(self, uuid: str | None = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Backend:
    label, one_state = "fake", False

    def __init__(self) -> None:
        self.readers: list[_Reader] = []

    def reader(self) -> _Reader:
        self.readers.append(_Reader())
        return self.readers[-1]


def test_the_collector_reads_vms_through_the_backend_the_seams_hold(tmp_path):
    backend = _Backend()
    seams = Seams(root=Root(tmp_path), libvirt_uri="fake://host", use_real_nvml=False,
                  vm_backend=lambda uri: backend if uri == "fake://host" else None)  # type: ignore[arg-type,return-value]
    collector = Collector(seams)
    try:
        first = collector.collect()
        collector.collect()
    finally:
        collector.close()
    assert [v.name for v in first.vms] == ["from-the-backend"] and first.sources.libvirt == "ok"
    assert len(backend.readers) == 1  # one reader kept across polls (it caches)
    assert collector.libvirt_version == "fake 1.0"


def test_the_demo_backend_lists_reads_one_and_restores_a_definition_exactly(host):
    seams = simulated_host(Root(host.root), host.libvirt_uri, host.dest)
    backend = seams.open_vm_backend()
    assert backend is not None and backend.one_state
    names = backend.names()
    assert names and backend.vm("no-such-vm") is None
    one = backend.vm(names[0])
    assert one is not None and one.name == names[0]
    before = host.dest.joinpath("libvirt.xml").read_bytes() if host.dest.joinpath("libvirt.xml").exists() else None
    token = backend.save(names[0])
    backend.add_hostdev(names[0], "0000:7f:00.0")
    assert "0000:7f:00.0" in backend.pci_hostdevs(names[0])
    backend.restore(names[0], token)
    assert backend.save(names[0]) == token and "0000:7f:00.0" not in backend.pci_hostdevs(names[0])
    if before is not None:
        assert host.dest.joinpath("libvirt.xml").read_bytes() == before
