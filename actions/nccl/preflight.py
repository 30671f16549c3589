"""NCCL preflight: what is likely to make a multi-GPU job slow or hang, found without running one.

All inputs are plain data (an environment mapping, a `Root`, lists and dicts) so the caller can feed
them from the live host, a captured tree or a snapshot: the NCCL environment, network and InfiniBand
devices, installed NCCL versions (and their drift against other hosts), ACS on the PCIe path between
GPUs, and GPUs spread over NUMA nodes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from nodeconsole.actions.nccl.acs import check_acs
from nodeconsole.actions.nccl.finding import Finding, by_severity
from nodeconsole.actions.nccl.libs import DEFAULT_SITE_PACKAGES, DEFAULT_SYSTEM_DIRS, NcclLib, find_nccl_libs
from nodeconsole.console.root import Root

RECOMMENDED_IB_TIMEOUT = 22
RECOMMENDED_IB_RETRY_CNT = 7
# Interfaces NCCL may pick by default that do not lead to other hosts (libvirt's NAT bridge, VM taps,
# container plumbing).
VIRTUAL_PREFIXES = ("virbr", "vnet", "veth", "tap", "tun", "br-", "cni", "flannel", "cali", "kube", "docker",
                    "lo")
P2P_LEVELS = {"LOC": 0, "NVL": 1, "PIX": 1, "PXB": 2, "PHB": 3, "SYS": 5}


@dataclass(frozen=True)
class IfList:
    """NCCL's interface-list syntax: "eth,ib" (prefixes), "=eth0" (exact names), "^docker,lo"
    (everything except); "^=" combines both. Entries may carry ":port" (used for HCAs)."""
    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]  # (name or prefix, port or None for any)

    @classmethod
    def parse(cls, spec: str) -> IfList:
        s = spec.strip()
        exclude = s.startswith("^")
        s = s[1:] if exclude else s
        exact = s.startswith("=")
        s = s[1:] if exact else s
        entries = []
        for item in s.split(","):
            item = item.strip()
            if not item:
                continue
            name, _, port = item.partition(":")
            entries.append((name, int(port) if port.isdigit() else None))
        return cls(exclude, exact, tuple(entries))

    def entry_matches(self, entry: tuple[str, int | None], name: str, port: int | None = None) -> bool:
        ref, ref_port = entry
        hit = name == ref if self.exact else name.startswith(ref)
        return hit and (port is None or ref_port is None or port == ref_port)

    def selects(self, name: str, port: int | None = None) -> bool:
        hit = any(self.entry_matches(e, name, port) for e in self.entries)
        return hit != self.exclude


def default_interfaces(names: Sequence[str]) -> list[str]:
    """What NCCL uses when NCCL_SOCKET_IFNAME is unset: ib* first, else all but docker* and lo."""
    ib = [n for n in names if n.startswith("ib")]
    return ib or [n for n in names if not n.startswith(("docker", "lo"))]


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str  # "ACTIVE", "DOWN", ... ("" when unreadable)
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)


@dataclass
class PreflightReport:
    findings: list[Finding] = field(default_factory=list)
    libraries: list[NcclLib] = field(default_factory=list)
    interfaces: dict[str, str] = field(default_factory=dict)  # name → operstate
    ib_ports: list[IbPort] = field(default_factory=list)


def read_interfaces(root: Root) -> dict[str, str]:
    """Network interfaces and their operstate ("up", "down", "unknown", "" when unreadable)."""
    return {n: (root.read(f"sys/class/net/{n}/operstate") or "") for n in root.listdir("sys/class/net")}


def read_ib_ports(root: Root) -> list[IbPort]:
    out = []
    for dev in root.listdir("sys/class/infiniband"):
        for port in root.listdir(f"sys/class/infiniband/{dev}/ports"):
            if not port.isdigit():
                continue
            base = f"sys/class/infiniband/{dev}/ports/{port}"
            state = (root.read(f"{base}/state") or "").split(":")[-1].strip()
            out.append(IbPort(dev, int(port), state, root.read(f"{base}/link_layer") or ""))
    return out


def _usable(state: str) -> bool:
    # "unknown" is normal for interfaces without carrier detection (tun, some virtual NICs).
    return state in ("up", "unknown", "")


def check_socket_ifname(env: Mapping[str, str], interfaces: Mapping[str, str]) -> list[Finding]:
    spec = env.get("NCCL_SOCKET_IFNAME", "").strip()
    names = sorted(interfaces)
    if not names:
        return []
    have = ", ".join(names)
    if not spec:
        picked = [n for n in default_interfaces(names) if n.startswith(VIRTUAL_PREFIXES)]
        if not picked:
            return []
        return [Finding(
            "warning", "nccl.ifname_default_virtual",
            f"NCCL_SOCKET_IFNAME is not set and NCCL may pick virtual interface(s) {', '.join(picked)}",
            "by default NCCL takes any interface except docker* and lo; a libvirt bridge or VM tap "
            "does not reach the other hosts, so bootstrap hangs or runs over the wrong network",
            "set NCCL_SOCKET_IFNAME to the data network interface (e.g. =eth0), or exclude the "
            "virtual ones (^virbr,vnet,docker,lo)", subject="NCCL_SOCKET_IFNAME")]
    lst = IfList.parse(spec)
    selected = [n for n in names if lst.selects(n)]
    out = []
    if not lst.exclude:
        for entry in lst.entries:
            if not any(lst.entry_matches(entry, n) for n in names):
                out.append(Finding(
                    "warning", "nccl.ifname_missing",
                    f"NCCL_SOCKET_IFNAME entry {'=' if lst.exact else ''}{entry[0]!r} matches no interface "
                    f"(this host has {have})",
                    "NCCL silently skips it; a typo here leaves NCCL without the intended network",
                    "correct the name (prefixes match the start of a name, '=' requires the exact name)",
                    subject="NCCL_SOCKET_IFNAME"))
    if not selected:
        out.append(Finding(
            "error", "nccl.ifname_none",
            f"NCCL_SOCKET_IFNAME={spec} selects no interface (this host has {have})",
            "NCCL fails to start with 'no socket interface found' (bootstrap cannot begin)",
            "set it to an existing interface that carries the cluster network", subject="NCCL_SOCKET_IFNAME"))
        return out
    down = [n for n in selected if not _usable(interfaces[n])]
    if down:
        severity = "error" if len(down) == len(selected) else "warning"
        out.append(Finding(
            severity, "nccl.ifname_down",
            f"NCCL_SOCKET_IFNAME={spec} selects interface(s) that are down: {', '.join(down)}",
            "NCCL cannot reach other hosts through a link that is down" if severity == "error" else
            "NCCL may choose a dead link for some connections",
            "bring the link up or point NCCL_SOCKET_IFNAME at an interface that is up",
            subject="NCCL_SOCKET_IFNAME"))
    if lst.exclude:
        virtual = [n for n in selected if n.startswith(VIRTUAL_PREFIXES)]
        prefixes = ",".join(sorted({v.rstrip("0123456789") for v in virtual}))
        if virtual:
            out.append(Finding(
                "warning", "nccl.ifname_virtual",
                f"NCCL_SOCKET_IFNAME={spec} still allows {', '.join(virtual)}",
                "an exclusion list replaces NCCL's default one, so loopback and virtual bridges become "
                "eligible again; they do not reach the other hosts",
                f"add them to the exclusion (e.g. {spec},{prefixes})",
                subject="NCCL_SOCKET_IFNAME"))
    return out


def check_ib(env: Mapping[str, str], ports: Sequence[IbPort]) -> list[Finding]:
    out = []
    devices = sorted({p.device for p in ports})
    if _flag(env, "NCCL_IB_DISABLE") and devices:
        kinds = sorted({"RoCE" if p.link_layer == "Ethernet" else "InfiniBand" for p in ports})
        out.append(Finding(
            "warning", "nccl.ib_disabled",
            f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']} while {'/'.join(kinds)} devices are present "
            f"({', '.join(devices)})",
            "NCCL then uses TCP sockets between hosts: a fraction of the RDMA bandwidth, more CPU",
            "unset NCCL_IB_DISABLE (it is usually a leftover from debugging)", subject="NCCL_IB_DISABLE"))
    if devices and not any(p.state == "ACTIVE" for p in ports):
        out.append(Finding(
            "warning", "nccl.ib_no_active_port", f"no active port on {', '.join(devices)}",
            "NCCL cannot use an HCA whose ports are down and falls back to sockets",
            "check cabling and the subnet manager (`ibstat`); for RoCE, the Ethernet link", subject="infiniband"))
    hca = env.get("NCCL_IB_HCA", "").strip()
    if hca and devices:
        lst = IfList.parse(hca)
        if not any(lst.selects(p.device, p.port) for p in ports):
            out.append(Finding(
                "error", "nccl.ib_hca_none", f"NCCL_IB_HCA={hca} selects none of {', '.join(devices)}",
                "NCCL finds no usable HCA and falls back to sockets",
                "name existing devices (`ls /sys/class/infiniband`), optionally with :port", subject="NCCL_IB_HCA"))
    if devices or "NCCL_IB_TIMEOUT" in env or "NCCL_IB_RETRY_CNT" in env:
        out += _ib_tuning(env)
    return out


def _ib_tuning(env: Mapping[str, str]) -> list[Finding]:
    out = []
    for name, rec, lo, hi in (("NCCL_IB_TIMEOUT", RECOMMENDED_IB_TIMEOUT, 1, 31),
                              ("NCCL_IB_RETRY_CNT", RECOMMENDED_IB_RETRY_CNT, 0, 7)):
        raw = env.get(name)
        if raw is None:
            if name == "NCCL_IB_TIMEOUT":
                out.append(Finding("info", "nccl.ib_timeout_unset", f"{name} is not set (NCCL's default is lower)",
                                   "a short timeout turns transient fabric jitter into a failed job",
                                   f"set {name}={rec}", subject=name))
            continue
        try:
            val = int(raw.strip())
        except ValueError:
            val = None
        if val is None or not lo <= val <= hi:
            out.append(Finding("error", "nccl.ib_value_invalid", f"{name}={raw} is not valid ({lo}..{hi})",
                               "the InfiniBand verbs layer rejects out-of-range values", f"set {name}={rec}",
                               subject=name))
        elif val < rec:
            out.append(Finding("warning", "nccl.ib_value_low", f"{name}={val} is below the recommended {rec}",
                               "a short timeout or few retries turn transient fabric jitter into a failed job",
                               f"set {name}={rec}", subject=name))
    return out


def _flag(env: Mapping[str, str], name: str) -> bool:
    val = env.get(name, "").strip()
    return val not in ("", "0")


def check_leftovers(env: Mapping[str, str]) -> list[Finding]:
    """Debugging switches that stay in shells, job scripts and container images."""
    out = []
    if _flag(env, "NCCL_P2P_DISABLE"):
        out.append(Finding("warning", "nccl.p2p_disabled", f"NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']} is set",
                           "GPUs of one host then exchange data through host memory (≈4 GB/s instead of "
                           "tens to hundreds)", "unset NCCL_P2P_DISABLE unless P2P is known to be broken",
                           subject="NCCL_P2P_DISABLE"))
    level = env.get("NCCL_P2P_LEVEL", "").strip()
    if level:
        num = P2P_LEVELS.get(level.upper(), int(level) if level.isdigit() else None)
        severity = "warning" if num == 0 or num is None else "info"
        what = "an unknown value" if num is None else ("disables P2P" if num == 0 else "limits P2P by distance")
        out.append(Finding(severity, "nccl.p2p_level", f"NCCL_P2P_LEVEL={level} is set ({what})",
                           "NCCL already picks the P2P level from the topology; a forced level is "
                           "usually a leftover from a workaround",
                           "unset NCCL_P2P_LEVEL unless it fixes a known problem on this host",
                           subject="NCCL_P2P_LEVEL"))
    if _flag(env, "NCCL_SHM_DISABLE"):
        out.append(Finding("warning", "nccl.shm_disabled", f"NCCL_SHM_DISABLE={env['NCCL_SHM_DISABLE']} is set",
                           "without P2P and shared memory, GPUs of one host talk through the network",
                           "unset NCCL_SHM_DISABLE", subject="NCCL_SHM_DISABLE"))
    forced = [f"{k}={env[k]}" for k in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS",
                                        "NCCL_NET_GDR_LEVEL", "NCCL_TOPO_FILE") if env.get(k, "").strip()]
    if env.get("NCCL_NVLS_ENABLE", "").strip() == "0":
        forced.append("NCCL_NVLS_ENABLE=0")
    if forced:
        out.append(Finding("info", "nccl.tuning_forced", f"NCCL tuning forced by the environment: {', '.join(forced)}",
                           "these override NCCL's own choices and are often left over from experiments",
                           "keep them only if measured to help on this system", subject="environment"))
    return out


def check_numa(gpu_numa: Mapping[str, int | None], node_socket: Mapping[int, int] | None = None,
               nvlink: bool = False) -> list[Finding]:
    """GPUs of one job spread over NUMA nodes / sockets (their traffic crosses the inter-socket link
    unless NVLink carries it)."""
    by_node: dict[int, list[str]] = {}
    for gpu, node in sorted(gpu_numa.items()):
        if node is not None and node >= 0:
            by_node.setdefault(node, []).append(gpu)
    if len(by_node) < 2:
        return []
    groups = "; ".join(f"node {n}: {', '.join(g)}" for n, g in sorted(by_node.items()))
    sockets = {node_socket[n] for n in by_node if n in node_socket} if node_socket else set()
    cross_socket = len(sockets) > 1 if node_socket and all(n in node_socket for n in by_node) else None
    if nvlink:
        severity, why = "info", "NVLink carries GPU-to-GPU traffic; only host-side transfers cross nodes"
    elif cross_socket is False:
        severity, why = "info", "the nodes share a socket, so P2P stays within one CPU"
    else:
        severity, why = "warning", ("PCIe P2P between sockets goes over the inter-socket link (or is not "
                                    "supported and falls back to host memory)")
    where = "sockets" if cross_socket else "NUMA nodes"
    return [Finding(severity, "nccl.numa_split", f"the GPUs sit on different {where} ({groups})", why,
                    "run jobs on GPUs of one NUMA node (CUDA_VISIBLE_DEVICES) and pin the process to that "
                    "node's CPUs", subject="numa")]


def check_versions(libs: Sequence[NcclLib]) -> list[Finding]:
    """Several NCCL versions on one host, and a torch pin that differs from the wheel beside it."""
    out = []
    versions = sorted({lib.version for lib in libs if lib.version})
    if len(versions) > 1:
        detail = "; ".join(f"{lib.version} ({lib.source}: {lib.path})" for lib in libs if lib.version)
        out.append(Finding("info", "nccl.versions_mixed", f"several NCCL versions installed: {detail}",
                           "which one a program uses depends on how it loads NCCL (PyTorch: the pip wheel; "
                           "nccl-tests and MPI programs: the system library or LD_LIBRARY_PATH)",
                           "make sure every rank of a job loads the same version", subject="libraries"))
    pins = [lib for lib in libs if lib.source == "torch" and "pins" in lib.package]
    wheels = {lib.path.split("/nvidia/nccl/")[0]: lib for lib in libs if lib.source == "pip"}
    for pin in pins:
        wheel = wheels.get(pin.path.rsplit("/torch", 1)[0])
        if wheel and wheel.version and pin.version and wheel.version != pin.version:
            out.append(Finding("warning", "nccl.torch_pin_mismatch",
                               f"{pin.package} requires NCCL {pin.version} but {wheel.version} is installed "
                               f"beside it ({wheel.path})",
                               "PyTorch loads whatever wheel is installed; an unplanned NCCL upgrade or "
                               "downgrade changes behaviour and can differ from the other hosts",
                               f"pip install {wheel.package}=={pin.version}", subject="libraries"))
    return out


def check_drift(libs_by_host: Mapping[str, Sequence[NcclLib | Mapping[str, object]]]) -> list[Finding]:
    """NCCL versions that differ between hosts, compared per kind of installation."""
    norm = {h: [x if isinstance(x, NcclLib) else NcclLib.from_dict(x) for x in libs]
            for h, libs in libs_by_host.items()}
    out = []
    for source in sorted({lib.source for libs in norm.values() for lib in libs}):
        per_host = {h: sorted({lib.version for lib in libs if lib.source == source and lib.version})
                    for h, libs in norm.items()}
        per_host = {h: v for h, v in per_host.items() if v}
        if len(per_host) > 1 and len({tuple(v) for v in per_host.values()}) > 1:
            detail = "; ".join(f"{h}: {', '.join(v)}" for h, v in sorted(per_host.items()))
            out.append(Finding("warning", "nccl.version_drift", f"NCCL version drift ({source}): {detail}",
                               "ranks of one job must run the same NCCL; a mismatch hangs or fails at init, "
                               "or silently changes protocols between hosts",
                               "install the same NCCL version on every host (pin it in the image or "
                               "requirements)", subject="hosts"))
    return out


class PreflightOptions(TypedDict, total=False):
    """The options of `preflight` that callers pass on (see `snapshot_preflight`)."""
    snapshots: Mapping[str, Sequence[NcclLib | Mapping[str, object]]] | None
    site_packages: Sequence[str]
    system_dirs: Sequence[str]


def preflight(env: Mapping[str, str], root: Root,
              snapshots: Mapping[str, Sequence[NcclLib | Mapping[str, object]]] | None = None, *,
              host: str = "this host", gpus: Sequence[str] = (),
              gpu_numa: Mapping[str, int | None] | None = None, node_socket: Mapping[int, int] | None = None,
              nvlink: bool = False, site_packages: Sequence[str] = DEFAULT_SITE_PACKAGES,
              system_dirs: Sequence[str] = DEFAULT_SYSTEM_DIRS) -> PreflightReport:
    """Every check at once. `snapshots` maps other host names to their library lists (as found by
    `find_nccl_libs` there, or dicts with path/version/source) to compare with this host (`host`).
    `gpus` are the PCI addresses of the GPUs a job would use; `gpu_numa` maps them to NUMA nodes."""
    report = PreflightReport(interfaces=read_interfaces(root), ib_ports=read_ib_ports(root),
                             libraries=find_nccl_libs(root, site_packages, system_dirs))
    f = report.findings
    f += check_socket_ifname(env, report.interfaces)
    f += check_ib(env, report.ib_ports)
    f += check_leftovers(env)
    f += check_versions(report.libraries)
    if not report.libraries:
        f.append(Finding("info", "nccl.no_library", "no NCCL library found",
                         "nothing can run NCCL here until one is installed (system package or pip wheel)",
                         "install libnccl2 or the nvidia-nccl-cu12 wheel", subject="libraries"))
    if snapshots:
        f += check_drift({host: report.libraries, **snapshots})
    f += check_acs(gpus, root)
    if gpu_numa:
        f += check_numa(gpu_numa, node_socket, nvlink)
    report.findings = by_severity(f)
    return report
