"""MIG through the real pynvml wrappers over the simulated library: profile tables and placements, the
driver's placement order, argument passing, instance lifetime, MIG mode, persistence."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from nodeconsole.console import mig_profiles, nvml_mig
from nodeconsole.console.demo.nvml_sim import NvmlAbiError, SimulatedNvml, uninstall
from nodeconsole.console.sources.nvml import NvmlSource
from tests.console.nvml_states import H100, mig_state

REPO = Path(__file__).resolve().parents[2]
BASE = (19, 14, 9, 5, 0)  # 1g, 2g, 3g, 4g, 7g on A100/H100/H200


@pytest.fixture(autouse=True)
def _no_library_left_behind():
    yield
    uninstall()


def _open(state, privileged=True, **kw):
    sim = SimulatedNvml(state, privileged=privileged, **kw).install()
    pynvml.nvmlInit()
    return sim, pynvml.nvmlDeviceGetHandleByIndex(0)


def _layout(handle):
    profiles = nvml_mig.gi_profiles(handle)
    return [(g.profile_id, g.start, g.size) for g in nvml_mig.gpu_instances(handle, profiles)]


def _code(fn, *args):
    try:
        fn(*args)
    except pynvml.NVMLError as e:
        return e.value
    return pynvml.NVML_SUCCESS


@pytest.mark.parametrize("model", sorted(mig_profiles.TABLES))
def test_profiles_and_placements_equal_the_reference_table(model, shared_dir):
    ref = json.loads((shared_dir / "reference/mig_profiles.json").read_text())["gpus"][model]
    _, h = _open(mig_state(model))
    got = {p.profile_id: p for p in nvml_mig.gi_profiles(h)}
    assert sorted(got) == sorted(p["profile_id"] for p in ref["profiles"])
    for p in ref["profiles"]:
        g = got[p["profile_id"]]
        assert (g.name, g.enum, g.slice_count, g.max_instances, g.memory_mib, g.sm_count) == (
            p["name"], p["nvml_enum_value"], p["slice_count"], p["max_instances"], p["memory_size_mib"],
            p["sm_count"])
        assert list(g.placements) == [(q["start"], q["size"]) for q in p["placements"]]


def test_profile_info_is_read_by_enum_and_unknown_enums_are_refused():
    _, h = _open(mig_state("A100-SXM4-40GB"))
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.id, info.sliceCount, info.name) == (9, 3, "MIG 3g.20gb")
    v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, version=1)
    assert (v1.id, v1.memorySizeMB) == (9, info.memorySizeMB)
    assert _code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE) \
        == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, 0x40) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    # create calls take the profile id, not the enum: enum 2 is not an A100 profile id
    assert _code(nvml_mig.create_gpu_instance, h, 2) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_placement_by_reference_works_and_by_value_is_refused():
    _, h = _open(mig_state("H100-80GB-HBM3"))
    place = pynvml.c_nvmlGpuInstancePlacement_t(4, 4)
    with pytest.raises(NvmlAbiError, match="by value"):
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, place)
    assert _layout(h) == []  # nothing was created by the refused call
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, ctypes.byref(place))
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (2, 9, 4, 4)
    assert ctypes.cast(info.device, ctypes.c_void_p).value == ctypes.cast(h, ctypes.c_void_p).value


def test_driver_order_makes_1g_1g_2g_then_3g_fail_but_explicit_placements_fit():
    _, h = _open(mig_state("A100-SXM4-40GB"))
    for pid in (19, 19, 14):
        nvml_mig.create_gpu_instance(h, pid)
    assert _layout(h) == [(14, 2, 2), (19, 5, 1), (19, 6, 1)]  # the driver fills from the top
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9) == 0
    assert _code(nvml_mig.create_gpu_instance, h, 9) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES

    _, h = _open(mig_state("A100-SXM4-40GB"))
    for pid, place in ((19, (0, 1)), (19, (1, 1)), (14, (2, 2)), (9, (4, 4))):
        nvml_mig.create_gpu_instance(h, pid, place)
    assert _layout(h) == [(19, 0, 1), (19, 1, 1), (14, 2, 2), (9, 4, 4)]


def test_overlaps_bad_placements_and_limits():
    _, h = _open(mig_state("A100-SXM4-40GB"))
    nvml_mig.create_gpu_instance(h, 9, (0, 4))
    assert _code(nvml_mig.create_gpu_instance, h, 14, (2, 2)) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert _code(nvml_mig.create_gpu_instance, h, 9, (2, 4)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert _code(nvml_mig.create_gpu_instance, h, 19, (7, 1)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    # 4g can only start at 0
    assert _code(nvml_mig.create_gpu_instance, h, 5) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert [pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p) for p in BASE] == [3, 1, 1, 0, 0]
    nvml_mig.create_gpu_instance(h, 9)
    assert _code(nvml_mig.create_gpu_instance, h, 9) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert [pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p) for p in BASE] == [0, 0, 0, 0, 0]


def test_there_are_exactly_19_maximal_layouts_of_the_base_profiles():
    _, h = _open(mig_state("A100-SXM4-40GB"))
    places = {p.profile_id: p.placements for p in nvml_mig.gi_profiles(h) if p.profile_id in BASE}
    found: set[frozenset] = set()

    def walk(made):
        for pid in BASE:
            for place in places[pid]:
                if (pid, place) in made or (made and (pid, place) < max(made)):
                    continue
                try:
                    gi = nvml_mig.create_gpu_instance(h, pid, place)
                except pynvml.NVMLError_InsufficientResources:
                    continue
                walk(made | {(pid, place)})
                pynvml.nvmlGpuInstanceDestroy(gi)
        if all(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p) == 0 for p in BASE):
            found.add(frozenset(made))

    walk(frozenset())
    assert len(found) == 19


def test_compute_instances_and_mig_devices():
    _, h = _open(mig_state("H100-80GB-HBM3"))
    gi = nvml_mig.create_gpu_instance(h, 0)  # 7g.80gb
    assert [(c.name, c.slice_count) for c in nvml_mig.ci_profiles(gi)] == [
        ("1c.7g.80gb", 1), ("2c.7g.80gb", 2), ("3c.7g.80gb", 3), ("4c.7g.80gb", 4), ("7g.80gb", 7)]
    ci_places = ctypes.c_uint(0)
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 2, None, ctypes.byref(ci_places))
    assert ci_places.value == 2
    for _ in range(7):
        nvml_mig.create_compute_instance(gi, 0)
    assert _code(nvml_mig.create_compute_instance, gi, 0) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    cis = nvml_mig.compute_instances(gi, nvml_mig.ci_profiles(gi))
    assert [(c.ci_id, c.start, c.size) for c in cis] == [(i, i, 1) for i in range(7)]

    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    uuids = nvml_mig.mig_device_uuids(h)
    assert sorted(uuids) == [(0, i) for i in range(7)] and len(set(uuids.values())) == 7
    assert all(u.startswith("MIG-") for u in uuids.values())
    mig = pynvml.nvmlDeviceGetHandleByUUID(uuids[(0, 3)].encode())
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert pynvml.nvmlDeviceIsMigDeviceHandle(h).value == 0
    assert (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (0, 3)
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(h)
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1c.7g.80gb"
    with pytest.raises(pynvml.NVMLError_NotSupported):  # NVML has no utilization for MIG devices
        pynvml.nvmlDeviceGetUtilizationRates(mig)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(h)


def test_destroying_a_gpu_instance_that_is_in_use():
    sim, h = _open(mig_state("A100-SXM4-40GB"))
    gi = nvml_mig.create_gpu_instance(h, 9, (4, 4))
    ci = nvml_mig.create_compute_instance(gi, nvml_mig.full_ci_profile(gi).profile_id)
    assert _code(pynvml.nvmlGpuInstanceDestroy, gi) == pynvml.NVML_ERROR_IN_USE
    gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
    sim.gpu_state(H100)["processes"] = [{"pid": 7, "name": "train", "used_mib": 100, "gi_id": gi_id,
                                         "ci_id": 0}]
    assert _code(pynvml.nvmlComputeInstanceDestroy, ci) == pynvml.NVML_ERROR_IN_USE
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig)] == [7]
    sim.gpu_state(H100)["processes"] = []
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert _layout(h) == []
    assert _code(pynvml.nvmlGpuInstanceGetInfo, gi) == pynvml.NVML_ERROR_INVALID_ARGUMENT  # stale handle


def test_changes_need_privilege():
    _, h = _open(mig_state("A100-SXM4-40GB", current=0), privileged=False)
    assert _code(pynvml.nvmlDeviceSetMigMode, h, 1) == pynvml.NVML_ERROR_NO_PERMISSION
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
    _, h = _open(mig_state("A100-SXM4-40GB"), privileged=False)
    assert _code(nvml_mig.create_gpu_instance, h, 9) == pynvml.NVML_ERROR_NO_PERMISSION
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9) == 2  # reading needs none


def test_mig_mode_changes():
    # Ampere, idle: applied at once
    _, h = _open(mig_state("A100-SXM4-40GB", current=0))
    assert _code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_mig.gi_profiles(h) == [] and pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0  # MIG off
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    # busy: pending changes, current stays, activation says IN_USE
    _, h = _open(mig_state("A100-SXM4-40GB", current=0, processes=[{"pid": 1, "name": "x", "used_mib": 1}]))
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 1]
    # Hopper: needs a GPU reset
    sim, h = _open(mig_state("H100-80GB-HBM3", current=0))
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 1]
    sim.reset_gpu(H100)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    # disabling while instances exist
    nvml_mig.create_gpu_instance(h, 0)
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_ERROR_IN_USE
    sim.reset_gpu(H100)  # a reset drops instances and applies the pending mode
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0] and sim.gpu_state(H100)["mig"]["instances"] == []
    assert _code(pynvml.nvmlDeviceSetMigMode, h, 2) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_not_mig_capable():
    state = mig_state("A100-SXM4-40GB")
    state["gpus"][0]["mig"]["capable"] = False
    _, h = _open(state)
    assert _code(pynvml.nvmlDeviceGetMigMode, h) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0


def test_a30_geometry():
    _, h = _open(mig_state("A30-24GB"))
    profiles = {p.name: p for p in nvml_mig.gi_profiles(h)}
    assert profiles["1g.6gb"].profile_id == 14 and profiles["4g.24gb"].placements == ((0, 4),)
    nvml_mig.create_gpu_instance(h, 5)  # 2g.12gb, the driver picks the top half
    assert _layout(h) == [(5, 2, 2)]
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 14) == 2


def test_state_file_round_trips_across_processes(tmp_path):
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(mig_state("A100-SXM4-40GB")))
    sim, h = _open(path)
    gi = nvml_mig.create_gpu_instance(h, 9, (0, 4))
    nvml_mig.create_compute_instance(gi, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["nvml.json"]  # written atomically, no temp left
    saved = json.loads(path.read_text())["gpus"][0]["mig"]["instances"]
    assert [(i["gi_id"], i["profile_id"], i["start"], i["size"]) for i in saved] == [(1, 9, 0, 4)]

    # another process changes the layout through its own library over the same file
    code = ("import sys, pynvml\nfrom nodeconsole.console.demo.nvml_sim import SimulatedNvml\n"
            "from nodeconsole.console import nvml_mig\n"
            "SimulatedNvml(sys.argv[1], privileged=True).install(); pynvml.nvmlInit()\n"
            "h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "gi = nvml_mig.create_gpu_instance(h, 14, (4, 2)); nvml_mig.create_compute_instance(gi, 1)\n")
    subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, check=True, timeout=60)

    mig = NvmlSource(SimulatedNvml(path)).read().gpus[0].mig
    assert [(m.profile, m.start, m.size, m.compute_instances) for m in mig.instances] == [
        ("3g.20gb", 0, 4, ("3g.20gb",)), ("2g.10gb", 4, 2, ("2g.10gb",))]
    assert all(m.uuid and m.uuid.startswith("MIG-") for m in mig.instances)
    # the first library sees the change too, as every process sees the driver's state
    sim.install()
    assert _layout(h) == [(9, 0, 4), (14, 4, 2)]
    assert _code(nvml_mig.create_gpu_instance, h, 14, (4, 2)) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
