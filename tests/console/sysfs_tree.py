"""A tiny builder of synthetic /sys + /proc trees, laid out as Linux lays them out: devices live under
sys/devices/pciDDDD:BB/... in their PCIe chain, and every other view is a relative symlink into it
(sys/bus/pci/devices/ADDR → ../../../devices/..., driver → ../../../../bus/pci/drivers/NAME,
iommu_group → ../../../../kernel/iommu_groups/N)."""
from __future__ import annotations

import os
from pathlib import Path


class FakeSys:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: dict[str, str] = {}  # PCI address → its real dir, root-relative

    # -- primitives --
    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return path

    def link(self, rel: str, target_rel: str) -> None:
        """A relative symlink at `rel` pointing at root-relative `target_rel`, as sysfs writes them."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(target_rel, os.path.dirname(rel)), path)

    def raw_link(self, rel: str, target: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)

    # -- host --
    def host(self, hostname: str = "gpu-node-1", kernel: str = "6.8.0-45-generic",
             cmdline: str = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro", vendor_id: str = "GenuineIntel") -> None:
        self.write("proc/sys/kernel/hostname", hostname)
        self.write("proc/sys/kernel/osrelease", kernel)
        self.write("proc/cmdline", cmdline)
        self.write("proc/cpuinfo", f"processor\t: 0\nvendor_id\t: {vendor_id}\nmodel name\t: Test CPU\n")

    # -- CPUs and NUMA --
    def cpu(self, cpu: int, package: int, core_id: int, siblings: str, die: int | None = None,
            online: bool = True) -> None:
        base = f"sys/devices/system/cpu/cpu{cpu}"
        if cpu != 0:  # like Linux: cpu0 usually cannot be unplugged and has no online file
            self.write(f"{base}/online", "1" if online else "0")
        if not online:  # offline CPUs have no topology directory
            (self.root / base).mkdir(parents=True, exist_ok=True)
            return
        self.write(f"{base}/topology/physical_package_id", str(package))
        self.write(f"{base}/topology/core_id", str(core_id))
        self.write(f"{base}/topology/thread_siblings_list", siblings)
        if die is not None:
            self.write(f"{base}/topology/die_id", str(die))

    def cpu_lists(self, online: str, present: str, possible: str | None = None) -> None:
        self.write("sys/devices/system/cpu/online", online)
        self.write("sys/devices/system/cpu/present", present)
        self.write("sys/devices/system/cpu/possible", possible or present)

    def node(self, nid: int, cpulist: str, mem_kib: int, distance: str = "10",
             hugepages: dict[int, int] | None = None) -> None:
        base = f"sys/devices/system/node/node{nid}"
        self.write(f"{base}/cpulist", cpulist)
        self.write(f"{base}/meminfo", f"Node {nid} MemTotal:       {mem_kib} kB\nNode {nid} MemFree:        1 kB")
        self.write(f"{base}/distance", distance)
        for size, count in (hugepages or {2048: 0}).items():
            self.write(f"{base}/hugepages/hugepages-{size}kB/nr_hugepages", str(count))

    def node_online(self, text: str) -> None:
        self.write("sys/devices/system/node/online", text)

    # -- PCI --
    def pci(self, address: str, vendor: int = 0x10DE, device: int = 0x2330, cls: int = 0x030200, *,
            parent: str | None = None, segment: str | None = None, driver: str | None = None,
            numa_node: int | str = -1, local_cpus: str | None = None, iommu_group: int | None = None,
            driver_override: str = "(null)", extra: dict[str, str] | None = None) -> str:
        """One PCI function under `parent` (an address made before) or under its host bridge; `segment`
        inserts a path element such as "pci10000:00" (the domain a VMD controller opens)."""
        if parent is None:
            dom, bus = address.split(":")[:2]
            base = f"sys/devices/pci{dom}:{bus}"
        else:
            base = self.paths[parent]
        if segment:
            base = f"{base}/{segment}"
        path = f"{base}/{address}"
        self.paths[address] = path
        self.write(f"{path}/vendor", f"0x{vendor:04x}")
        self.write(f"{path}/device", f"0x{device:04x}")
        self.write(f"{path}/class", f"0x{cls:06x}")
        self.write(f"{path}/subsystem_vendor", f"0x{vendor:04x}")
        self.write(f"{path}/subsystem_device", "0x1234")
        self.write(f"{path}/numa_node", str(numa_node))
        self.write(f"{path}/driver_override", driver_override)
        if local_cpus is not None:
            self.write(f"{path}/local_cpus", local_cpus)
        for name, value in (extra or {}).items():
            self.write(f"{path}/{name}", value)
        self.link(f"sys/bus/pci/devices/{address}", path)
        if driver:
            self.link(f"{path}/driver", f"sys/bus/pci/drivers/{driver}")
            (self.root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        if iommu_group is not None:
            group = f"sys/kernel/iommu_groups/{iommu_group}"
            (self.root / group / "devices").mkdir(parents=True, exist_ok=True)
            self.write(f"{group}/type", "DMA")
            self.link(f"{path}/iommu_group", group)
            self.link(f"{group}/devices/{address}", path)
        return path

    def sriov(self, pf: str, vfs: list[str], total: int) -> None:
        self.write(f"{self.paths[pf]}/sriov_totalvfs", str(total))
        self.write(f"{self.paths[pf]}/sriov_numvfs", str(len(vfs)))
        for n, vf in enumerate(vfs):
            self.link(f"{self.paths[pf]}/virtfn{n}", self.paths[vf])
            self.link(f"{self.paths[vf]}/physfn", self.paths[pf])

    def iommu_unit(self, name: str = "dmar0") -> None:
        self.link(f"sys/class/iommu/{name}", f"sys/devices/virtual/iommu/{name}")
        (self.root / f"sys/devices/virtual/iommu/{name}").mkdir(parents=True, exist_ok=True)

    # -- vGPU --
    def mdev_type(self, parent: str, type_id: str, name: str, available: int, description: str) -> str:
        base = f"{self.paths[parent]}/mdev_supported_types/{type_id}"
        self.write(f"{base}/name", name)
        self.write(f"{base}/available_instances", str(available))
        self.write(f"{base}/description", description)
        self.write(f"{base}/device_api", "vfio-pci")
        (self.root / base / "devices").mkdir(parents=True, exist_ok=True)
        if not (self.root / f"sys/class/mdev_bus/{parent}").is_symlink():
            self.link(f"sys/class/mdev_bus/{parent}", self.paths[parent])
        return base

    def mdev(self, parent: str, uuid: str, type_id: str) -> None:
        path = f"{self.paths[parent]}/{uuid}"
        (self.root / path).mkdir(parents=True, exist_ok=True)
        self.link(f"{path}/mdev_type", f"{self.paths[parent]}/mdev_supported_types/{type_id}")
        self.link(f"sys/bus/mdev/devices/{uuid}", path)
        self.link(f"{self.paths[parent]}/mdev_supported_types/{type_id}/devices/{uuid}", path)

    def vgpu_vf(self, vf: str, creatable: list[tuple[int, str]], current: int = 0) -> None:
        lines = ["ID    : vGPU Name"] + [f"{tid}  : {name}" for tid, name in creatable]
        self.write(f"{self.paths[vf]}/nvidia/creatable_vgpu_types", "\n".join(lines))
        self.write(f"{self.paths[vf]}/nvidia/current_vgpu_type", str(current))
