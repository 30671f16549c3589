"""The snapshot's network controllers: each NIC's physical function with its VFs, RDMA ports and netdevs,
and its distance to each GPU (console/model.py gathers the whole model)."""
from __future__ import annotations

from dataclasses import dataclass, field

from nodeconsole.console.model_host import PciLink


@dataclass(frozen=True)
class RdmaPort:
    """One port of an RDMA device (/sys/class/infiniband/DEV/ports/N)."""
    device: str  # RDMA device name, e.g. mlx5_0
    port: int
    state: str = ""  # "ACTIVE", "DOWN", "INIT" ... (the name in "4: ACTIVE")
    phys_state: str = ""  # "LinkUp", "Polling", "Disabled" ...
    rate: str = ""  # as sysfs writes it, e.g. "400 Gb/sec (4X NDR)"
    rate_gbps: float | None = None
    link_layer: str = ""  # "InfiniBand" or "Ethernet" (RoCE)


@dataclass(frozen=True)
class NetFunction:
    """What a network PCI function's driver registered: RDMA devices with their ports, and netdevs."""
    address: str
    rdma: tuple[str, ...] = ()
    ports: tuple[RdmaPort, ...] = ()
    netdevs: tuple[str, ...] = ()
    netdev_link_layer: str = ""  # from the first netdev's type (1 Ethernet, 32 InfiniBand)
    sriov_drivers_autoprobe: bool | None = None  # PFs: whether new VFs are probed by a host driver


@dataclass(frozen=True)
class NicVf:
    """One SR-IOV virtual function of a NIC."""
    address: str
    index: int  # its virtfnN number
    driver: str | None = None
    driver_override: str | None = None
    iommu_group: int | None = None
    rdma: tuple[str, ...] = ()  # the host's RDMA devices on it (none while on vfio-pci)
    netdevs: tuple[str, ...] = ()
    vm: str | None = None  # the VM whose definition holds it
    vm_state: str | None = None


@dataclass(frozen=True)
class NicGpu:
    """A GPU as seen from a NIC: its PCIe distance (nvidia-smi topo -m levels PIX/PXB/PHB/NODE/SYS)."""
    address: str
    index: int
    distance: str


@dataclass(frozen=True)
class Nic:
    """A network controller's physical function with its VFs and its place beside the GPUs."""
    address: str
    label: str  # NIC0, NIC1 ... as the topology matrix names it
    name: str  # the device's name (pci.ids), e.g. "MT2910 Family [ConnectX-7]"
    vendor: str = ""
    driver: str | None = None
    numa_node: int | None = None
    link_layer: str = ""  # "InfiniBand", "Ethernet" or "" when nothing tells
    rdma: tuple[str, ...] = ()
    ports: tuple[RdmaPort, ...] = ()
    netdevs: tuple[str, ...] = ()
    link: PciLink = field(default_factory=PciLink)
    iommu_group: int | None = None
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    sriov_drivers_autoprobe: bool | None = None
    vfs: tuple[NicVf, ...] = ()
    gpus: tuple[NicGpu, ...] = ()  # every GPU, closest first
    vm: str | None = None  # a VM whose definition holds the PF itself

    @property
    def closest(self) -> tuple[NicGpu, ...]:
        """The GPUs at the smallest distance (empty without GPUs)."""
        if not self.gpus:
            return ()
        best = self.gpus[0].distance
        return tuple(g for g in self.gpus if g.distance == best)
