"""The simulated NVML library behaves like libnvidia-ml under the real pynvml wrappers: return codes,
init reference counting, handles, bus id formats, two-call patterns, struct versions, ABI checks,
fault injection."""
from __future__ import annotations

import ctypes

import pynvml
import pytest

from nodeconsole.console.demo.nvml_sim import NvmlAbiError, SimulatedNvml, uninstall
from tests.console.nvml_states import A100, H100, L40S, demo_state


@pytest.fixture(autouse=True)
def _no_library_left_behind():
    yield
    uninstall()


@pytest.fixture()
def sim():
    lib = SimulatedNvml(demo_state(), clock=lambda: 5.0).install()
    pynvml.nvmlInit()
    return lib


def test_calls_before_init_and_after_the_last_shutdown_are_uninitialized():
    SimulatedNvml(demo_state()).install()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlSystemGetDriverVersion()
    pynvml.nvmlInit()
    pynvml.nvmlInit()  # reference counted, like the real library
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 4
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetHandleByIndex(0)


def test_unknown_symbols_are_function_not_found(sim):
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetBoardPartNumber(h)
    with pytest.raises(AttributeError):
        sim.nvmlDeviceGetBoardPartNumber  # noqa: B018 - the raw lookup pynvml does
    sim.fail_on("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    with pytest.raises(pynvml.NVMLLibraryMismatchError):  # pynvml's versioned-wrapper mapping
        pynvml.nvmlDeviceGetComputeRunningProcesses(h)


def test_handles_indices_and_bus_id_formats(sim):
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(4)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetName(pynvml.c_nvmlDevice_t())  # NULL handle
    info = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(3))
    assert info.busId == "00000000:CA:00.0" and info.busIdLegacy == "0000:CA:00.0"
    assert (info.domain, info.bus, info.device) == (0, 0xCA, 0)
    for spelling in (b"00000000:CA:00.0", b"0000:ca:00.0", b"ca:00.0"):
        h = pynvml.nvmlDeviceGetHandleByPciBusId(spelling)
        assert pynvml.nvmlDeviceGetName(h) == "NVIDIA L40S"
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByPciBusId(b"0000:99:00.0")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByPciBusId(b"not-an-address")
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1))
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
    assert pynvml.nvmlDeviceGetPciInfo(by_uuid).busId == "00000000:3B:00.0"
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID(b"GPU-nope")


def test_system_strings_and_error_strings(sim):
    assert pynvml.nvmlSystemGetDriverVersion() == "550.90.07"
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 12040
    assert pynvml.nvmlSystemGetNVMLVersion() == "12.550.90.07"
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES) == "Insufficient resources"
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)) == "In use by another client"
    buf = ctypes.create_string_buffer(4)
    fn = pynvml._nvmlGetFunctionPointer("nvmlSystemGetDriverVersion")
    assert fn(buf, ctypes.c_uint(4)) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE


def test_two_call_patterns_return_everything(sim):
    a100 = pynvml.nvmlDeviceGetHandleByPciBusId(A100.encode())
    double = pynvml.nvmlDeviceGetRetiredPages(a100, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    single = pynvml.nvmlDeviceGetRetiredPages(a100, 0)  # multiple single-bit errors
    assert len(double) == len(set(double)) == 2 and len(single) == 1
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(a100)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4242, 30000 * 1024 * 1024)]
    assert procs[0].gpuInstanceId == 0xFFFFFFFF  # not a MIG process
    assert [p.pid for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(a100)] == [4243]
    # a count too small for the processes: INSUFFICIENT_SIZE with the count needed
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGraphicsRunningProcesses_v3")
    count = ctypes.c_uint(0)
    arr = (pynvml.c_nvmlProcessInfo_v3_t * 1)()
    assert fn(a100, ctypes.byref(count), arr) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 1


def test_versioned_structs_are_checked(sim):
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    mem = pynvml.c_nvmlMemory_v2_t()
    mem.version = 0x01000028  # an older struct version
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
    assert fn(h, ctypes.byref(mem)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert v1.total == v2.total and v1.used == v2.used + v2.reserved
    assert pynvml.nvmlDeviceGetTemperatureV(h, 0) == pynvml.nvmlDeviceGetTemperature(h, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetTemperature(h, 7)


def test_arguments_the_abi_cannot_take_are_refused(sim):
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetPciInfo_v3")
    with pytest.raises(NvmlAbiError, match="by value"):
        fn(h, pynvml.nvmlPciInfo_t())  # struct by value: the C library would crash
    with pytest.raises(NvmlAbiError, match="must point to nvmlPciInfo_t"):
        fn(h, ctypes.byref(pynvml.c_nvmlMemory_t()))
    with pytest.raises(NvmlAbiError, match="handle"):
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetName")(0xD0000000, ctypes.create_string_buffer(96), 96)


def test_fault_injection(sim):
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    sim.fail_next("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetPowerUsage(h)
    assert pynvml.nvmlDeviceGetPowerUsage(h) > 0  # only the next call
    sim.fail_on("nvmlDeviceGetEnforcedPowerLimit", pynvml.NVML_ERROR_TIMEOUT, after=2)
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 400000
    for _ in range(3):
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
    sim.clear_faults()
    sim.fail_on("*", pynvml.NVML_ERROR_GPU_IS_LOST, address=H100)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByPciBusId(b"ca:00.0".replace(b"ca", b"17")))
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByPciBusId(L40S.encode())) == "NVIDIA L40S"


def test_lost_gpu_keeps_its_handle_and_pci_identity_only(sim):
    sim.set_lost(A100)
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetPciInfo(h).busId == "00000000:3B:00.0"
    for fn in (pynvml.nvmlDeviceGetName, pynvml.nvmlDeviceGetUtilizationRates, pynvml.nvmlDeviceGetMigMode):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            fn(h)
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) == "NVIDIA H100 80GB HBM3"


def test_vgpu_calls(sim):
    l40s = pynvml.nvmlDeviceGetHandleByPciBusId(L40S.encode())
    assert pynvml.nvmlDeviceGetSupportedVgpus(l40s) == [1001, 1002]
    assert pynvml.nvmlDeviceGetCreatableVgpus(l40s) == [1001]  # one type per GPU while instances run
    (inst,) = pynvml.nvmlDeviceGetActiveVgpus(l40s)
    assert pynvml.nvmlVgpuInstanceGetVmID(inst) == (b"11111111-2222-3333-4444-000000000003",
                                                    pynvml.NVML_VGPU_VM_ID_UUID)
    assert pynvml.nvmlVgpuInstanceGetMdevUUID(inst) == "aaaaaaaa-0000-0000-0000-000000000001"
    assert pynvml.nvmlVgpuInstanceGetType(inst) == 1001
    assert pynvml.nvmlVgpuInstanceGetGpuInstanceId(inst) == 0xFFFFFFFF
    assert pynvml.nvmlVgpuTypeGetName(1002) == "NVIDIA L40S-8C"
    assert pynvml.nvmlVgpuTypeGetFramebufferSize(1002) == 8192 * 1024 * 1024
    assert pynvml.nvmlVgpuTypeGetMaxInstances(l40s, 1002) == 6
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlVgpuTypeGetName(4242)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlVgpuInstanceGetType(12345)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the plain driver on this GPU: no vGPU
        pynvml.nvmlDeviceGetSupportedVgpus(pynvml.nvmlDeviceGetHandleByIndex(0))
    sim.gpu_state(L40S)["vgpu"]["active"] = []
    assert pynvml.nvmlDeviceGetCreatableVgpus(l40s) == [1001, 1002]
