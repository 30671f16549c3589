"""The network side of NIC functions from sysfs: RDMA devices and their ports, netdevs, and the PF's
`sriov_drivers_autoprobe`.

Read through each function's own directory (`sys/bus/pci/devices/X/infiniband/DEV/ports/N/{state,rate,
link_layer}` and `X/net/NAME/type`: the same files /sys/class/infiniband and /sys/class/net link to),
so only network controllers are visited.
"""
from __future__ import annotations

import re

from nodeconsole.console.model import NetFunction, PciDevice, RdmaPort
from nodeconsole.console.sources.sysfs_root import SysfsRoot, to_int

PCI_DIR = "sys/bus/pci/devices"
ARPHRD = {1: "Ethernet", 32: "InfiniBand"}  # netdev `type` values (include/uapi/linux/if_arp.h)
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
_STATE = re.compile(r"^\s*\d+\s*:\s*(\S+)")


def is_network(dev: PciDevice) -> bool:
    """Network controllers (class 0x02) and InfiniBand controllers filed as serial bus (0x0c06)."""
    return dev.base_class == 0x02 or (dev.class_id >> 8) == 0x0C06


def state_name(text: str | None) -> str:
    """"4: ACTIVE" → "ACTIVE" (a bare word is kept as is)."""
    if not text:
        return ""
    m = _STATE.match(text)
    return m.group(1) if m else text.strip()


def rate_gbps(text: str | None) -> float | None:
    """"400 Gb/sec (4X NDR)" → 400.0."""
    m = _RATE.match(text or "")
    return float(m.group(1)) if m else None


def read_net_functions(fs: SysfsRoot, devices: tuple[PciDevice, ...]) -> tuple[NetFunction, ...]:
    """One record per network function (PF or VF) in address order."""
    out = []
    for dev in devices:
        if not is_network(dev):
            continue
        base = f"{PCI_DIR}/{dev.address}"
        rdma = tuple(fs.listdir(f"{base}/infiniband"))
        ports = []
        for name in rdma:
            pdir = f"{base}/infiniband/{name}/ports"
            for p in sorted(fs.listdir(pdir), key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x)):
                if not (p.isascii() and p.isdigit()):
                    continue
                rate = fs.read(f"{pdir}/{p}/rate") or ""
                ports.append(RdmaPort(device=name, port=int(p), state=state_name(fs.read(f"{pdir}/{p}/state")),
                                      phys_state=state_name(fs.read(f"{pdir}/{p}/phys_state")), rate=rate,
                                      rate_gbps=rate_gbps(rate), link_layer=fs.read(f"{pdir}/{p}/link_layer") or ""))
        netdevs = tuple(fs.listdir(f"{base}/net"))
        kind = to_int(fs.read(f"{base}/net/{netdevs[0]}/type")) if netdevs else None
        autoprobe = to_int(fs.read(f"{base}/sriov_drivers_autoprobe")) if dev.sriov_totalvfs else None
        out.append(NetFunction(address=dev.address, rdma=rdma, ports=tuple(ports), netdevs=netdevs,
                               netdev_link_layer=ARPHRD.get(kind, "") if kind is not None else "",
                               sriov_drivers_autoprobe=None if autoprobe is None else autoprobe != 0))
    return tuple(out)
