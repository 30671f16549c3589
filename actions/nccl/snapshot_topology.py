"""The NCCL checks' inputs taken from a host snapshot: which GPUs a local run uses, the `Topology` its
result is judged against, and the GPU placement the preflight looks at.

What a snapshot cannot tell stays conservative: NVLink counts as present when NVML reported links joining
every pair of the GPUs (an NVSwitch or bridges), as absent when it did not report them; P2P counts as
possible when NVLink joins them, or when every pair of GPUs meets below a common PCIe switch and no
port between them redirects peer-to-peer traffic (ACS).
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Unpack

from nodeconsole.actions.nccl.acs import ports_between
from nodeconsole.actions.nccl.commands import LocalCommand, LocalCommandOptions, local_command
from nodeconsole.actions.nccl.expect import Expectation, Topology, expected_busbw
from nodeconsole.actions.nccl.finding import Finding, by_severity
from nodeconsole.actions.nccl.pick import (
    DEFAULT_THRESHOLDS,
    HOST_OWNERS,
    GpuCondition,
    Pick,
    Thresholds,
    auto_pick,
    selection_findings,
    skip_findings,
)
from nodeconsole.actions.nccl.preflight import PreflightOptions, PreflightReport, preflight
from nodeconsole.console.model import Gpu, HostSnapshot, nvlink_peers
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams
from nodeconsole.console.topology import is_nic, relation

# An all_reduce_perf to use instead of the one on PATH (console and CLI alike).
BINARY_ENV = "NODECONSOLE_ALL_REDUCE_PERF"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def parse_gpu_list(text: str) -> list[int]:
    """"0,1" or "0, 4" → [0, 1]; ValueError for anything else (empty items, repeats, non-numbers)."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not (item.isascii() and item.isdigit()):
            raise ValueError(f"{text!r} is not a list of GPU indices (like 0,1)")
        if int(item) in out:
            raise ValueError(f"GPU {int(item)} is listed twice")
        out.append(int(item))
    return out


def host_gpus(snap: HostSnapshot) -> tuple[Gpu, ...]:
    """The GPUs a local run can use by default: bound to nvidia and not given to VMs, MIG or vGPU."""
    return tuple(g for g in snap.gpus if g.owner.kind in HOST_OWNERS and g.driver == "nvidia")


def select_gpus(snap: HostSnapshot, indices: Sequence[int] | None = None,
                thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Gpu, ...]:
    """The snapshot's GPUs with these console indices (the automatic pick of idle, healthy host GPUs
    when None); ValueError naming the indices that do not exist."""
    if indices is None:
        return auto_pick(snap, thresholds).gpus
    by_index = {g.index: g for g in snap.gpus}
    missing = [i for i in indices if i not in by_index]
    if missing:
        have = ", ".join(str(i) for i in sorted(by_index)) or "none"
        raise ValueError(f"no GPU {', '.join(map(str, missing))} on this host (GPUs: {have})")
    return tuple(by_index[i] for i in indices)


def cuda_ids(gpus: Sequence[Gpu]) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries: the GPU's UUID (independent of CUDA's device order), else its
    NVML index (the PCI bus order that CUDA_DEVICE_ORDER=PCI_BUS_ID gives too)."""
    out = []
    for g in gpus:
        if g.uuid and g.uuid.startswith("GPU-"):
            out.append(g.uuid)
        elif g.nvml_index is not None:
            out.append(str(g.nvml_index))
        else:
            raise ValueError(f"GPU {g.index} ({g.address}) is not visible to the NVIDIA driver")
    return out


def usability(gpus: Sequence[Gpu]) -> list[Finding]:
    """Selected GPUs the host cannot run NCCL on (in a VM, on vfio-pci, MIG or vGPU)."""
    out = []
    for g in gpus:
        vms = f" (VM {', '.join(g.owner.vms)})" if g.owner.vms else ""
        subject = g.address
        if g.driver != "nvidia" or g.owner.kind in ("vfio", "unbound"):
            out.append(Finding(
                "error", "nccl.gpu_not_host", f"GPU {g.index} ({g.address}) is bound to {g.driver or 'no driver'}"
                f"{vms}", "the host's CUDA only sees GPUs bound to the nvidia driver",
                "pick GPUs owned by the host, or run the check inside the VM that owns this one", subject=subject))
        elif g.owner.kind == "mig":
            out.append(Finding(
                "error", "nccl.gpu_mig", f"GPU {g.index} ({g.address}) has MIG enabled{vms}",
                "NCCL does not communicate between MIG instances, and a process sees one instance at most",
                "pick GPUs with MIG disabled", subject=subject))
        elif g.owner.kind == "vgpu":
            out.append(Finding(
                "error", "nccl.gpu_vgpu", f"GPU {g.index} ({g.address}) serves vGPUs{vms}",
                "the vGPU host driver does not run CUDA programs on the host",
                "run the check inside the VMs, or pick other GPUs", subject=subject))
        elif g.owner.vms:
            out.append(Finding(
                "info", "nccl.gpu_assigned",
                f"GPU {g.index} ({g.address}) is assigned to VM {', '.join(g.owner.vms)}, which is not running",
                "starting that VM takes the GPU away from the host", "nothing to do now", subject=subject))
    return out


def node_socket(snap: HostSnapshot) -> dict[int, int]:
    """NUMA node → CPU package (socket), from the CPUs' topology; the commonest package wins when a
    node's CPUs disagree."""
    counts: dict[int, Counter[int]] = {}
    for c in snap.cpus:
        if c.numa_node is not None and c.package >= 0:
            counts.setdefault(c.numa_node, Counter())[c.package] += 1
    return {n: cnt.most_common(1)[0][0] for n, cnt in sorted(counts.items())}


def gpu_numa(gpus: Sequence[Gpu]) -> dict[str, int | None]:
    return {g.address: g.numa_node for g in gpus}


def nvlink_connected(gpus: Sequence[Gpu]) -> bool | None:
    """Whether NVLink joins every pair of `gpus` (NVML's links: through an NVSwitch or directly); None when
    NVML did not report NVLink for one of them (not read, or a GPU it cannot see), False when it said a GPU
    has none or a pair is not joined."""
    if len(gpus) < 2:
        return False
    if not all(g.nvlinks_read for g in gpus):
        return None
    return all(nvlink_peers(a, b) > 0 for a, b in combinations(gpus, 2))


def p2p_possible(snap: HostSnapshot, gpus: Sequence[Gpu], root: Root | None = None) -> tuple[bool, str]:
    """(possible, why): every pair below a common PCIe switch (nvidia-smi PIX/PXB) and no ACS redirect
    on the ports between them (ACS that cannot be read counts as not blocking)."""
    addrs = [g.address for g in gpus]
    if len(addrs) < 2:
        return True, "fewer than two GPUs: nothing to exchange"
    index = {d.address: d for d in snap.pci_devices}
    far = [(a, b, rel) for a, b in combinations(addrs, 2)
           if (rel := relation(snap, a, b, index)) not in ("PIX", "PXB")]
    if far:
        a, b, rel = far[0]
        return False, f"{a} and {b} are not below a common PCIe switch ({rel})"
    if root is not None:
        blocking = [p for p in ports_between(root, addrs) if p.redirects]
        if blocking:
            return False, f"ACS redirects peer-to-peer traffic at {blocking[0].address}"
    return True, "every pair of GPUs meets below a PCIe switch"


def nic_speeds(snap: HostSnapshot, root: Root | None) -> tuple[float, ...]:
    """Speeds (Gb/s) of the NICs NCCL would use: active InfiniBand/RoCE ports when there are any,
    else Ethernet interfaces of physical NICs that are up. () when unknown."""
    if root is None:
        return ()
    ib = []
    for dev in root.listdir("sys/class/infiniband"):
        for port in root.listdir(f"sys/class/infiniband/{dev}/ports"):
            base = f"sys/class/infiniband/{dev}/ports/{port}"
            if "ACTIVE" not in (root.read(f"{base}/state") or ""):
                continue
            if m := _RATE.match(root.read(f"{base}/rate") or ""):
                ib.append(float(m.group(1)))
    if ib:
        return tuple(ib)
    nics = {d.address for d in snap.pci_devices if is_nic(d)}
    eth = []
    for name in root.listdir("sys/class/net"):
        target = root.link_target(f"sys/class/net/{name}/device")
        if target is None or target.rsplit("/", 1)[-1] not in nics:
            continue
        if (root.read(f"sys/class/net/{name}/operstate") or "") != "up":
            continue
        speed = root.read_int(f"sys/class/net/{name}/speed")
        if speed and speed > 0:  # -1 when the link is down or the driver does not say
            eth.append(speed / 1000)
    return tuple(eth)


def ib_present(snap: HostSnapshot, root: Root | None) -> bool:
    """InfiniBand/RoCE devices registered with the kernel, or an InfiniBand controller on the bus."""
    if root is not None and root.listdir("sys/class/infiniband"):
        return True
    return any(d.class_id >> 8 == 0x0207 for d in snap.pci_devices)


@dataclass(frozen=True)
class LocalPlan:
    """What a single-host check on `gpus` means for this snapshot."""
    gpus: tuple[Gpu, ...]
    topology: Topology
    p2p_reason: str
    gpu_numa: dict[str, int | None] = field(default_factory=dict)
    node_socket: dict[int, int] = field(default_factory=dict)
    nvlink_known: bool = False
    automatic: bool = False  # the GPUs were picked, not named: `skipped` says what was left out
    skipped: tuple[GpuCondition, ...] = ()
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    allow_unhealthy: bool = False  # named GPUs with an unhealthy verdict are taken (a warning, not a refusal)

    @property
    def pick(self) -> Pick:
        return Pick(self.gpus, self.automatic, self.skipped)

    @property
    def expected(self) -> Expectation | None:
        return expected_busbw(self.topology)

    @property
    def addresses(self) -> list[str]:
        return [g.address for g in self.gpus]

    def to_dict(self) -> dict[str, object]:
        t = self.topology
        exp = self.expected
        return {
            "gpus": [{"index": g.index, "address": g.address, "name": g.name, "numa_node": g.numa_node,
                      "owner": g.owner.kind} for g in self.gpus],
            "automatic": self.automatic, "skipped": [c.to_dict() for c in self.skipped],
            "topology": {"gpu_models": list(t.gpu_models), "gpus_per_node": t.gpus_per_node, "nodes": t.nodes,
                         "nvlink": t.nvlink, "nvlink_known": self.nvlink_known, "p2p": t.p2p,
                         "p2p_reason": self.p2p_reason, "nic_gbps": list(t.nic_gbps), "ib_present": t.ib_present},
            "expected": None if exp is None else {"low": exp.low, "high": exp.high, "basis": exp.basis},
        }


def local_plan(snap: HostSnapshot, gpus: Sequence[Gpu] | None = None, root: Root | None = None,
               nvlink: bool | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS,
               allow_unhealthy: bool = False) -> LocalPlan:
    """The topology of a one-node run on `gpus` (default: the automatic pick of the host's idle, healthy
    GPUs, see pick.py). `nvlink` None: taken from the snapshot's NVLinks (every pair joined, see
    nvlink_connected); still unknown when NVML did not report them, which counts as no NVLink."""
    pick = auto_pick(snap, thresholds) if gpus is None else Pick(tuple(gpus), False)
    chosen = pick.gpus
    if nvlink is None:
        nvlink = nvlink_connected(chosen)
    p2p, why = p2p_possible(snap, chosen, root)
    if nvlink and not p2p:
        p2p, why = True, "every pair of GPUs is joined by NVLink"
    topo = Topology(gpu_models=tuple(g.name for g in chosen), gpus_per_node=max(len(chosen), 1), nodes=1,
                    nvlink=bool(nvlink), p2p=p2p, nic_gbps=nic_speeds(snap, root), ib_present=ib_present(snap, root))
    return LocalPlan(chosen, topo, why, gpu_numa(chosen), node_socket(snap), nvlink_known=nvlink is not None,
                     automatic=pick.automatic, skipped=pick.skipped, thresholds=thresholds,
                     allow_unhealthy=allow_unhealthy)


def snapshot_preflight(snap: HostSnapshot, root: Root, env: Mapping[str, str], plan: LocalPlan,
                       **kwargs: Unpack[PreflightOptions]) -> PreflightReport:
    """The preflight for `plan`'s GPUs on this host, with the GPUs' usability and condition (busy,
    unhealthy) added, and what the automatic pick skipped."""
    report = preflight(env, root, host=snap.host.hostname or "this host", gpus=plan.addresses,
                       gpu_numa=plan.gpu_numa, node_socket=plan.node_socket, nvlink=plan.topology.nvlink,
                       **kwargs)
    if not plan.gpus and not snap.gpus:
        report.findings.append(Finding("error", "nccl.no_gpu", "no NVIDIA GPU found on this host",
                                       "the check needs at least one GPU", "run it on a GPU host",
                                       subject="gpus"))
    elif not plan.gpus and plan.automatic and any(not c.unusable for c in plan.skipped):
        report.findings.append(Finding("error", "nccl.no_gpu", "no idle, healthy GPU the host can use for "
                                       "the check", "the GPUs the host drives are busy or unhealthy (see "
                                       "the skipped GPUs); the others are in VMs, on vfio-pci, or serve "
                                       "MIG/vGPU", "name GPUs with --gpus to test them anyway (busy ones "
                                       "with a warning, unhealthy ones with --allow-unhealthy), or run the "
                                       "check inside a VM (--vm)", subject="gpus"))
    elif not plan.gpus:
        report.findings.append(Finding("error", "nccl.no_gpu", "no GPU the host can use for the check",
                                       "every GPU is in a VM, on vfio-pci, or serves MIG/vGPU",
                                       "free a GPU for the host, or run the check inside a VM (--vm)",
                                       subject="gpus"))
    own = usability(plan.gpus) + selection_findings(plan.gpus, plan.thresholds, plan.allow_unhealthy) + skip_findings(plan.pick)
    report.findings = by_severity(own + report.findings)
    return report


def _torch_installed(python: str) -> bool:
    """Cheap stand-in for the CUDA probe when only showing a command: is torch importable here."""
    return python == sys.executable and importlib.util.find_spec("torch") is not None


def local_check_command(plan: LocalPlan, binary: str | None = None, sweep: Sequence[str] | None = None,
                        env: Mapping[str, str] | None = None, *, preview: bool = False,
                        this_machine: bool = True, **kwargs: Unpack[LocalCommandOptions]) -> LocalCommand:
    """The command of the check on `plan`'s GPUs: `binary`, else $NODECONSOLE_ALL_REDUCE_PERF, else
    all_reduce_perf from PATH, else the PyTorch benchmark. ValueError says why none can run. With
    `preview` (the command is only shown) PyTorch is not imported to ask for CUDA, which takes seconds.
    Unless the host is `this_machine`, nothing is looked up on the machine (its PATH, its torch): the
    demo's or a captured host's GPUs are not this machine's, so only an explicit binary can run."""
    if not plan.gpus:
        raise ValueError("no GPU selected")
    chosen = binary or (os.environ if env is None else env).get(BINARY_ENV) or None
    if not this_machine and not chosen:
        raise ValueError("the GPUs of this host are not this machine's (demo or captured host): nothing is "
                         f"looked up on this machine; give a benchmark explicitly (--binary or ${BINARY_ENV})")
    if preview:
        kwargs.setdefault("torch_probe", _torch_installed)
    return local_command(cuda_ids(plan.gpus), chosen, sweep, **kwargs)


@dataclass(frozen=True)
class Preflight:
    """What the preflight found for a snapshot: plain data for the console's NCCL screen."""
    plan: LocalPlan
    findings: list[Finding]
    command: LocalCommand | None  # the command a run would use (None: `command_error` says why)
    command_error: str


def read_preflight(snap: HostSnapshot, seams: Seams, sweep: Sequence[str], env: Mapping[str, str],
                   indices: Sequence[int] | None = None) -> Preflight:
    """Plan, preflight and the command a run would use, for the check on the GPUs with these console
    indices (None: the automatic pick). Reads host files through `seams.root`: the console calls it only
    from a thread worker."""
    plan = local_plan(snap, None if indices is None else select_gpus(snap, indices), seams.root)
    report = snapshot_preflight(snap, seams.root, env, plan)
    try:
        cmd, err = local_check_command(plan, None, sweep, preview=True, this_machine=seams.local_programs), ""
    except ValueError as e:
        cmd, err = None, str(e)
    return Preflight(plan, report.findings, cmd, err)
