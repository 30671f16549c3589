"""What the doctor needs from the sources: a domain's huge page backing (libvirt XML) and each GPU's
persistence mode (NVML)."""
from __future__ import annotations

import pytest

from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.model import NA
from nodeconsole.console.sources.nvml import _persistence


def _domain(backing: str) -> str:
    return f"<domain type='kvm'><name>v</name><memory unit='GiB'>8</memory>{backing}</domain>"


@pytest.mark.parametrize("backing, kib", [
    ("", None),
    ("<memoryBacking><locked/></memoryBacking>", None),
    ("<memoryBacking><hugepages/></memoryBacking>", 0),  # the host's default huge page size
    ("<memoryBacking><hugepages><page size='1' unit='G'/></hugepages></memoryBacking>", 1048576),
    ("<memoryBacking><hugepages><page size='2048'/></hugepages></memoryBacking>", 2048),  # KiB by default
    ("<memoryBacking><hugepages><page size='2' unit='MiB'/></hugepages></memoryBacking>", 2048),
    ("<memoryBacking><hugepages><page size='1048576' unit='KiB' nodeset='1'/>"
     "<page size='2' unit='M'/></hugepages></memoryBacking>", 2048),  # the page for every guest node wins
    ("<memoryBacking><hugepages><page size='x' unit='G'/></hugepages></memoryBacking>", None),
    ("<memoryBacking><hugepages><page size='1' unit='parsecs'/></hugepages></memoryBacking>", None),
])
def test_hugepages_backing(backing, kib):
    assert parse_domain(_domain(backing)).hugepages_kib == kib


def test_persistence_mode():
    assert [_persistence(v) for v in (1, 0, NA, None)] == ["enabled", "disabled", NA, None]


def test_persistence_mode_read_through_nvml():
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml, uninstall
    from nodeconsole.console.pciaddr import parse_pci_address
    from nodeconsole.console.sources.nvml import NvmlSource
    from tests.console.nvml_states import A100, H100, demo_state

    state = demo_state()
    for g in state["gpus"]:
        g["persistence_mode"] = 1 if parse_pci_address(g["address"]) == H100 else 0
    try:
        gpus = {g.address: g for g in NvmlSource(SimulatedNvml(state)).read().gpus}
    finally:
        uninstall()
    assert gpus[H100].persistence_mode == "enabled"
    assert gpus[A100].persistence_mode == "disabled"
