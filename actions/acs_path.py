"""What the path between a GPU and a NIC costs GPUDirect RDMA: its PCIe distance and the ACS state of the
ports in between (read from their config space, actions/nccl/acs.py)."""
from __future__ import annotations

from nodeconsole.actions.nccl.acs import decode_acs, ports_between
from nodeconsole.console.root import Root

# GPU↔NIC P2P measured through a switch with ACS redirect on the path
MEASURED = "200 → 80 Gb/s GPU↔NIC has been measured"


def acs_note(root: Root, gpu: str, nic: str, level: str) -> str:
    """One sentence: where GPU↔NIC peer traffic goes and what the ACS state on the path costs it."""
    if level == "SYS":
        return ("no PCIe switch in common and different sockets: GPUDirect RDMA crosses the inter-socket link "
                "(slow, often not used: NCCL then stages through host memory)")
    if level in ("PHB", "NODE"):
        return ("no PCIe switch in common: GPUDirect RDMA passes the CPU's root complex (lower bandwidth than "
                "across a switch)")
    ports = ports_between(root, [gpu, nic])
    if not ports:
        return "the ports between them are not known (the PCI tree cannot be read)"
    redirect = [p for p in ports if p.redirects]
    unknown = [p.address for p in ports if p.control is None]
    if redirect:
        bits = " ".join(b for b in decode_acs(redirect[0].control or 0).split() if "Redir+" in b or "Egress" in b
                        and b.endswith("+"))
        shown = f"{', '.join(p.address for p in redirect)}: {bits}"
        return (f"ACS redirect is on at the switch port(s) between them ({shown}): GPUDirect RDMA goes up to the "
                f"root complex instead of across the switch, about half the bandwidth or less ({MEASURED}); in a VM "
                "the IOMMU must translate the peer requests, so the redirect stays unless both devices use ATS and "
                "the ports enable ACS Direct Translated P2P")
    if unknown:
        return (f"ACS state of port(s) {', '.join(unknown)} unknown (extended config space needs root): if "
                f"request/completion redirect is on, GPUDirect RDMA goes through the root complex ({MEASURED})")
    return "no ACS redirect on the ports between them: GPU↔NIC peer traffic stays in the switch"
