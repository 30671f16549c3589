"""Builders for host specs: GPU functions, NICs, a PCIe switch, the platform hub, pins on a node's
cores, MIG instances and H100 vGPU types. The presets (`presets.py`) are written with them."""
from __future__ import annotations

from nodeconsole.console.demo.spec import (
    NVIDIA,
    CpuSpec,
    GpuSpec,
    HostBridge,
    Link,
    MigInstanceSpec,
    PciDev,
    SriovSpec,
    VfSpec,
    VgpuTypeSpec,
)
from nodeconsole.console.mig_profiles import ci_profiles_for, table_for_model

H100_DEVICE, H100_AUDIO = 0x2330, 0x22A3
H100_PCIE_DEVICE, H100_PCIE_SUBSYSTEM = 0x2331, 0x1626  # the H100 PCIe 80GB card
GPU_CLASS, AUDIO_CLASS, BRIDGE_CLASS = 0x030200, 0x040300, 0x060400
CX7, CX7_VF = 0x1021, 0x101E
MELLANOX, BROADCOM, SAMSUNG, ASPEED = 0x15B3, 0x1000, 0x144D, 0x1A03

# H100 SXM5 vGPU types (time-sliced and MIG-backed); ids are this simulator's own numbering.
H100_TIME_SLICED = tuple(VgpuTypeSpec(1100 + i, f"NVIDIA H100XM-{fb}C", fb * 1024, n)
                         for i, (fb, n) in enumerate(((4, 20), (5, 16), (8, 10), (10, 8), (16, 5),
                                                      (20, 4), (40, 2), (80, 1))))
H100_MIG_BACKED = tuple(VgpuTypeSpec(1110 + i, f"NVIDIA H100XM-{name}C", fb * 1024, n)
                        for i, (name, fb, n) in enumerate((("1-10", 10, 7), ("1-20", 20, 4), ("2-20", 20, 3),
                                                           ("3-40", 40, 2), ("4-40", 40, 1), ("7-80", 80, 1))))


def vgpu_type(types: tuple[VgpuTypeSpec, ...], suffix: str) -> VgpuTypeSpec:
    return next(t for t in types if t.name.endswith(suffix))


def mig_instance(model: str, profile: str, start: int, gi_id: int) -> MigInstanceSpec:
    """A GPU instance of a named profile at a placement start, checked against the profile table."""
    table = table_for_model(model)
    p = table.by_name(profile) if table else None
    if p is None:
        raise ValueError(f"{model} has no MIG profile {profile!r}")
    size = next((sz for st, sz in p.placements if st == start), None)
    if size is None:
        raise ValueError(f"{profile} cannot start at memory slice {start}")
    ci = next(c for c in ci_profiles_for(p.slice_count) if c.slice_count == p.slice_count)
    return MigInstanceSpec(profile, p.profile_id, start, size, gi_id, ci.enum)


def gpu_functions(gpu: GpuSpec, *, driver: str | None = "nvidia", override: str | None = None,
                  audio: bool = True, audio_driver: str | None = "snd_hda_intel",
                  link: Link = Link(5, 16), sriov: SriovSpec | None = None, label: str = "",
                  device: int = H100_DEVICE, subsystem: int = 0x16C1) -> tuple[PciDev, ...]:
    """An H100-class GPU at slot 0 (function 0) and its optional HD-audio function 1 (`device`,
    `subsystem`: the GPU function's PCI ids, an H100 SXM5 unless said)."""
    fns = [PciDev(0, 0, NVIDIA, device, GPU_CLASS, NVIDIA, subsystem, driver=driver,
                  default_driver="nvidia", driver_override=override, link=link, sriov=sriov, gpu=gpu,
                  label=label)]
    if audio:
        fns.append(PciDev(0, 1, NVIDIA, H100_AUDIO, AUDIO_CLASS, NVIDIA, subsystem, driver=audio_driver,
                          default_driver="snd_hda_intel", driver_override=override, link=link,
                          label=label + ".audio" if label else ""))
    return tuple(fns)


def nic_functions(numvfs: int = 0, vf_drivers: dict[int, str] | None = None, label: str = "",
                  link_layer: str = "InfiniBand") -> tuple[PciDev, ...]:
    """A ConnectX-7 port on mlx5_core with `numvfs` VFs enabled (VF i on vf_drivers[i] or mlx5_core); the
    port and every VF on mlx5_core have an RDMA device (mlx5_N) with one active 400 Gb/s port."""
    vfs = tuple(VfSpec(driver=(vf_drivers or {}).get(i, "mlx5_core"), default_driver="mlx5_core",
                       driver_override=("vfio-pci" if (vf_drivers or {}).get(i) == "vfio-pci" else None))
                for i in range(numvfs))
    return (PciDev(0, 0, MELLANOX, CX7, 0x020000, MELLANOX, 0x0041, driver="mlx5_core", link=Link(5, 16),
                   sriov=SriovSpec(16, CX7_VF, vfs, vf_driver="mlx5_core"), acs=True, label=label,
                   rdma_link_layer=link_layer),)


def nvme_functions(label: str = "") -> tuple[PciDev, ...]:
    return (PciDev(0, 0, SAMSUNG, 0xA824, 0x010802, SAMSUNG, 0xA812, driver="nvme", link=Link(4, 4),
                   label=label),)


def switch(rp_slot: int, bus: int, endpoints: list[tuple[PciDev, ...]], *, acs: bool = True,
           label: str = "") -> PciDev:
    """Root port at `bus`:rp_slot → switch upstream port → one downstream port per endpoint device.
    Buses: bus+1 upstream port, bus+2 the downstream ports, bus+3+i behind downstream port i."""
    ports = tuple(PciDev(i, 0, BROADCOM, 0xC030, BRIDGE_CLASS, driver="pcieport", link=Link(5, 16),
                         secondary_bus=bus + 3 + i, children=fns, acs=acs, reset_method=None)
                  for i, fns in enumerate(endpoints))
    usp = PciDev(0, 0, BROADCOM, 0xC030, BRIDGE_CLASS, driver="pcieport", link=Link(5, 16),
                 secondary_bus=bus + 2, children=ports, acs=acs, reset_method=None, label=label)
    return root_port(rp_slot, bus + 1, (usp,))


def root_port(slot: int, secondary: int, children: tuple[PciDev, ...], link: Link = Link(5, 16),
              acs: bool = True) -> PciDev:
    return PciDev(slot, 0, 0x8086, 0x352A, BRIDGE_CLASS, driver="pcieport", link=link,
                  secondary_bus=secondary, children=children, acs=acs, reset_method=None)


def chipset(numa_node: int = 0, bmc_vga: bool = True) -> HostBridge:
    """Bus 0: USB, SATA and HD audio of the platform hub, and the BMC's VGA behind its PCI bridge."""
    devs = [PciDev(0x14, 0, 0x8086, 0x1BCD, 0x0C0330, driver="xhci_hcd", reset_method=None, label="usb"),
            PciDev(0x17, 0, 0x8086, 0x1BF2, 0x010601, driver="ahci", reset_method=None, label="sata"),
            PciDev(0x1F, 3, 0x8086, 0x1BC8, AUDIO_CLASS, driver="snd_hda_intel", reset_method=None,
                   label="audio")]
    if bmc_vga:
        vga = PciDev(0, 0, ASPEED, 0x2000, 0x030000, driver="ast", boot_vga=True, reset_method=None,
                     label="bmc-vga")
        # PCIe-to-PCI bridge: devices behind it cannot be told apart by the IOMMU (acs False).
        bridge = PciDev(0, 0, ASPEED, 0x1150, BRIDGE_CLASS, secondary_bus=2, children=(vga,), acs=False,
                        reset_method=None, link=Link(2, 1))
        devs.append(root_port(0x1C, 1, (bridge,), link=Link(2, 1)))
    return HostBridge(0, numa_node, tuple(devs))


def cpu_id(cpu: CpuSpec, node: int, core: int, thread: int = 0) -> int:
    """Host CPU id of `thread` of the node-relative `core`, numbered as CpuSpec documents."""
    per_node = cpu.cores_per_socket // cpu.nodes_per_socket
    socket, local = divmod(node, cpu.nodes_per_socket)
    return (thread * cpu.sockets * cpu.cores_per_socket + socket * cpu.cores_per_socket
            + local * per_node + core)


def pins(cpu: CpuSpec, node: int, first_core: int, vcpus: int, paired: bool = True) -> tuple[tuple[int, ...], ...]:
    """One host CPU per vCPU on consecutive cores of `node` from `first_core`; with `paired`, vCPUs 2k
    and 2k+1 share a core as hyperthread siblings (what a guest with threads=2 expects)."""
    out = []
    for v in range(vcpus):
        if paired and cpu.threads_per_core > 1:
            out.append((cpu_id(cpu, node, first_core + v // 2, v % 2),))
        else:
            out.append((cpu_id(cpu, node, first_core + v),))
    return tuple(out)


def core_cpus(cpu: CpuSpec, node: int, cores: range) -> tuple[int, ...]:
    """Every hyperthread of the node-relative `cores`."""
    return tuple(sorted(cpu_id(cpu, node, c, t) for c in cores for t in range(cpu.threads_per_core)))
