"""The NVML source read through the real pynvml wrappers over the simulated library."""
from __future__ import annotations

import ctypes

import pynvml
import pytest

from nodeconsole.console.demo.nvml_sim import SimulatedNvml, uninstall
from nodeconsole.console.model import NA
from nodeconsole.console.sources.nvml import NvmlSource, read_nvml
from nodeconsole.console.sources.types import SourceError
from tests.console.nvml_states import A100, A100_80, H100, L40S, MIG_UUID, demo_state, driver_tree, set_driver


@pytest.fixture(autouse=True)
def _no_library_left_behind():
    yield
    uninstall()


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _by_addr(data):
    return {g.address: g for g in data.gpus}


def test_reads_a_demo_like_host():
    data = NvmlSource(SimulatedNvml(demo_state(), clock=Clock(12.0))).read()
    assert data.driver_version == "550.90.07"
    # NVML order is PCI order; addresses canonical lower-case from NVML's upper-case busId
    assert [g.address for g in data.gpus] == [H100, A100, A100_80, L40S]
    assert [g.nvml_index for g in data.gpus] == [0, 1, 2, 3]
    gpus = _by_addr(data)

    h100 = gpus[H100]
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.uuid.startswith("GPU-")
    assert h100.mig.mode == "enabled" and h100.mig.pending_mode == "enabled" and h100.mig.memory_slices == 8
    (inst,) = h100.mig.instances
    assert (inst.profile, inst.start, inst.size, inst.gi_id, inst.profile_id) == ("3g.40gb", 0, 4, 1, 9)
    assert inst.uuid == MIG_UUID and inst.compute_instances == ("3g.40gb",)
    assert h100.utilization_gpu == NA and h100.utilization_memory == NA  # no utilization in MIG mode
    assert (h100.pcie_gen, h100.pcie_width, h100.pcie_max_gen, h100.pcie_max_width) == (5, 16, 5, 16)
    assert h100.power_limit_w == 700 and isinstance(h100.power_w, (int, float)) and 0 < h100.power_w <= 700

    a100 = gpus[A100]
    assert a100.mig.mode == "disabled" and a100.mig.instances == () and a100.mig.memory_slices == 8
    assert [(p.pid, p.name, p.used_memory_mib, p.kind) for p in a100.processes] == [
        (4242, "python3", 30000, "compute"), (4243, "Xorg", 12, "graphics")]
    assert a100.memory_total_mib == 40960 and a100.memory_used_mib >= 30012
    assert (a100.ecc_volatile_uncorrected, a100.ecc_aggregate_uncorrected) == (2, 5)
    assert a100.retired_pages == 3 and (a100.remapped_rows_pending, a100.remapped_rows_failure) == (1, 0)
    assert isinstance(a100.utilization_gpu, int) and 0 <= a100.utilization_gpu <= 100

    assert gpus[A100_80].mig.mode == "disabled" and gpus[A100_80].mig.pending_mode == "enabled"

    l40s = gpus[L40S]
    assert l40s.power_w == NA and l40s.power_limit_w == 350  # NOT_SUPPORTED stays N/A, never 0
    assert l40s.mig.mode == NA and l40s.mig.instances == ()
    types = {t.id: t for t in l40s.vgpu_types}
    assert types["1001"].name == "NVIDIA L40S-4C" and types["1001"].framebuffer_mib == 4096
    assert (types["1001"].max_instances, types["1001"].available) == (12, 11)
    assert types["1002"].available == 0  # another type already runs on this GPU
    assert {t.via for t in l40s.vgpu_types} == {"nvml"} and {t.parent for t in l40s.vgpu_types} == {L40S}
    (vinst,) = l40s.vgpu_instances
    assert vinst.uuid == "aaaaaaaa-0000-0000-0000-000000000001" and vinst.type_name == "NVIDIA L40S-4C"
    assert vinst.vm == "11111111-2222-3333-4444-000000000003" and vinst.parent == L40S
    assert l40s.memory_used_mib >= 4096  # the vGPU's framebuffer is allocated on the host


def test_not_supported_reads_as_na_never_zero():
    state = demo_state()
    a100 = next(g for g in state["gpus"] if g["address"] == A100)
    a100["not_supported"] = ["utilization", "temperature", "ecc", "retired_pages", "remapped_rows", "pcie",
                             "pcie_max", "power_limit", "processes", "memory"]
    g = _by_addr(NvmlSource(SimulatedNvml(state)).read())[A100]
    for name in ("utilization_gpu", "utilization_memory", "temperature_c", "ecc_volatile_uncorrected",
                 "ecc_aggregate_uncorrected", "retired_pages", "remapped_rows_pending",
                 "remapped_rows_failure",
                 "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "power_limit_w",
                 "memory_total_mib", "memory_used_mib"):
        assert getattr(g, name) == NA, name
    assert g.processes == ()
    assert isinstance(g.power_w, (int, float))  # still supported
    assert not g.error


def test_lost_gpu_is_marked_and_the_others_still_read():
    sim = SimulatedNvml(demo_state())
    source = NvmlSource(sim)
    source.read()
    sim.set_lost(A100)
    gpus = _by_addr(source.read())
    lost = gpus[A100]
    assert lost.error == "GPU is lost" and lost.name == "NVIDIA A100-SXM4-40GB"
    assert lost.utilization_gpu is None and lost.memory_used_mib is None and lost.processes == ()
    for addr in (H100, L40S, A100_80):
        assert gpus[addr].error == "" and gpus[addr].memory_total_mib not in (None, NA)


def test_gpu_lost_before_the_first_read_is_still_identified():
    state = demo_state()
    next(g for g in state["gpus"] if g["address"] == H100)["lost"] = True
    gpus = _by_addr(NvmlSource(SimulatedNvml(state)).read())
    assert gpus[H100].error == "GPU is lost" and gpus[H100].mig.instances == ()
    assert gpus[A100].error == "" and gpus[A100].processes


def test_gpu_lost_mid_read_keeps_what_identified_it():
    sim = SimulatedNvml(demo_state())
    sim.fail_on("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_GPU_IS_LOST, address=A100.upper())
    sim.fail_on("nvmlDeviceGetGpuInstances", pynvml.NVML_ERROR_GPU_IS_LOST, address=H100)
    gpus = _by_addr(NvmlSource(sim).read())
    assert gpus[A100].error == "GPU is lost" and gpus[A100].utilization_gpu is None
    assert gpus[A100].name == "NVIDIA A100-SXM4-40GB" and gpus[A100].uuid.startswith("GPU-")
    assert gpus[H100].error == "GPU is lost" and gpus[H100].mig.instances == ()
    assert gpus[L40S].error == "" and gpus[L40S].power_w == NA and gpus[A100_80].error == ""


def test_other_per_metric_errors_leave_the_metric_unread():
    sim = SimulatedNvml(demo_state())
    sim.fail_on("nvmlDeviceGetTemperatureV", pynvml.NVML_ERROR_UNKNOWN, address=A100)
    gpus = _by_addr(NvmlSource(sim).read())
    assert gpus[A100].temperature_c is None and gpus[A100].error == ""
    assert isinstance(gpus[H100].temperature_c, int)


@pytest.mark.parametrize("code, reason", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
     "NVIDIA driver not loaded (the nvidia kernel module is not loaded)"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission to use the NVIDIA driver (cannot open /dev/nvidia*)"),
])
def test_whole_library_failure_is_a_source_error_with_the_reason(code, reason):
    sim = SimulatedNvml(demo_state())
    sim.set_no_driver(code)
    with pytest.raises(SourceError) as err:
        NvmlSource(sim).read()
    assert str(err.value) == reason
    sim.set_no_driver(None)  # the driver comes back: the same source object recovers
    source = NvmlSource(sim)
    assert len(source.read().gpus) == 4


def test_real_library_when_absent_is_reported_clearly():
    sim = SimulatedNvml(demo_state()).install()  # a stand-in left behind must not be mistaken for it
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        has_driver = True
    except OSError:
        has_driver = False
    if has_driver:
        try:
            data = read_nvml(None)
        except SourceError as e:  # library present but no usable driver: still a clear reason
            assert "NVIDIA" in str(e) or "NVML" in str(e)
        else:
            assert all(g.address.islower() or g.address[0].isdigit() for g in data.gpus)
    else:
        with pytest.raises(SourceError, match=r"libnvidia-ml\.so\.1 not found"):
            read_nvml(None)
    assert pynvml.nvmlLib is not sim


def test_static_facts_are_cached_and_fast_facts_read_every_poll():
    sim = SimulatedNvml(demo_state())
    clock = Clock(0.0)
    source = NvmlSource(sim, clock=clock, slow_s=5.0)
    source.read()
    first = dict(sim.calls)
    clock.t = 1.0
    source.read()
    clock.t = 2.0
    source.read()
    for static in ("nvmlDeviceGetName", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPciInfo_v3",
                   "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetGpuInstanceProfileInfoV",
                   "nvmlDeviceGetGpuInstancePossiblePlacements_v2", "nvmlVgpuTypeGetName",
                   "nvmlGpuInstanceGetComputeInstanceProfileInfoV", "nvmlInitWithFlags"):
        assert sim.calls[static] == first[static] > 0, static
    for fast in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo_v2",
                 "nvmlDeviceGetComputeRunningProcesses_v3"):
        assert sim.calls[fast] == 3 * first[fast] > 0, fast
    # slow-changing facts: once per slow_s, and again once it has passed or after invalidate()
    slow = ("nvmlDeviceGetGpuInstances", "nvmlDeviceGetActiveVgpus", "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetRemappedRows")
    for name in slow:
        assert sim.calls[name] == first[name] > 0, name
    clock.t = 6.0
    source.read()
    for name in slow:
        assert sim.calls[name] == 2 * first[name], name


def test_device_handles_are_asked_for_once_per_nvml_session():
    """A device handle stays valid until NVML shuts down: asked for once per GPU and session, again after
    a re-initialisation; a GPU lost meanwhile still reads as lost through its kept handle."""
    sim = SimulatedNvml(demo_state())
    clock = Clock(0.0)
    source = NvmlSource(sim, clock=clock)
    gpus = len(source.read().gpus)
    for t in (1.0, 2.0):
        clock.t = t
        source.read()
    assert sim.calls["nvmlDeviceGetHandleByIndex_v2"] == gpus > 0
    lost = sim.state["gpus"][0]["address"]
    sim.set_lost(lost)
    clock.t = 3.0
    assert _by_addr(source.read())[lost].error == "GPU is lost"
    assert sim.calls["nvmlDeviceGetHandleByIndex_v2"] == gpus
    sim.set_lost(lost, False)
    source.invalidate()  # re-initialised: new handles
    clock.t = 4.0
    data = source.read()
    assert sim.calls["nvmlInitWithFlags"] == 2 and sim.calls["nvmlDeviceGetHandleByIndex_v2"] == 2 * gpus
    assert not _by_addr(data)[lost].error and _by_addr(data)[lost].utilization_gpu is not None


def test_nvlink_error_counters_every_30_s_link_states_every_slow_read(state_ro):
    """NVLink error counters (four per link, up to 18 links a GPU) are cumulative: read every 30 s, the
    links' states every slow read (5 s), all of a GPU's in one field-values call; invalidate() reads both
    at once. The same values come back in between."""
    from nodeconsole.console.demo.state import ensure_demo
    from nodeconsole.console.root import Root

    host = ensure_demo(state_ro)
    sim = SimulatedNvml.from_file(host.nvml_state, root=Root(host.root), clock=lambda: 1000.0)
    clock = Clock(0.0)
    source = NvmlSource(sim, clock=clock, slow_s=5.0)
    first = source.read()
    counters, states = sim.calls["nvmlDeviceGetNvLinkErrorCounter"], sim.calls["nvmlDeviceGetFieldValues"]
    per_link = sim.calls["nvmlDeviceGetNvLinkState"]  # finding the links (once): not their states
    nvlinked = sum(1 for g in first.gpus if isinstance(g.nvlinks, tuple) and g.nvlinks)
    assert counters > 0 and states == nvlinked > 0
    for t in (6.0, 12.0, 18.0, 24.0):
        clock.t = t
        again = source.read()
    assert sim.calls["nvmlDeviceGetNvLinkErrorCounter"] == counters
    assert sim.calls["nvmlDeviceGetFieldValues"] == 5 * states  # one call a GPU each slow read
    assert sim.calls["nvmlDeviceGetNvLinkState"] == per_link
    assert [g.nvlinks for g in again.gpus] == [g.nvlinks for g in first.gpus]
    clock.t = 31.0
    source.read()
    assert sim.calls["nvmlDeviceGetNvLinkErrorCounter"] == 2 * counters
    source.invalidate()
    source.read()
    assert sim.calls["nvmlDeviceGetNvLinkErrorCounter"] == 3 * counters
    # a link that goes down has no counters; back up within the 30 s, its four are read at once
    nv = next(g for g in sim.state["gpus"] if g.get("nvlink"))["nvlink"]
    nv["down"] = [3]
    clock.t = 37.0
    down = source.read()
    link3 = [g for g in down.gpus if isinstance(g.nvlinks, tuple) and g.nvlinks][0].nvlinks[3]
    assert not link3.active and link3.crc_flit is None
    nv["down"] = []
    clock.t = 43.0
    source.read()
    assert sim.calls["nvmlDeviceGetNvLinkErrorCounter"] == 3 * counters + 4


def test_utilization_and_memory_move_with_the_clock_deterministically():
    clock = Clock(0.0)
    source = NvmlSource(SimulatedNvml(demo_state(), clock=clock))
    samples = []
    for t in (0.0, 11.0, 22.0, 33.0, 11.0):
        clock.t = t
        g = _by_addr(source.read())[A100]
        samples.append((g.utilization_gpu, g.memory_used_mib, g.temperature_c, g.power_w))
    assert len({s[0] for s in samples}) >= 3  # it moves
    assert len({s[1] for s in samples}) >= 3
    assert samples[1] == samples[4]  # same clock, same numbers
    assert all(0 <= s[0] <= 100 for s in samples)


def test_only_gpus_bound_to_nvidia_are_visible(tmp_path):
    root = driver_tree(tmp_path, {H100: "nvidia", A100: "vfio-pci", L40S: "nvidia"})  # A100_80: no driver
    source = NvmlSource(SimulatedNvml(demo_state(), root=root))
    assert [g.address for g in source.read().gpus] == [H100, L40S]

    set_driver(tmp_path, A100, "nvidia")  # bound back: seen once NVML starts again
    assert [g.address for g in source.read().gpus] == [H100, L40S]
    source.invalidate()
    assert [g.address for g in source.read().gpus] == [H100, A100, L40S]

    set_driver(tmp_path, H100, "vfio-pci")  # taken away while NVML holds it: gone for this session
    assert _by_addr(source.read())[H100].error == "GPU is lost"
    source.invalidate()
    assert [g.address for g in source.read().gpus] == [A100, L40S]


def test_sources_over_different_libraries_in_one_process():
    one, two = demo_state(), demo_state()
    two["gpus"] = two["gpus"][:1]
    sim_one, sim_two = SimulatedNvml(one), SimulatedNvml(two)
    pynvml.nvmlLib = sim_two  # someone else initialised pynvml with another library first
    pynvml.nvmlInit()
    a, b = NvmlSource(sim_one), NvmlSource(sim_two)
    for _ in range(3):
        assert len(a.read().gpus) == 4
        assert len(b.read().gpus) == 1
    assert pynvml.nvmlLib is sim_two


def test_source_recovers_when_nvml_was_shut_down_behind_its_back():
    sim = SimulatedNvml(demo_state())
    source = NvmlSource(sim)
    source.read()
    while True:  # drop every reference the library counts
        pynvml.nvmlShutdown()
        if sim._refcount == 0:
            break
    assert len(source.read().gpus) == 4


def test_rescan_reinitialises_after_the_interval():
    clock = Clock(0.0)
    sim = SimulatedNvml(demo_state())
    source = NvmlSource(sim, rescan_s=30.0, clock=clock)
    source.read()
    clock.t = 29.0
    source.read()
    assert sim.calls["nvmlInitWithFlags"] == 1
    clock.t = 31.0
    source.read()
    assert sim.calls["nvmlInitWithFlags"] == 2 and sim.calls["nvmlShutdown"] == 1


def test_close_releases_nvml():
    sim = SimulatedNvml(demo_state())
    source = NvmlSource(sim)
    source.read()
    source.close()
    assert sim._refcount == 0
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_a_newly_failed_gpu_triggers_one_early_rescan(tmp_path):
    clock = Clock(0.0)
    root = driver_tree(tmp_path, {H100: "nvidia", A100: "nvidia", L40S: "nvidia", A100_80: "nvidia"})
    sim = SimulatedNvml(demo_state(), root=root)
    source = NvmlSource(sim, rescan_s=300.0, clock=clock)
    assert len(source.read().gpus) == 4
    set_driver(tmp_path, A100, "vfio-pci")
    clock.t = 1.0
    assert _by_addr(source.read())[A100].error == "GPU is lost"
    clock.t = 7.0  # a few seconds later NVML starts again and no longer sees it
    assert [g.address for g in source.read().gpus] == [H100, A100_80, L40S]
    clock.t = 20.0
    source.read()
    assert sim.calls["nvmlInitWithFlags"] == 2  # once, not every few seconds


def test_link_states_one_call_a_gpu_or_one_a_link_the_same(state_ro, monkeypatch):
    """The links' states read in one field-values call a GPU equal those read one call a link; a driver
    that answers the field NOT_SUPPORTED (before it knew it) is read one call a link from then on, a link
    down shows down either way."""
    from nodeconsole.console.demo import nvml_sim_board
    from nodeconsole.console.demo.state import ensure_demo
    from nodeconsole.console.root import Root

    host = ensure_demo(state_ro)

    def links(data):
        return [g.nvlinks for g in data.gpus]

    sim = SimulatedNvml.from_file(host.nvml_state, root=Root(host.root), clock=lambda: 1000.0)
    nv = next(g for g in sim.state["gpus"] if g.get("nvlink"))["nvlink"]
    nv["down"] = [2]
    one_call = links(NvmlSource(sim).read())
    assert sim.calls["nvmlDeviceGetFieldValues"] > 0
    down = [g for g in one_call if isinstance(g, tuple) and g and not g[2].active]
    assert len(down) == 1 and all(link.active for link in down[0] if link.link != 2)

    monkeypatch.setattr(nvml_sim_board, "_FI_LINK_STATE", -1)  # an older driver: the field is not supported
    old = SimulatedNvml.from_file(host.nvml_state, root=Root(host.root), clock=lambda: 1000.0)
    next(g for g in old.state["gpus"] if g.get("nvlink"))["nvlink"]["down"] = [2]
    clock = Clock(0.0)
    source = NvmlSource(old, clock=clock, slow_s=5.0)
    assert links(source.read()) == one_call
    asked = old.calls["nvmlDeviceGetFieldValues"]
    assert asked == 1 and old.calls["nvmlDeviceGetNvLinkState"] > 0  # asked once, then one call a link
    clock.t = 6.0  # the next slow read
    states = old.calls["nvmlDeviceGetNvLinkState"]
    assert links(source.read()) == one_call and old.calls["nvmlDeviceGetNvLinkState"] > states
    assert old.calls["nvmlDeviceGetFieldValues"] == asked  # not asked again in this NVML session
    source.invalidate()  # a new session (a driver may have been updated) asks once more
    assert links(source.read()) == one_call and old.calls["nvmlDeviceGetFieldValues"] == asked + 1


def test_link_states_with_an_older_nvidia_ml_py(state_ro, monkeypatch):
    """nvidia-ml-py before 12.570 has no names for the link-state field and its answers; the library's
    numbers are used, so such a release reads the links the same (the driver decides what it knows)."""
    from nodeconsole.console.demo.state import ensure_demo
    from nodeconsole.console.root import Root

    host = ensure_demo(state_ro)
    sim = SimulatedNvml.from_file(host.nvml_state, root=Root(host.root), clock=lambda: 1000.0)
    want = [g.nvlinks for g in NvmlSource(sim).read().gpus]
    for name in ("NVML_FI_DEV_NVLINK_GET_STATE", "NVML_NVLINK_STATE_INACTIVE", "NVML_NVLINK_STATE_ACTIVE",
                 "NVML_NVLINK_STATE_SLEEP", "NVML_NVLINK_STATE_ACTIVE_TRAFFIC_DISABLED"):
        monkeypatch.delattr(pynvml, name, raising=False)
    older = SimulatedNvml.from_file(host.nvml_state, root=Root(host.root), clock=lambda: 1000.0)
    assert [g.nvlinks for g in NvmlSource(older).read().gpus] == want
    assert older.calls["nvmlDeviceGetFieldValues"] > 0 and any(isinstance(w, tuple) and w for w in want)
