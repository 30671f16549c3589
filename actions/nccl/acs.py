"""ACS (PCIe Access Control Services) on the ports between two GPUs.

With ACS P2P Request/Completion Redirect on, a switch sends peer-to-peer traffic up to the root complex
instead of across to the other GPU: P2P gets slow or fails (NCCL hangs or falls back to host memory).

sysfs has no plain ACS file, so this reads the ACS extended capability (id 0x000D) out of the raw
`config` file of each port. Only root can read past the first 256 bytes of config space (others get 64
or 256 bytes), and extended capabilities start at 0x100: with a short file the state is "unknown",
said as such rather than guessed. The same bits are what `lspci -vvv` prints as `ACSCtl:`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from nodeconsole.actions.nccl.finding import Finding
from nodeconsole.console.pciaddr import is_pci_address, parse_pci_address
from nodeconsole.console.root import Root

ACS_CAP_ID = 0x000D
EXT_CAP_START = 0x100
CONFIG_SPACE = 4096
# ACS Control register bits, named as lspci names them.
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# The bits that send peer-to-peer traffic away from the direct path.
REDIRECT_MASK = (1 << 2) | (1 << 3) | (1 << 5)


def find_ext_cap(config: bytes, cap_id: int) -> int | None:
    """Offset of a PCIe extended capability, None when absent or the config space is too short."""
    if len(config) < CONFIG_SPACE:
        return None
    offset, seen = EXT_CAP_START, set()
    while EXT_CAP_START <= offset <= CONFIG_SPACE - 4 and offset not in seen:
        seen.add(offset)  # a corrupt chain can loop
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def acs_control(config: bytes) -> int | None:
    """The ACS Control register, 0 when the port has no ACS capability, None when unreadable."""
    if len(config) < CONFIG_SPACE:
        return None
    offset = find_ext_cap(config, ACS_CAP_ID)
    if offset is None:
        return 0
    return int.from_bytes(config[offset + 6:offset + 8], "little")


def decode_acs(control: int) -> str:
    """lspci's notation: "SrcValid+ TransBlk- ReqRedir+ ..."."""
    return " ".join(f"{name}{'+' if control >> i & 1 else '-'}" for i, name in enumerate(ACS_BITS))


def pci_chain(root: Root, address: str) -> list[tuple[str, str]]:
    """(address, root-relative directory) of every PCI function from the top of the tree down to
    `address` itself, from the sysfs link's target; [] when the device or link is missing."""
    target = root.link_target(f"sys/bus/pci/devices/{address}")
    if target is None:
        return []
    parts = target.split("/")
    return [(p, "/".join(parts[:i + 1])) for i, p in enumerate(parts) if is_pci_address(p)]


@dataclass(frozen=True)
class PortAcs:
    address: str
    control: int | None  # None: config space not readable in full
    between: tuple[tuple[str, str], ...]  # the GPU pairs whose path crosses this port

    @property
    def redirects(self) -> bool:
        return self.control is not None and bool(self.control & REDIRECT_MASK)


def ports_between(root: Root, gpus: Sequence[str]) -> list[PortAcs]:
    """The bridges/ports on the path between every pair of GPUs (below their common ancestor, which
    only forwards) with their ACS control value."""
    chains = {}
    for g in gpus:
        addr = parse_pci_address(g)
        chains[addr] = pci_chain(root, addr)
    pairs: dict[str, list[tuple[str, str]]] = {}
    dirs: dict[str, str] = {}
    for a, b in combinations(sorted(chains), 2):
        ca, cb = chains[a], chains[b]
        if not ca or not cb:
            continue
        k = 0
        while k < min(len(ca), len(cb)) - 1 and ca[k][0] == cb[k][0]:
            k += 1
        for port, d in ca[k:-1] + cb[k:-1]:
            pairs.setdefault(port, []).append((a, b))
            dirs[port] = d
    out = []
    for port in sorted(pairs):
        raw = _read_bytes(root, f"{dirs[port]}/config")
        out.append(PortAcs(port, acs_control(raw) if raw is not None else None, tuple(pairs[port])))
    return out


def _read_bytes(root: Root, rel: str) -> bytes | None:
    """A port's config space (at most 4 KiB) through the root seam: inside the root, regular files only."""
    try:
        return root.read_bytes(rel, limit=4096)
    except OSError:
        return None


def check_acs(gpus: Sequence[str], root: Root) -> list[Finding]:
    """A warning per port whose ACS redirects P2P between two of `gpus`; one note when some ports'
    state could not be read."""
    if len(gpus) < 2:
        return []
    ports = ports_between(root, gpus)
    out = []
    for p in ports:
        if p.redirects:
            pairs = ", ".join(f"{a}↔{b}" for a, b in p.between[:4])
            out.append(Finding(
                "warning", "nccl.acs_redirect",
                f"ACS redirect is on at PCIe port {p.address} ({decode_acs(p.control or 0)}) between GPUs "
                f"{pairs}",
                "peer-to-peer traffic is sent up to the root complex instead of across the switch: P2P "
                "is slow or fails, NCCL may hang or fall back to host memory",
                f"on a bare-metal training host clear it at boot (`setpci -s {p.address} "
                f"ECAP_ACS+0x6.w=0000`, or disable ACS in the BIOS); on a host that passes these GPUs "
                f"to VMs keep it on, since IOMMU isolation needs it",
                subject=p.address))
    unknown = [p.address for p in ports if p.control is None]
    if unknown:
        out.append(Finding(
            "info", "nccl.acs_unknown",
            f"ACS state of {len(unknown)} PCIe port(s) between the GPUs is unknown ({', '.join(unknown[:6])})",
            "the ACS capability lies in extended config space, which only root can read",
            "run the check as root, or `sudo lspci -vvv | grep ACSCtl`"))
    return out
