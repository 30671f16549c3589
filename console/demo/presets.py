"""Ready-made hosts: the demo server, a small host for fast tests and a scalable host for benchmarks."""
from __future__ import annotations

from typing import TypedDict

from nodeconsole.console.demo.builders import (
    H100_MIG_BACKED,
    H100_PCIE_DEVICE,
    H100_PCIE_SUBSYSTEM,
    H100_TIME_SLICED,
    chipset,
    core_cpus,
    gpu_functions,
    mig_instance,
    nic_functions,
    nvme_functions,
    pins,
    root_port,
    switch,
    vgpu_type,
)
from nodeconsole.console.demo.spec import (
    CpuSpec,
    GpuProcessSpec,
    GpuSpec,
    HostBridge,
    HostdevSpec,
    HostSpec,
    Link,
    MdevSpec,
    SriovSpec,
    VfSpec,
    VmSpec,
    stable_uuid,
)

BOOT_WORDS = "BOOT_IMAGE=/boot/vmlinuz-6.8.0-45-generic root=/dev/mapper/vg0-root ro"
DEMO_HUGEPAGES_1G = 144  # per node: train-a's 128 GiB (node 0) and db-1's 64 GiB (node 1) fit
DEMO_CMDLINE = (f"{BOOT_WORDS} intel_iommu=on iommu=pt default_hugepagesz=1G hugepagesz=1G "
                f"hugepages={2 * DEMO_HUGEPAGES_1G}")
LARGE_CMDLINE = f"{BOOT_WORDS} intel_iommu=on iommu=pt default_hugepagesz=1G hugepagesz=1G hugepages=128"
H100 = "H100-80GB-HBM3"
# The H100 PCIe 80GB card (350 W, HBM2e). MIG capable on the real card, but the project's MIG reference has
# no profile table for it, so the simulated library answers MIG NOT_SUPPORTED: say so rather than half-do it.
H100_PCIE = GpuSpec(model="H100-PCIe", name="NVIDIA H100 PCIe", power_limit_w=350, mig_capable=False)
TRAINING_PAIR = ("0000:da:00.0", "0000:db:00.0")  # the free H100 PCIe pair on NVLink bridges (node 1)


class _GpuDrivers(TypedDict):
    """Driver keywords of `gpu_functions`, for a GPU handed to a VM."""
    driver: str
    override: str
    audio_driver: str


def _pci_hostdevs(gpu_addr: str, audio: bool = True, managed: bool = True) -> tuple[HostdevSpec, ...]:
    base = gpu_addr.rsplit(".", 1)[0]
    return (HostdevSpec(f"{base}.0", managed=managed),) + ((HostdevSpec(f"{base}.1", managed=managed),)
                                                           if audio else ())


def demo_spec() -> HostSpec:
    """The demo server: 2 sockets × 32 cores × 2 threads (512 GiB per node, 144 1 GiB hugepages reserved
    on each), 8 H100 SXM5 behind 4 PCIe switches on an HGX baseboard (18 NVLinks per GPU to 4 NVSwitches),
    2 H100 PCIe cards joined by NVLink bridges on a fifth switch, 5 ConnectX-7, NVMe, BMC VGA, and 14 VMs.
    Every GPU ownership state is present:

    - 0000:18:00.0 host nvidia, busy (processes)       - 0000:19:00.0 vfio-pci → train-a (same node)
    - 0000:3a:00.0 MIG 3g.40gb@0 2g.20gb@4 1g.10gb@6, MIG-backed vGPU on VFs 3a:00.4/.5
    - 0000:3b:00.0 time-sliced vGPU (mdev), 2 instances → vgpu-desk-1, vgpu-desk-2
    - 0000:9a:00.0 host nvidia, idle: the passthrough candidate (train-c wants it)
    - 0000:9b:00.0 vfio-pci → train-b (pinned across both nodes)
    - 0000:ba:00.0 unbound, in a non-viable IOMMU group (switch without ACS, with an NVMe and a NIC)
    - 0000:bb:00.0 host nvidia, link downtrained to x8 of x16 (PCIe replays counting), same non-viable
      group, 2 uncorrectable ECC errors in its lifetime (aggregate) and a row remap pending
    - 0000:da:00.0, 0000:db:00.0 (GPU indices 8 and 9) H100 PCIe, host nvidia, idle, in no VM's definition,
      each in its own viable group, joined by NVLink bridges (12 links each, remote type gpu) on node 1's
      second switch: the free pair a training VM is placed on

    The ConnectX-7 NICs (InfiniBand, RDMA devices mlx5_N) sit on the GPUs' switches: NIC0 (1a:00.0) with
    4 VFs (VF0 → net-fw, VF1 → train-a beside its GPU, VF2 → train-c across the sockets), NIC1 (3c:00.0)
    and NIC3 (bc:00.0) without VFs, NIC2 (9c:00.0) with 2 VFs (VF0 → train-b beside its GPU), NIC4
    (dc:00.0) with 2 free VFs (dc:00.1, dc:00.2 on mlx5_core) beside the H100 PCIe pair. `train-d` is shut
    off without devices or pins (8 vCPUs, 16 GiB): the VM a training `prepare` targets; `build-1` is the
    other plain shut-off VM.
    """
    cpu = CpuSpec(sockets=2, cores_per_socket=32, threads_per_core=2)
    host = "gpu-node-01"
    gpus, mdevs = _demo_gpus(host)
    bridges = _demo_pci_layout(gpus)
    vms = _demo_vms(cpu, mdevs)
    return HostSpec(hostname=host, cmdline=DEMO_CMDLINE, cpu=cpu, memory_per_node_mib=524288,
                    hugepages_1g_per_node=DEMO_HUGEPAGES_1G, iommu=True, host_bridges=bridges, vms=vms,
                    nvswitches=4, nvlink_bridges=(TRAINING_PAIR,))


def _demo_gpus(host: str) -> tuple[dict[str, GpuSpec], tuple[MdevSpec, ...]]:
    """The demo's 10 GPUs by role (see demo_spec), and the time-sliced GPU's 2 mdevs."""
    mdevs = tuple(MdevSpec(stable_uuid(host, "mdev", "0000:3b:00.0", i),
                           vgpu_type(H100_TIME_SLICED, "-10C").type_id) for i in range(2))
    mig = (mig_instance(H100, "3g.40gb", 0, 1), mig_instance(H100, "2g.20gb", 4, 5),
           mig_instance(H100, "1g.10gb", 6, 13))
    gpus = {
        "busy": GpuSpec(processes=(GpuProcessSpec(4242, "python3", 30208),
                                   GpuProcessSpec(4310, "torchrun", 41984)), load=(78, 18, 45),
                        ecc_aggregate_corrected=14, nvlink_errors=((7, "crc_flit", 3),)),
        "train-a": GpuSpec(),
        "mig": GpuSpec(mig_enabled=True, mig_instances=mig),
        "vgpu": GpuSpec(vgpu_types=H100_TIME_SLICED, mdevs=mdevs, load=(35, 15, 50)),
        "idle": GpuSpec(),
        "train-b": GpuSpec(),
        "unbound": GpuSpec(),
        "slow": GpuSpec(processes=(GpuProcessSpec(6001, "ollama", 12288),), load=(22, 15, 90),
                        remapped_rows_pending=1, ecc_aggregate_uncorrected=2, ecc_aggregate_corrected=311,
                        ecc_volatile_corrected=5, pcie_replay=1184),
        "pair-0": H100_PCIE,
        "pair-1": H100_PCIE,
    }
    return gpus, mdevs


def _demo_pci_layout(gpus: dict[str, GpuSpec]) -> tuple[HostBridge, ...]:
    """The demo's PCI tree: the chipset, 5 PCIe switches holding the GPUs (the MIG GPU with its MIG-backed
    vGPU VFs) and NICs, and an NVMe root port."""
    t3, t2 = vgpu_type(H100_MIG_BACKED, "-3-40C"), vgpu_type(H100_MIG_BACKED, "-2-20C")
    mig_vfs = (VfSpec("nvidia", vgpu_types=H100_MIG_BACKED, vgpu_type=t3.type_id, vgpu_gi_id=1),
               VfSpec("nvidia", vgpu_types=H100_MIG_BACKED, vgpu_type=t2.type_id, vgpu_gi_id=5),
               VfSpec("nvidia", vgpu_types=H100_MIG_BACKED), VfSpec("nvidia", vgpu_types=H100_MIG_BACKED))
    vfio = _GpuDrivers(driver="vfio-pci", override="vfio-pci", audio_driver="vfio-pci")
    bridges = (
        chipset(0),
        HostBridge(0x15, 0, (switch(1, 0x15, [
            gpu_functions(gpus["busy"], label="gpu0"),
            gpu_functions(gpus["train-a"], label="gpu1", **vfio),
            nic_functions(4, {0: "vfio-pci", 1: "vfio-pci"}, label="nic0")], label="sw0"),)),
        HostBridge(0x37, 0, (switch(1, 0x37, [
            gpu_functions(gpus["mig"], label="gpu2",
                          sriov=SriovSpec(32, 0x2330, mig_vfs, offset=4, vf_driver="nvidia")),
            gpu_functions(gpus["vgpu"], label="gpu3"),
            nic_functions(label="nic1")], label="sw1"),)),
        HostBridge(0x48, 0, (root_port(1, 0x49, nvme_functions("nvme0"), link=Link(4, 4)),)),
        HostBridge(0x97, 1, (switch(1, 0x97, [
            gpu_functions(gpus["idle"], label="gpu4", link=Link(1, 16, 5, 16)),
            gpu_functions(gpus["train-b"], label="gpu5", **vfio),
            nic_functions(2, {0: "vfio-pci"}, label="nic2")], label="sw2"),)),
        HostBridge(0xB7, 1, (switch(1, 0xB7, [
            gpu_functions(gpus["unbound"], label="gpu6", driver=None),
            gpu_functions(gpus["slow"], label="gpu7", link=Link(5, 8, 5, 16)),
            nic_functions(label="nic3"),
            nvme_functions("nvme1")], acs=False, label="sw3"),)),
        HostBridge(0xD7, 1, (switch(1, 0xD7, [
            gpu_functions(gpus["pair-0"], label="gpu8", device=H100_PCIE_DEVICE,
                          subsystem=H100_PCIE_SUBSYSTEM),
            gpu_functions(gpus["pair-1"], label="gpu9", device=H100_PCIE_DEVICE,
                          subsystem=H100_PCIE_SUBSYSTEM),
            nic_functions(2, label="nic4")], label="sw4"),)),
    )
    return bridges


def _demo_vms(cpu: CpuSpec, mdevs: tuple[MdevSpec, ...]) -> tuple[VmSpec, ...]:
    """The demo's 14 VMs: GPU passthrough, vGPU, MIG-backed vGPU, NIC passthrough and plain ones."""
    house = core_cpus(cpu, 0, range(0, 2))  # cores the host keeps for itself
    vms = (
        VmSpec("train-a", "running", 16, 131072, pins(cpu, 0, 2, 16), house, ("strict", (0,)), 2,
               _pci_hostdevs("0000:19:00.0") + (HostdevSpec("0000:1a:00.2"),), hugepages_kib=1048576),
        VmSpec("train-b", "running", 16, 131072, pins(cpu, 0, 10, 8) + pins(cpu, 1, 2, 8),
               core_cpus(cpu, 1, range(0, 2)), ("interleave", (0, 1)), 2,
               _pci_hostdevs("0000:9b:00.0") + (HostdevSpec("0000:9c:00.1"),)),
        # train-c's VF is on NIC0, across the sockets from its GPU (SYS): the Overview says so
        VmSpec("train-c", "shut off", 16, 131072, pins(cpu, 1, 16, 16), (), ("strict", (1,)), 2,
               _pci_hostdevs("0000:9a:00.0") + (HostdevSpec("0000:1a:00.3"),)),
        VmSpec("vgpu-desk-1", "running", 4, 16384, pins(cpu, 0, 14, 4), house, None, 2,
               (HostdevSpec(mdev_uuid=mdevs[0].uuid, managed=False),)),
        VmSpec("vgpu-desk-2", "paused", 4, 16384, (), (), None, 1,
               (HostdevSpec(mdev_uuid=mdevs[1].uuid, managed=False),)),
        VmSpec("mig-infer-a", "running", 8, 65536, pins(cpu, 0, 16, 8), house, ("strict", (0,)), 2,
               (HostdevSpec("0000:3a:00.4", managed=False),)),
        VmSpec("mig-infer-b", "shut off", 8, 65536, pins(cpu, 1, 6, 8), (), ("strict", (1,)), 2,
               (HostdevSpec("0000:3a:00.5", managed=False),)),
        VmSpec("net-fw", "running", 4, 8192, pins(cpu, 0, 20, 4), house, ("strict", (0,)), 2,
               (HostdevSpec("0000:1a:00.1"),)),
        VmSpec("web-1", "running", 2, 4096),
        VmSpec("web-2", "running", 2, 4096),
        VmSpec("db-1", "running", 8, 65536, pins(cpu, 1, 10, 8), core_cpus(cpu, 1, range(0, 2)),
               ("strict", (1,)), 2, hugepages_kib=1048576),
        VmSpec("build-1", "shut off", 4, 8192),
        VmSpec("train-d", "shut off", 8, 16384),  # the training VM to prepare: no devices, no pins
        VmSpec("legacy-app", "paused", 4, 8192, pins(cpu, 0, 22, 2, paired=False) +
               pins(cpu, 1, 14, 2, paired=False), tuple(range(cpu.count)), None, 1),
    )
    return vms


def small_spec(gpus: int = 2, iommu: bool = True) -> HostSpec:
    """One socket (16 cores × 2 threads, one node), `gpus` (1 or 2) H100 on their own root ports, an
    NVMe and 3 VMs: `vm-gpu` running (with the second GPU on vfio-pci when there is one and the IOMMU
    is on), `vm-idle` paused, `vm-off` shut off."""
    if gpus not in (1, 2):
        raise ValueError("small_spec has 1 or 2 GPUs")
    cpu = CpuSpec(sockets=1, cores_per_socket=16, threads_per_core=2, model_name="Intel(R) Xeon(R) Gold 6430")
    ports = [root_port(1, 0x18, gpu_functions(GpuSpec(processes=(GpuProcessSpec(2001, "python3", 8192),),
                                                      load=(50, 20, 30)), label="gpu0"))]
    hostdevs: tuple[HostdevSpec, ...] = ()
    if gpus == 2 and iommu:
        ports.append(root_port(2, 0x19, gpu_functions(GpuSpec(), label="gpu1", driver="vfio-pci",
                                                      override="vfio-pci", audio_driver="vfio-pci")))
        hostdevs = _pci_hostdevs("0000:19:00.0")
    elif gpus == 2:  # without an IOMMU vfio-pci cannot take the GPU: it stays on nvidia
        ports.append(root_port(2, 0x19, gpu_functions(GpuSpec(), label="gpu1")))
    ports.append(root_port(3, 0x1A, nvme_functions("nvme0"), link=Link(4, 4)))
    vms = (VmSpec("vm-gpu", "running", 4, 16384, pins(cpu, 0, 2, 4), (0, 16), ("strict", (0,)), 2, hostdevs),
           VmSpec("vm-idle", "paused", 2, 4096),
           VmSpec("vm-off", "shut off", 2, 4096, pins(cpu, 0, 8, 2, paired=False)))
    cmdline = "BOOT_IMAGE=/boot/vmlinuz-6.8.0-45-generic root=/dev/sda2 ro" + (
        " intel_iommu=on iommu=pt" if iommu else "")
    return HostSpec(hostname="gpu-small", cmdline=cmdline, cpu=cpu, memory_per_node_mib=131072,
                    hugepages_2m_per_node=1024, iommu=iommu,
                    host_bridges=(chipset(0, bmc_vga=False), HostBridge(0x17, 0, tuple(ports))), vms=vms)


def large_spec(gpus: int = 16, cpus: int = 256, vms: int = 500, free_gpus: int = 0) -> HostSpec:
    """A scalable host for benchmarks: 2 sockets (cpus/4 cores each, 2 threads), GPUs two per switch
    cycling through host / vfio (with a VM) / time-sliced vGPU (2 VMs) / MIG, then plain VMs up to
    `vms` in every state, one in three pinned. `free_gpus`: that many GPUs (every other one, then the
    rest) are idle on nvidia and in no VM instead, for placing a training VM; such a host has 2 TiB per
    node (8 GPUs' VRAM twice over fits on one)."""
    if cpus % 4 or cpus < 16:
        raise ValueError("cpus must be a multiple of 4 (2 sockets × 2 threads), at least 16")
    cpu = CpuSpec(sockets=2, cores_per_socket=cpus // 4, threads_per_core=2)
    host = "gpu-large"
    by_bus: dict[tuple[int, int], list] = {}
    hostdev_vms: list[VmSpec] = []
    switches = (gpus + 1) // 2
    for sw in range(switches):
        domain, bus = divmod(sw, 15)
        bus = 0x08 + bus * 16
        node = 0 if sw < (switches + 1) // 2 else 1
        ends = []
        for k in range(2):
            i = sw * 2 + k
            if i >= gpus:
                break
            addr = f"{domain:04x}:{bus + 3 + k:02x}:00.0"
            kind = "free" if _free(i, gpus, free_gpus) else ("host", "vfio", "vgpu", "mig")[i % 4]
            fns, held = _large_gpu(cpu, host, i, kind, addr, node)
            ends.append(fns)
            hostdev_vms += held
        ends.append(nic_functions(4, label=f"nic{sw}"))
        by_bus.setdefault((domain, node), []).append(HostBridge(bus, node, (switch(1, bus, ends),), domain))
    bridges = (chipset(0),) + tuple(hb for v in by_bus.values() for hb in v)
    plain = []
    states = ("running", "running", "running", "paused", "shut off")
    per_node = cpu.cores_per_socket
    for n in range(max(0, vms - len(hostdev_vms))):
        pinned = n % 3 == 0
        node, first = n % 2, 2 + (n * 2) % max(1, per_node - 4)
        plain.append(VmSpec(f"vm-{n:04d}", states[n % len(states)], 2 if n % 2 else 4, 4096,
                            pins(cpu, node, first, 2 if n % 2 else 4) if pinned else (),
                            numatune=("strict", (node,)) if pinned else None, threads_per_core=2))
    return HostSpec(hostname=host, cmdline=LARGE_CMDLINE, cpu=cpu,
                    memory_per_node_mib=2097152 if free_gpus else 1048576,
                    hugepages_1g_per_node=64, host_bridges=bridges, vms=tuple(hostdev_vms + plain))


def _large_gpu(cpu: CpuSpec, host: str, i: int, kind: str, addr: str, node: int) -> tuple[tuple, list[VmSpec]]:
    """large_spec's GPU i of `kind` (free, host, vfio, vgpu, mig) at `addr`, and the VMs that hold it."""
    if kind == "vfio":
        first = 2 + (i // 4) % max(1, cpu.cores_per_socket - 6)
        return (gpu_functions(GpuSpec(), driver="vfio-pci", override="vfio-pci", audio_driver="vfio-pci",
                              label=f"gpu{i}"),
                [VmSpec(f"gpu-vm-{i}", "running", 8, 32768, pins(cpu, node, first, 8), numatune=("strict", (node,)),
                        threads_per_core=2, hostdevs=_pci_hostdevs(addr))])
    if kind == "vgpu":
        md = tuple(MdevSpec(stable_uuid(host, "mdev", addr, j), H100_TIME_SLICED[3].type_id) for j in range(2))
        return (gpu_functions(GpuSpec(vgpu_types=H100_TIME_SLICED, mdevs=md, load=(30, 10, 40)), label=f"gpu{i}"),
                [VmSpec(f"vgpu-vm-{i}-{j}", "running", 4, 16384, hostdevs=(HostdevSpec(mdev_uuid=m.uuid, managed=False),))
                 for j, m in enumerate(md)])
    if kind == "free":
        return gpu_functions(GpuSpec(), label=f"gpu{i}"), []
    if kind == "mig":
        return gpu_functions(GpuSpec(mig_enabled=True, mig_instances=(
            mig_instance(H100, "3g.40gb", 0, 1), mig_instance(H100, "3g.40gb", 4, 2))), label=f"gpu{i}"), []
    return gpu_functions(GpuSpec(processes=(GpuProcessSpec(1000 + i, "python3", 20480),), load=(60, 20, 60)),
                         label=f"gpu{i}"), []


def _free(i: int, gpus: int, free: int) -> bool:
    """GPU i is one of the `free` idle ones: the even-numbered first, then the odd ones."""
    evens = (gpus + 1) // 2
    return (i % 2 == 0 and i // 2 < free) or (i % 2 == 1 and i // 2 < free - evens)
