"""What an all_reduce_perf run should have shown on a given topology, and what its output says is wrong.

The reference figures are large-message all_reduce bus bandwidths measured on known systems; a run far
below them points at a setup problem (P2P off, ACS, wrong NIC, flattened topology in a VM), not at NCCL.
"""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.actions.nccl.finding import Finding
from nodeconsole.actions.nccl.parse import ParsedOutput

# Below this largest message size the sweep never reaches the bandwidth plateau: no verdict on speed.
LARGE_MESSAGE = 64 << 20
WARN_RATIO = 0.6
ERROR_RATIO = 0.3
GBPS_PER_NIC_GBIT = 24 / 200  # ≈ 24 GB/s busbw per 200 Gb/s NIC (12 per 100 Gb/s)


@dataclass(frozen=True)
class Topology:
    """A small description of what the test ran on; plain data so any caller can fill it."""
    gpu_models: tuple[str, ...] = ()  # GPU names as NVML or nccl-tests print them ("NVIDIA H100 80GB HBM3")
    gpus_per_node: int = 1
    nodes: int = 1
    nvlink: bool = False  # GPUs of a node connected by NVLink (NVSwitch or bridge)
    p2p: bool = True  # PCIe/NVLink peer-to-peer possible between the node's GPUs
    nic_gbps: tuple[float, ...] = ()  # speeds of one node's NICs used by NCCL, in Gb/s
    ib_present: bool = False  # InfiniBand/RoCE devices exist on the hosts

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Expectation:
    low: float  # GB/s; verdicts compare against the low end of a range
    high: float
    basis: str  # which reference figure this is

    def __str__(self) -> str:
        rng = f"{self.low:g}" if self.low == self.high else f"{self.low:g}–{self.high:g}"
        return f"≈{rng} GB/s ({self.basis})"


def _family(models: tuple[str, ...]) -> str:
    """"a100", "h100" (SXM H100/H200/GH200), "h100pcie" (PCIe / NVL cards) or "" for anything else."""
    names = [m.upper() for m in models]
    if not names:
        return ""
    if all("A100" in n for n in names):
        return "a100"
    if all(("H100" in n or "H200" in n) for n in names):
        if any("PCIE" in n or "NVL" in n.replace("NVLINK", "") for n in names):
            return "h100pcie"
        return "h100"
    return ""


def expected_busbw(topo: Topology, nvls: bool = False) -> Expectation | None:
    """Expected peak all_reduce busbw for large messages, None when there is no reference figure (one
    GPU, an unknown NVLink system, or a multi-node run whose NIC speeds are unknown)."""
    if topo.total_gpus < 2:
        return None  # busbw = algbw × 2(n−1)/n is 0 for one rank
    intra: Expectation | None = None
    if topo.gpus_per_node >= 2:
        fam = _family(topo.gpu_models)
        if topo.nvlink:
            if fam == "a100":
                intra = Expectation(230, 230, "A100 on NVSwitch")
            elif fam == "h100":
                intra = (Expectation(475, 475, "H100/H200 with NVLink SHARP (NVLS)") if nvls
                         else Expectation(370, 370, "H100/H200 on NVSwitch, ring"))
            elif fam == "h100pcie":
                intra = Expectation(116, 116, "2×H100 PCIe with NVLink bridge")
        elif topo.p2p:
            intra = Expectation(20, 26, "GPUs on PCIe with P2P")
        else:
            intra = Expectation(4, 4, "GPUs without P2P, through host memory")
        if intra is None:
            return None
    if topo.nodes <= 1:
        return intra
    if not topo.nic_gbps:
        return None
    net_gbps = sum(topo.nic_gbps)
    net = GBPS_PER_NIC_GBIT * net_gbps
    net_exp = Expectation(round(net, 1), round(net, 1), f"network, {net_gbps:g} Gb/s of NICs per node")
    return net_exp if intra is None or net_exp.low <= intra.low else intra


def verdict(parsed: ParsedOutput, topo: Topology | None = None) -> list[Finding]:
    """Findings about one run: corruption, wrong transports, bandwidth against the topology."""
    out: list[Finding] = []
    if not parsed.rows:
        out.append(Finding("error", "nccl.no_rows", "the test printed no results",
                           "without rows nothing was measured; the run failed or was stopped early",
                           "look at the NCCL WARN lines and stderr; rerun with NCCL_DEBUG=INFO"))
    if parsed.corrupted:
        out.append(_corruption(parsed))
    for line in parsed.errors[:1]:
        out.append(Finding("warning", "nccl.warn", f"the run reported: {line.strip()}",
                           "NCCL and nccl-tests print these lines only when something went wrong",
                           "read the first warning first; later ones usually follow from it"))
    if topo is not None:
        out += _socket_with_ib(parsed, topo)
        out += _p2p_unused(parsed, topo)
        out += _bandwidth(parsed, topo)
    return out


def _corruption(parsed: ParsedOutput) -> Finding:
    bad = [r.size for r in parsed.rows if r.wrong]
    where = f" at sizes {', '.join(str(s) for s in bad[:5])}" if bad else ""
    oob = f"; out-of-bounds values: {parsed.oob_count}" if parsed.oob_count else ""
    return Finding(
        "error", "nccl.corruption",
        f"DATA CORRUPTION: {parsed.wrong_total} wrong values{where}{oob}",
        "the test checks every result; wrong values mean a GPU, NVLink/PCIe link or NIC delivered bad "
        "data, which silently breaks training",
        "take these GPUs out of service; check the kernel log for Xid errors and `nvidia-smi -q -d ECC`, "
        "rerun pairwise to find the faulty GPU or link, then reseat or replace it")


def _socket_with_ib(parsed: ParsedOutput, topo: Topology) -> list[Finding]:
    socket_links = sum(1 for t in parsed.transports if t.kind == "NET/Socket")
    if not topo.ib_present or not (socket_links or "Socket" in parsed.networks):
        return []
    severity = "warning" if socket_links or topo.nodes > 1 else "info"
    seen = "NCCL reported 'NET/IB : No device found'" if parsed.ib_device_found is False else \
        "NCCL chose its socket (TCP) transport"
    return [Finding(
        severity, "nccl.socket_with_ib",
        f"{seen} although InfiniBand/RoCE devices are present"
        + (f" ({socket_links} connections over sockets)" if socket_links else ""),
        "TCP sockets carry a fraction of the bandwidth of RDMA and cost CPU time",
        "unset NCCL_IB_DISABLE, check NCCL_IB_HCA, make /dev/infiniband and libibverbs/rdma-core "
        "visible to the process (containers need the devices passed in)")]


def _p2p_unused(parsed: ParsedOutput, topo: Topology) -> list[Finding]:
    if not topo.p2p or not parsed.transports:
        return []
    hosts = parsed.rank_hosts()

    def same_host(a: int, b: int) -> bool:
        if a in hosts and b in hosts:
            return hosts[a] == hosts[b]
        return topo.nodes == 1

    bad = [t for t in parsed.transports
           if (t.kind == "SHM" or t.kind.startswith("NET/")) and same_host(t.src, t.dst)]
    if not bad:
        return []
    kinds = ", ".join(sorted({t.kind for t in bad}))
    return [Finding(
        "warning", "nccl.p2p_unused",
        f"{len(bad)} of {len(parsed.transports)} connections between GPUs of one host use {kinds} "
        "instead of P2P",
        "the topology allows direct GPU-to-GPU transfers; going through host memory or the NIC costs "
        "most of the bandwidth",
        "unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, disable ACS redirect on the PCIe switch ports between "
        "the GPUs, and in a VM give NCCL the real topology (NCCL_TOPO_FILE)")]


def _bandwidth(parsed: ParsedOutput, topo: Topology) -> list[Finding]:
    peak = parsed.peak_busbw
    if peak is None:
        return []
    exp = expected_busbw(topo, nvls=bool(parsed.nvls_channels))
    if exp is None and topo.total_gpus < 2:
        return [Finding("info", "nccl.one_gpu_run", "bandwidth not judged: the check ran on one GPU",
                        "one rank moves no data between GPUs (its bus bandwidth is 0 by definition)",
                        "run it on two or more GPUs to measure their links")]
    if exp is None:
        return []
    largest = max(r.size for r in parsed.rows)
    if largest < LARGE_MESSAGE:
        return [Finding("info", "nccl.small_messages",
                        f"largest message {largest} bytes: too small to judge bandwidth against {exp}",
                        "bus bandwidth reaches its plateau only with large messages",
                        "run with -e 1G (or at least 256M)")]
    ratio = peak / exp.low
    text = f"peak bus bandwidth {peak:g} GB/s against expected {exp}: {ratio:.0%}"
    if ratio >= WARN_RATIO:
        return [Finding("info", "nccl.bandwidth_ok", text, "within the range of the reference systems",
                        "nothing to do")]
    severity = "error" if ratio < ERROR_RATIO else "warning"
    return [Finding(
        severity, "nccl.bandwidth_low", text,
        "a large shortfall points at the setup: P2P disabled or redirected (ACS), the wrong NIC or "
        "transport, a downtrained PCIe link, CPU/NUMA placement, or a VM that hides the real PCI topology",
        "run the NCCL preflight; check `nvidia-smi topo -m` and `nvidia-smi nvlink -s`, the PCIe link "
        "width, and in a VM pass NCCL a topology file (NCCL_TOPO_FILE)")]
