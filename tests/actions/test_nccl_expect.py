"""Reference bandwidths by topology and the verdict on a run's output."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.actions.nccl.expect import ERROR_RATIO, WARN_RATIO, Topology, expected_busbw, verdict
from nodeconsole.actions.nccl.finding import Finding, by_severity
from nodeconsole.actions.nccl.parse import Cell, Device, ParsedOutput, Row, Transport, parse_text

A100 = ("NVIDIA A100-SXM4-40GB",)
H100 = ("NVIDIA H100 80GB HBM3",)


def _codes(findings: list[Finding]) -> dict[str, str]:
    return {f.code: f.severity for f in findings}


def _parsed(name: str, shared_dir: Path) -> ParsedOutput:
    return parse_text((shared_dir / "nccl" / name).read_text())


@pytest.mark.parametrize("topo,nvls,low,high", [
    (Topology(A100 * 8, 8, nvlink=True), False, 230, 230),
    (Topology(H100, 8, nvlink=True), False, 370, 370),
    (Topology(("NVIDIA H200",), 8, nvlink=True), True, 475, 475),
    (Topology(("NVIDIA H100 PCIe",) * 2, 2, nvlink=True), False, 116, 116),
    (Topology(("NVIDIA H100 NVL",), 2, nvlink=True), False, 116, 116),
    (Topology(("NVIDIA GeForce RTX 4090",), 2, p2p=True), False, 20, 26),
    (Topology(("NVIDIA H100 PCIe",), 2, p2p=True), False, 20, 26),  # no bridge: plain PCIe
    (Topology(("NVIDIA GeForce RTX 2080 Ti",), 2, p2p=False), False, 4, 4),
    (Topology(("NVIDIA GH200 120GB",), 1, nodes=2, nic_gbps=(200,)), False, 24, 24),
    (Topology(("NVIDIA GH200 120GB",), 1, nodes=4, nic_gbps=(100,)), False, 12, 12),
    (Topology(H100, 8, nodes=2, nvlink=True, nic_gbps=(400,) * 8), False, 370, 370),  # NICs outrun NVLink ring
    (Topology(H100, 8, nodes=2, nvlink=True, nic_gbps=(200, 200)), False, 48, 48),  # two NICs limit it
])
def test_expected_busbw(topo: Topology, nvls: bool, low: float, high: float) -> None:
    exp = expected_busbw(topo, nvls)
    assert exp is not None and (exp.low, exp.high) == (low, high)
    assert str(low) in str(exp).replace(".0", "")


@pytest.mark.parametrize("topo", [
    Topology(A100, 1),  # one GPU: busbw is 0 by definition
    Topology(("Tesla V100-SXM2-32GB",), 8, nvlink=True),  # NVLink system without a reference figure
    Topology(H100, 8, nodes=2, nvlink=True),  # multi-node, NIC speeds unknown
])
def test_no_reference_figure(topo: Topology) -> None:
    assert expected_busbw(topo) is None


def test_real_outputs_on_their_own_topologies_are_clean(shared_dir: Path) -> None:
    cases = {
        "1.txt": Topology(A100 * 8, 8, nvlink=True),
        "3.txt": Topology(("NVIDIA GeForce RTX 2080 Ti",) * 2, 2, p2p=False),
        "4.txt": Topology(("NVIDIA A100-SXM4-80GB",) * 2, 2, nvlink=True),
    }
    for name, topo in cases.items():
        found = verdict(_parsed(name, shared_dir), topo)
        assert _codes(found) == {"nccl.bandwidth_ok": "info"}, (name, found)


def test_corruption_in_5_is_an_error(shared_dir: Path) -> None:
    topo = Topology(("NVIDIA GH200 120GB",), 1, nodes=2, nic_gbps=(200,))
    found = verdict(_parsed("5.txt", shared_dir), topo)
    codes = _codes(found)
    assert codes["nccl.corruption"] == "error"
    assert codes["nccl.bandwidth_ok"] == "info"  # 22.87 of ≈24: the network is fine, the data is not
    corrupt = next(f for f in found if f.code == "nccl.corruption")
    assert "128 wrong values" in corrupt.message and "1048576" in corrupt.message
    assert corrupt.reason and corrupt.fix
    assert by_severity(found)[0].code == "nccl.corruption"
    assert corrupt.to_problem().severity == "error" and corrupt.reason in corrupt.to_problem().message


def test_bandwidth_thresholds(shared_dir: Path) -> None:
    # 3.txt peaks at 4 GB/s: fine without P2P, far too low where PCIe P2P (≈20) was possible
    p3 = _parsed("3.txt", shared_dir)
    assert _codes(verdict(p3, Topology(("x",), 2, p2p=True)))["nccl.bandwidth_low"] == "error"
    # 5.txt peaks at 22.87: with 2×200 Gb/s expected ≈48 → 48% → warning
    p5 = _parsed("5.txt", shared_dir)
    assert _codes(verdict(p5, Topology(("g",), 1, nodes=2, nic_gbps=(200, 200))))["nccl.bandwidth_low"] == "warning"
    # 1.txt peaks at 230.84 against H100's 370: 62% → still fine; against NVLS 475: 49% → warning
    p1 = _parsed("1.txt", shared_dir)
    assert "nccl.bandwidth_ok" in _codes(verdict(p1, Topology(H100, 8, nvlink=True)))
    p1.nvls_channels = 16
    assert _codes(verdict(p1, Topology(H100, 8, nvlink=True)))["nccl.bandwidth_low"] == "warning"


@pytest.mark.parametrize("peak,severity", [(230.0, "info"), (138.0, "info"), (137.9, "warning"),
                                           (69.0, "warning"), (68.9, "error")])
def test_threshold_edges(peak: float, severity: str) -> None:
    """Against A100's 230 GB/s: 60 % (138) is still fine, 30 % (69) still a warning."""
    assert (WARN_RATIO, ERROR_RATIO) == (0.6, 0.3)
    row = Row(1 << 30, 1 << 28, "float", "sum", -1, Cell(1.0, peak, peak, 0), None)
    found = verdict(ParsedOutput(rows=[row], avg_busbw=1.0), Topology(A100, 8, nvlink=True))
    assert [f.severity for f in found if f.code.startswith("nccl.bandwidth")] == [severity]


def test_small_messages_give_no_speed_verdict(shared_dir: Path) -> None:
    p = _parsed("3.txt", shared_dir)
    p.rows = [r for r in p.rows if r.size < 1 << 20]
    assert _codes(verdict(p, Topology(("x",), 2, p2p=True))) == {"nccl.small_messages": "info"}


def _two_host_output(kind: str, detail: str, same_host: bool) -> ParsedOutput:
    hosts = ("a", "a") if same_host else ("a", "b")
    devs = [Device(r, hosts[r], 0, "0x07", 7, None, "NVIDIA H100 80GB HBM3") for r in range(2)]
    row = Row(1 << 30, 1 << 28, "float", "sum", -1, Cell(1.0, 300, 300, 0), Cell(1.0, 300, 300, 0))
    links = [Transport(c, s, 1 - s, kind, detail) for c in range(4) for s in (0, 1)]
    return ParsedOutput(rows=[row], avg_busbw=300, devices=devs, transports=links, networks=["Socket"])


def test_p2p_not_used_between_gpus_of_one_host() -> None:
    shm = _two_host_output("SHM", "SHM/direct/direct", same_host=True)
    found = verdict(shm, Topology(H100, 2, p2p=True))
    f = next(f for f in found if f.code == "nccl.p2p_unused")
    assert f.severity == "warning" and "8 of 8" in f.message and "SHM" in f.message
    assert "nccl.p2p_unused" not in _codes(verdict(shm, Topology(H100, 2, p2p=False)))
    # the same transport between two hosts is how it should be
    apart = _two_host_output("NET/Socket", "NET/Socket/0", same_host=False)
    assert "nccl.p2p_unused" not in _codes(verdict(apart, Topology(H100, 1, nodes=2, p2p=True)))
    # network transport between GPUs of one host while P2P is possible
    net = _two_host_output("NET/IB", "NET/IB/0/GDRDMA", same_host=True)
    assert "nccl.p2p_unused" in _codes(verdict(net, Topology(H100, 2, p2p=True)))


def test_socket_while_ib_present(shared_dir: Path) -> None:
    apart = _two_host_output("NET/Socket", "NET/Socket/0", same_host=False)
    topo = Topology(H100, 1, nodes=2, ib_present=True, nic_gbps=(400,))
    f = next(f for f in verdict(apart, topo) if f.code == "nccl.socket_with_ib")
    assert f.severity == "warning" and "8 connections over sockets" in f.message
    assert "nccl.socket_with_ib" not in _codes(verdict(apart, Topology(H100, 1, nodes=2, nic_gbps=(400,))))
    # 4.txt: one host, NCCL found no IB device and picked sockets, but no traffic crossed them
    p4 = _parsed("4.txt", shared_dir)
    found = verdict(p4, Topology(("NVIDIA A100-SXM4-80GB",), 2, nvlink=True, ib_present=True))
    f = next(f for f in found if f.code == "nccl.socket_with_ib")
    assert f.severity == "info" and "No device found" in f.message


def test_no_rows_and_warn_lines() -> None:
    p = parse_text("h:1:1 [0] NCCL WARN Cuda failure 'out of memory'\n")
    codes = _codes(verdict(p))
    assert codes == {"nccl.no_rows": "error", "nccl.warn": "warning"}
    assert verdict(parse_text("")) and _codes(verdict(parse_text(""))) == {"nccl.no_rows": "error"}


def test_finding_severity_is_checked() -> None:
    with pytest.raises(ValueError):
        Finding("fatal", "x", "m", "r", "f")
