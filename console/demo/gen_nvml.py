"""nvml.json: the state the simulated NVML library serves (format in docs/demo-host.md).

It lists every NVIDIA GPU of the host, whatever its driver: the simulated library hides the ones whose
sysfs driver link is not nvidia, as the real driver cannot see them."""
from __future__ import annotations

import hashlib

from nodeconsole.console.demo.gen_libvirt import vm_uuid
from nodeconsole.console.demo.gen_pci import Func, PciLayout
from nodeconsole.console.demo.spec import NVIDIA, GpuSpec, HostSpec, VgpuTypeSpec, VmSpec, stable_uuid

LIVE = ("running", "paused")  # NVML lists a vGPU as active only while its VM exists as a process


def _digits(seed: str, n: int) -> int:
    return int(hashlib.sha256(seed.encode()).hexdigest(), 16) % (10 ** n)


def nvml_state(spec: HostSpec, pci: PciLayout) -> dict:
    seed = spec.seed or spec.hostname
    owners = _vm_by_device(spec)
    types: dict[int, VgpuTypeSpec] = {}
    gpus = []
    for addr, f in pci.funcs.items():
        gpu = f.gpu
        if gpu is None or f.vendor != NVIDIA:
            continue
        vf_types = [t for va in f.vfs for t in pci.funcs[va].vf_vgpu_types]
        for t in list(gpu.vgpu_types) + vf_types:
            types.setdefault(t.type_id, t)
        supported = sorted({t.type_id for t in list(gpu.vgpu_types) + vf_types})
        link = f.link
        entry = {
            "address": addr,
            "model": gpu.model,
            "pci_device_id": f.device << 16 | f.vendor,
            "name": gpu.name,
            "uuid": "GPU-" + stable_uuid(seed, "gpu", addr),
            "serial": f"1654{_digits(seed + addr, 9):09d}",
            "memory_total_mib": gpu.memory_total_mib,
            "power_limit_w": gpu.power_limit_w,
            "pcie": ({"gen": link.gen, "width": link.width, "max_gen": link.max_gen or link.gen,
                      "max_width": link.max_width or link.width} if link else None),
            "mig": _mig(seed, addr, gpu),
            "vgpu": {"supported_type_ids": supported, "active": _active_vgpus(spec, seed, pci, f, owners)},
            "processes": [{"pid": p.pid, "name": p.name, "used_mib": p.used_mib} for p in gpu.processes],
            "ecc": {"volatile_uncorrected": gpu.ecc_volatile_uncorrected,
                    "aggregate_uncorrected": gpu.ecc_aggregate_uncorrected,
                    "volatile_corrected": gpu.ecc_volatile_corrected,
                    "aggregate_corrected": gpu.ecc_aggregate_corrected},
            "retired_pages": gpu.retired_pages,
            "remapped_rows": {"pending": gpu.remapped_rows_pending, "failure": gpu.remapped_rows_failure},
            "not_supported": _not_supported(gpu),
            "clocks": dict(BOARD_CLOCKS.get(gpu.model, ())),
            "clock_events": list(gpu.clock_events),
            "pcie_replay": gpu.pcie_replay,
            **_nvlink(spec, pci, addr, gpu),
            "lost": gpu.lost,
            "persistence_mode": int(spec.persistence_mode),
            "load": {"base": gpu.load[0], "amplitude": gpu.load[1], "period_s": gpu.load[2]},
        }
        gpus.append(entry)
    return {
        "driver_version": spec.nvml_driver_version,
        "cuda_driver_version": spec.cuda_driver_version,
        "gpus": gpus,
        "vgpu_types": {str(tid): {"name": t.name, "framebuffer_mib": t.framebuffer_mib,
                                  "max_instances": t.max_instances} for tid, t in sorted(types.items())},
    }


SXM5_MODEL = "H100-80GB-HBM3"  # the H100 SXM5 module
PCIE_MODEL = "H100-PCIe"  # the H100 PCIe 80GB card
# Neither the SXM module nor the passively cooled PCIe card has fans (nvidia-smi: Fan N/A); page retirement
# gave way to row remapping on Ampere. Their display queries answer (Disabled: nvidia-smi's Disp.A Off).
SXM5_NOT_SUPPORTED = ("fan", "retired_pages")
BOARD_NOT_SUPPORTED = {SXM5_MODEL: SXM5_NOT_SUPPORTED, PCIE_MODEL: SXM5_NOT_SUPPORTED}
H100_SXM5_CLOCKS = (("sm_max", 1980), ("mem_max", 2619), ("video_max", 1755), ("sm_idle", 345))
H100_PCIE_CLOCKS = (("sm_max", 1755), ("mem_max", 1593), ("video_max", 1755), ("sm_idle", 345))  # HBM2e
BOARD_CLOCKS = {SXM5_MODEL: H100_SXM5_CLOCKS, PCIE_MODEL: H100_PCIE_CLOCKS}
H100_NVLINKS = 18  # NVLink 4 links of an H100 SXM5
H100_PCIE_NVLINKS = 12  # NVLink 4 links of an H100 PCIe card, over its 3 bridge connectors


def nvswitch_address(i: int) -> str:
    """The PCI address of the baseboard's NVSwitch `i` (buses 05-08, where HGX boards put them)."""
    return f"0000:{5 + i:02x}:00.0"


def _not_supported(gpu: GpuSpec) -> list[str]:
    board = BOARD_NOT_SUPPORTED.get(gpu.model, ())
    return sorted(set(gpu.not_supported) | set(board))


def _nvlink(spec: HostSpec, pci: PciLayout, addr: str, gpu: GpuSpec) -> dict:
    """NVLink and fabric state: on an NVSwitch baseboard an SXM module's links go to the switches in turn
    (18 links over 4 switches: 5, 4, 5, 4), and the GPU is in the fabric (Fabric Manager done); a PCIe card
    joined to another by NVLink bridges has all its links to that GPU (remote type gpu, its PCI device
    id) and no fabric; nothing otherwise."""
    errors: dict[str, dict[str, int]] = {}
    for link, counter, count in gpu.nvlink_errors:
        errors.setdefault(str(link), {})[counter] = count
    peer = next((b if a == addr else a for a, b in spec.nvlink_bridges if addr in (a, b)), None)
    if peer is not None and peer in pci.funcs:
        p = pci.funcs[peer]
        return {"nvlink": {"version": 4, "remote_type": "gpu", "remotes": [peer] * H100_PCIE_NVLINKS,
                           "remote_device_id": p.device << 16 | p.vendor,
                           "down": list(gpu.nvlink_down), "errors": errors}}
    if not spec.nvswitches or gpu.model != SXM5_MODEL:
        return {}
    n = spec.nvswitches
    return {"nvlink": {"version": 4, "remote_type": "switch",
                       "remotes": [nvswitch_address(link * n // H100_NVLINKS) for link in range(H100_NVLINKS)],
                       "down": list(gpu.nvlink_down), "errors": errors},
            "fabric": {"state": "completed", "status": 0, "clique_id": 0,
                       "cluster_uuid": "00000000-0000-0000-0000-000000000000"}}


def _mig(seed: str, addr: str, gpu: GpuSpec) -> dict:
    pending = gpu.mig_enabled if gpu.mig_pending is None else gpu.mig_pending
    instances = [{"gi_id": m.gi_id, "profile_id": m.profile_id, "start": m.start, "size": m.size,
                  "uuid": "MIG-" + stable_uuid(seed, "mig", addr, m.gi_id),
                  "compute_instances": [{"ci_id": 0, "profile_id": m.ci_profile_id}]}
                 for m in (gpu.mig_instances if gpu.mig_enabled else ())]
    return {"capable": gpu.mig_capable, "current": int(gpu.mig_enabled), "pending": int(pending),
            "instances": instances}


def _vm_by_device(spec: HostSpec) -> dict[str, VmSpec]:
    """PCI address or mdev UUID → the live VM holding it."""
    out: dict[str, VmSpec] = {}
    for vm in spec.vms:
        if vm.state not in LIVE:
            continue
        for hd in vm.hostdevs:
            out[hd.mdev_uuid or hd.address or ""] = vm
    return out


def _active_vgpus(spec: HostSpec, seed: str, pci: PciLayout, f: Func, owners: dict[str, VmSpec]) -> list[dict]:
    out = []
    mdevs = f.gpu.mdevs if f.gpu else ()
    items: list[tuple[str, int, str, int | None]] = [(m.uuid, m.type_id, m.uuid, None) for m in mdevs]
    for va in f.vfs:
        vf = pci.funcs[va].vf
        if vf and vf.vgpu_type:
            items.append((va, vf.vgpu_type, "", vf.vgpu_gi_id))
    for key, type_id, mdev_uuid, gi_id in items:
        vm = owners.get(key)
        if vm is None:
            continue
        out.append({"instance_id": int(hashlib.sha256(f"{seed}{key}".encode()).hexdigest()[:7], 16),
                    "type_id": type_id, "uuid": stable_uuid(seed, "vgpu", key), "mdev_uuid": mdev_uuid,
                    "vm_id": vm.name, "vm_uuid": vm_uuid(spec, vm), "gi_id": gi_id})
    return out
