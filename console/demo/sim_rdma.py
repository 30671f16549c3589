"""RDMA devices and netdevs of the demo's NICs: what mlx5_core registers when it binds a PF or a VF
(`X/infiniband/mlx5_N/ports/1/{state,phys_state,rate,link_layer}`, `X/net/NAME/{type,operstate}` and
their /sys/class/infiniband and /sys/class/net links) and removes when it lets go. Shared by the generator
(the initial state) and the simulated kernel (binds, unbinds, VFs created and removed)."""
from __future__ import annotations

import os
from pathlib import Path

from nodeconsole.console.demo import sysfs_ops as ops
from nodeconsole.console.demo.fstree import TreeWriter

RDMA_DRIVERS = ("mlx5_core",)
IB_CLASS = "sys/class/infiniband"
NET_CLASS = "sys/class/net"
LINKS = "rdma.json"  # .sim note: PF address → link layer of its ports ("InfiniBand" / "Ethernet")
RATE = "400 Gb/sec (4X NDR)"
_ARPHRD = {"InfiniBand": 32, "Ethernet": 1}


def netdev_name(address: str, link_layer: str) -> str:
    """systemd's path-based name: ibp26s0 / enp26s0np0 for function 0, ibp26s0f3 for function 3."""
    _dom, bus, rest = address.split(":")
    slot, fn = rest.split(".")
    stem = f"p{int(bus, 16)}s{int(slot, 16)}" + (f"f{fn}" if fn != "0" else "")
    return ("ib" + stem) if link_layer == "InfiniBand" else ("en" + stem + "np0")


def _free_name(base: Path) -> str:
    used = set(os.listdir(base / IB_CLASS)) if (base / IB_CLASS).is_dir() else set()
    n = 0
    while f"mlx5_{n}" in used:
        n += 1
    return f"mlx5_{n}"


def add(w: TreeWriter, dev_dir: str, address: str, link_layer: str) -> None:
    """Register an RDMA device (the lowest free mlx5_N) with one active port, and a netdev."""
    name = _free_name(w.base)
    d = f"{dev_dir}/infiniband/{name}"
    port = f"{d}/ports/1"
    w.attr(f"{port}/state", "4: ACTIVE")
    w.attr(f"{port}/phys_state", "5: LinkUp")
    w.attr(f"{port}/rate", RATE)
    w.attr(f"{port}/link_layer", link_layer)
    w.attr(f"{d}/node_type", "1: CA")
    w.link(f"{IB_CLASS}/{name}", d)
    net = netdev_name(address, link_layer)
    w.attr(f"{dev_dir}/net/{net}/type", _ARPHRD.get(link_layer, 1))
    w.attr(f"{dev_dir}/net/{net}/operstate", "up")
    w.link(f"{NET_CLASS}/{net}", f"{dev_dir}/net/{net}")


def remove(base: Path, dev_dir: str) -> None:
    """Unregister the function's RDMA devices and netdevs (their class links too)."""
    for sub, cls in (("infiniband", IB_CLASS), ("net", NET_CLASS)):
        d = base / dev_dir / sub
        if not d.is_dir():
            continue
        for name in os.listdir(d):
            link = base / cls / name
            if os.path.lexists(link):
                os.unlink(link)
        ops.remove_tree(d)


def link_layer_of(base: Path, address: str, physfn: str | None) -> str | None:
    """The link layer of the function's NIC (its own or its PF's), None when it has no RDMA device."""
    layers = ops.load_sim(base, LINKS)
    return layers.get(address) or (layers.get(physfn) if physfn else None)


def bound(base: Path, dev_dir: str, address: str, driver: str) -> None:
    """A driver's probe: mlx5_core registers the RDMA device and netdev of a NIC function."""
    if driver not in RDMA_DRIVERS:
        return
    physfn = ops.link_name(base, f"{dev_dir}/physfn")
    layer = link_layer_of(base, address, physfn)
    if layer:
        add(TreeWriter(base), dev_dir, address, layer)


def unbinding(base: Path, dev_dir: str, driver: str) -> None:
    if driver in RDMA_DRIVERS:
        remove(base, dev_dir)
