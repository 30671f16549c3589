"""MIG profile tables of the MIG-capable GPUs the console knows, as plain Python data.

Transcribed once from the project's reference table (`reference/mig_profiles.json` in the shared
reference material) so nothing reads that folder at run time. Two ids per profile: `enum` is the NVML
enum passed to `nvmlDeviceGetGpuInstanceProfileInfo`, `profile_id` is `info.id`, the value that create
calls and `nvidia-smi mig -cgi` take. Placements are (start, size) in memory slices.

Real reference data of the core: the NVML source, MIG actions and the demo's simulated NVML all read it.
"""
from __future__ import annotations

from dataclasses import dataclass

Placement = tuple[int, int]  # (start, size) in memory slices (GPU instances) or compute slices (CIs)


@dataclass(frozen=True)
class GiProfile:
    """One GPU instance profile as `nvidia-smi mig -lgip` lists it."""
    name: str  # e.g. "3g.40gb", "1g.10gb+me"
    enum: int  # NVML_GPU_INSTANCE_PROFILE_* value
    profile_id: int  # nvmlGpuInstanceProfileInfo_t.id
    slice_count: int  # compute slices
    max_instances: int
    sm_count: int
    memory_mib: int
    placements: tuple[Placement, ...]
    ce: int | None = None  # engine counts; None = not recorded in the reference table
    dec: int | None = None
    jpeg: int | None = None
    ofa: int | None = None
    memory_mib_other_driver: int | None = None  # the size another driver branch reports


@dataclass(frozen=True)
class GpuMigTable:
    model: str  # e.g. "H100-80GB-HBM3"
    pci_device_id: int  # NVML pciDeviceId: device << 16 | vendor, e.g. 0x233010DE
    memory_slices: int
    compute_slices: int
    profiles: tuple[GiProfile, ...]
    note: str = ""

    def by_id(self, profile_id: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.profile_id == profile_id), None)

    def by_enum(self, enum: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.enum == enum), None)

    def by_name(self, name: str) -> GiProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True)
class CiProfile:
    """A compute instance profile inside a GPU instance with `gi_slices` compute slices. For CI
    profiles `nvmlComputeInstanceProfileInfo_t.id` equals the enum."""
    enum: int  # NVML_COMPUTE_INSTANCE_PROFILE_*
    slice_count: int
    max_instances: int
    placements: tuple[Placement, ...] | None  # None: the reference table records none


GI_PROFILE_ENUM: dict[str, int] = {
    "1_SLICE": 0,
    "2_SLICE": 1,
    "3_SLICE": 2,
    "4_SLICE": 3,
    "7_SLICE": 4,
    "8_SLICE": 5,
    "6_SLICE": 6,
    "1_SLICE_REV1": 7,
    "2_SLICE_REV1": 8,
    "1_SLICE_REV2": 9,
    "1_SLICE_GFX": 10,
    "2_SLICE_GFX": 11,
    "4_SLICE_GFX": 12,
    "1_SLICE_NO_ME": 13,
    "2_SLICE_NO_ME": 14,
    "1_SLICE_ALL_ME": 15,
    "2_SLICE_ALL_ME": 16,
    "3_SLICE_GFX": 17,
}
CI_PROFILE_ENUM: dict[str, int] = {
    "1_SLICE": 0,
    "2_SLICE": 1,
    "3_SLICE": 2,
    "4_SLICE": 3,
    "7_SLICE": 4,
    "8_SLICE": 5,
    "6_SLICE": 6,
    "1_SLICE_REV1": 7,
    "7_SLICE_NVL": 8,
}
# compute slices of each CI profile enum (1_SLICE_REV1 is a 1-slice profile, 7_SLICE_NVL a 7-slice one)
CI_PROFILE_SLICES: dict[int, int] = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 7}

TABLES: dict[str, GpuMigTable] = {
    "A100-SXM4-40GB": GpuMigTable(
        model="A100-SXM4-40GB", pci_device_id=0x20B010DE, memory_slices=8, compute_slices=7,
        profiles=(
            GiProfile("1g.5gb", enum=0, profile_id=19, slice_count=1, max_instances=7,
                      sm_count=14, memory_mib=4864,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
                      ce=1, dec=0, jpeg=0, ofa=0),
            GiProfile("1g.5gb+me", enum=7, profile_id=20, slice_count=1, max_instances=1,
                      sm_count=14, memory_mib=4864,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
                      ce=1, dec=1, jpeg=1, ofa=1),
            GiProfile("1g.10gb", enum=9, profile_id=15, slice_count=1, max_instances=4,
                      sm_count=14, memory_mib=9856,
                      placements=((0, 2), (2, 2), (4, 2), (6, 2)),
                      memory_mib_other_driver=9984),
            GiProfile("2g.10gb", enum=1, profile_id=14, slice_count=2, max_instances=3,
                      sm_count=28, memory_mib=9856,
                      placements=((0, 2), (2, 2), (4, 2)),
                      ce=2, dec=1, memory_mib_other_driver=9984),
            GiProfile("3g.20gb", enum=2, profile_id=9, slice_count=3, max_instances=2,
                      sm_count=42, memory_mib=19968,
                      placements=((0, 4), (4, 4)),
                      ce=3, dec=2, memory_mib_other_driver=20096),
            GiProfile("4g.20gb", enum=3, profile_id=5, slice_count=4, max_instances=1,
                      sm_count=56, memory_mib=19968,
                      placements=((0, 4),),
                      ce=4, dec=2, memory_mib_other_driver=20096),
            GiProfile("7g.40gb", enum=4, profile_id=0, slice_count=7, max_instances=1,
                      sm_count=98, memory_mib=40192,
                      placements=((0, 8),),
                      ce=7, dec=5, jpeg=1, ofa=1, memory_mib_other_driver=40448),
        ),
    ),
    "A100-SXM4-80GB": GpuMigTable(
        model="A100-SXM4-80GB", pci_device_id=0x20B210DE, memory_slices=8, compute_slices=7,
        profiles=(
            GiProfile("1g.10gb", enum=0, profile_id=19, slice_count=1, max_instances=7,
                      sm_count=14, memory_mib=9728,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
                      memory_mib_other_driver=9984),
            GiProfile("1g.10gb+me", enum=7, profile_id=20, slice_count=1, max_instances=1,
                      sm_count=14, memory_mib=9728,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
                      memory_mib_other_driver=9984),
            GiProfile("1g.20gb", enum=9, profile_id=15, slice_count=1, max_instances=4,
                      sm_count=14, memory_mib=19968,
                      placements=((0, 2), (2, 2), (4, 2), (6, 2))),
            GiProfile("2g.20gb", enum=1, profile_id=14, slice_count=2, max_instances=3,
                      sm_count=28, memory_mib=19968,
                      placements=((0, 2), (2, 2), (4, 2))),
            GiProfile("3g.40gb", enum=2, profile_id=9, slice_count=3, max_instances=2,
                      sm_count=42, memory_mib=40192,
                      placements=((0, 4), (4, 4))),
            GiProfile("4g.40gb", enum=3, profile_id=5, slice_count=4, max_instances=1,
                      sm_count=56, memory_mib=40192,
                      placements=((0, 4),)),
            GiProfile("7g.80gb", enum=4, profile_id=0, slice_count=7, max_instances=1,
                      sm_count=98, memory_mib=80896,
                      placements=((0, 8),)),
        ),
    ),
    "H100-80GB-HBM3": GpuMigTable(
        model="H100-80GB-HBM3", pci_device_id=0x233010DE, memory_slices=8, compute_slices=7,
        profiles=(
            GiProfile("1g.10gb", enum=0, profile_id=19, slice_count=1, max_instances=7,
                      sm_count=16, memory_mib=9984,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
                      ce=1, dec=1, jpeg=1, ofa=0, memory_mib_other_driver=9856),
            GiProfile("1g.10gb+me", enum=7, profile_id=20, slice_count=1, max_instances=1,
                      sm_count=16, memory_mib=9984,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)),
                      ofa=1, memory_mib_other_driver=9856),
            GiProfile("1g.20gb", enum=9, profile_id=15, slice_count=1, max_instances=4,
                      sm_count=26, memory_mib=20096,
                      placements=((0, 2), (2, 2), (4, 2), (6, 2))),
            GiProfile("2g.20gb", enum=1, profile_id=14, slice_count=2, max_instances=3,
                      sm_count=32, memory_mib=20096,
                      placements=((0, 2), (2, 2), (4, 2)),
                      ce=2, dec=2, jpeg=2),
            GiProfile("3g.40gb", enum=2, profile_id=9, slice_count=3, max_instances=2,
                      sm_count=60, memory_mib=40448,
                      placements=((0, 4), (4, 4)),
                      ce=3, dec=3),
            GiProfile("4g.40gb", enum=3, profile_id=5, slice_count=4, max_instances=1,
                      sm_count=64, memory_mib=40448,
                      placements=((0, 4),),
                      ce=4, dec=4),
            GiProfile("7g.80gb", enum=4, profile_id=0, slice_count=7, max_instances=1,
                      sm_count=132, memory_mib=81152,
                      placements=((0, 8),),
                      ce=8, dec=7, jpeg=7, ofa=1),
        ),
    ),
    "H200-141GB": GpuMigTable(
        model="H200-141GB", pci_device_id=0x233510DE, memory_slices=8, compute_slices=7,
        note=('ids/instances/memory/SMs from nvidia-smi mig -lgip in NVIDIA/mig-parted#120; placements '
              'NOT observed, assumed identical to H100 (same 7/8 geometry)'),
        profiles=(
            GiProfile("1g.18gb", enum=0, profile_id=19, slice_count=1, max_instances=7,
                      sm_count=16, memory_mib=16384,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1))),
            GiProfile("1g.18gb+me", enum=7, profile_id=20, slice_count=1, max_instances=1,
                      sm_count=16, memory_mib=16384,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1))),
            GiProfile("1g.35gb", enum=9, profile_id=15, slice_count=1, max_instances=4,
                      sm_count=26, memory_mib=33024,
                      placements=((0, 2), (2, 2), (4, 2), (6, 2))),
            GiProfile("2g.35gb", enum=1, profile_id=14, slice_count=2, max_instances=3,
                      sm_count=32, memory_mib=33024,
                      placements=((0, 2), (2, 2), (4, 2))),
            GiProfile("3g.71gb", enum=2, profile_id=9, slice_count=3, max_instances=2,
                      sm_count=60, memory_mib=71168,
                      placements=((0, 4), (4, 4))),
            GiProfile("4g.71gb", enum=3, profile_id=5, slice_count=4, max_instances=1,
                      sm_count=64, memory_mib=71168,
                      placements=((0, 4),)),
            GiProfile("7g.141gb", enum=4, profile_id=0, slice_count=7, max_instances=1,
                      sm_count=132, memory_mib=143104,
                      placements=((0, 8),),
                      ce=8, dec=7, ofa=1),
        ),
    ),
    "A30-24GB": GpuMigTable(
        model="A30-24GB", pci_device_id=0x20B710DE, memory_slices=4, compute_slices=4,
        profiles=(
            GiProfile("1g.6gb", enum=0, profile_id=14, slice_count=1, max_instances=4,
                      sm_count=14, memory_mib=5952,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1)),
                      dec=1),
            GiProfile("1g.6gb+me", enum=7, profile_id=21, slice_count=1, max_instances=1,
                      sm_count=14, memory_mib=5952,
                      placements=((0, 1), (1, 1), (2, 1), (3, 1))),
            GiProfile("2g.12gb", enum=1, profile_id=5, slice_count=2, max_instances=2,
                      sm_count=28, memory_mib=11968,
                      placements=((0, 2), (2, 2)),
                      dec=2),
            GiProfile("2g.12gb+me", enum=8, profile_id=6, slice_count=2, max_instances=1,
                      sm_count=28, memory_mib=11968,
                      placements=((0, 2), (2, 2))),
            GiProfile("4g.24gb", enum=3, profile_id=0, slice_count=4, max_instances=1,
                      sm_count=56, memory_mib=24000,
                      placements=((0, 4),),
                      dec=4, memory_mib_other_driver=24064),
        ),
    ),
}

# CI profiles by the compute-slice count of the GPU instance they live in
CI_PROFILES: dict[int, tuple[CiProfile, ...]] = {
    7: (
        CiProfile(enum=0, slice_count=1, max_instances=7,
                  placements=((0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1))),
        CiProfile(enum=1, slice_count=2, max_instances=3,
                  placements=((0, 2), (2, 2), (4, 2))),
        CiProfile(enum=2, slice_count=3, max_instances=2,
                  placements=((0, 3), (4, 3))),
        CiProfile(enum=3, slice_count=4, max_instances=1,
                  placements=None),
        CiProfile(enum=4, slice_count=7, max_instances=1,
                  placements=((0, 7),)),
    ),
    4: (
        CiProfile(enum=0, slice_count=1, max_instances=4,
                  placements=((0, 1), (1, 1), (2, 1), (3, 1))),
        CiProfile(enum=1, slice_count=2, max_instances=2,
                  placements=((0, 2), (2, 2))),
        CiProfile(enum=3, slice_count=4, max_instances=1,
                  placements=((0, 4),)),
    ),
    3: (
        CiProfile(enum=0, slice_count=1, max_instances=3,
                  placements=((0, 1), (1, 1), (2, 1))),
        CiProfile(enum=1, slice_count=2, max_instances=1,
                  placements=((0, 2),)),
        CiProfile(enum=2, slice_count=3, max_instances=1,
                  placements=((0, 3),)),
    ),
    2: (
        CiProfile(enum=0, slice_count=1, max_instances=2,
                  placements=((0, 1), (1, 1))),
        CiProfile(enum=1, slice_count=2, max_instances=1,
                  placements=((0, 2),)),
    ),
    1: (
        CiProfile(enum=0, slice_count=1, max_instances=1,
                  placements=((0, 1),)),
    ),
}


def table_for_model(model: str) -> GpuMigTable | None:
    """The table for a model key ("A100-SXM4-40GB"), None when the model has no MIG."""
    return TABLES.get(model)


def table_for_pci_device_id(pci_device_id: int) -> GpuMigTable | None:
    """Look up by NVML's pciDeviceId (0x20B010DE) or by the bare 16-bit PCI device id (0x20B0)."""
    for t in TABLES.values():
        if pci_device_id in (t.pci_device_id, t.pci_device_id >> 16):
            return t
    return None


def ci_profiles_for(gi_slice_count: int) -> tuple[CiProfile, ...]:
    """Compute instance profiles available inside a GPU instance of `gi_slice_count` compute slices."""
    return CI_PROFILES.get(gi_slice_count, ())
