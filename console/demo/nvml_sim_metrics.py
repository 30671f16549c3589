"""The metric names a GPU's "not_supported" list in nvml.json may hold (docs/demo-host.md), and the C
symbols of the simulated NVML library (console/demo/nvml_sim.py) that then answer NOT_SUPPORTED for that
GPU. A raw symbol name is accepted in the list too.
"""
from __future__ import annotations

METRIC_SYMBOLS: dict[str, tuple[str, ...]] = {
    "utilization": ("nvmlDeviceGetUtilizationRates",),
    "memory": ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"),
    "temperature": ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV"),
    "power": ("nvmlDeviceGetPowerUsage",),
    "power_limit": ("nvmlDeviceGetEnforcedPowerLimit",),
    "ecc": ("nvmlDeviceGetTotalEccErrors",),
    "retired_pages": ("nvmlDeviceGetRetiredPages",),
    "remapped_rows": ("nvmlDeviceGetRemappedRows",),
    "pcie": ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth"),
    "pcie_max": ("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"),
    "serial": ("nvmlDeviceGetSerial",),
    "processes": ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"),
    "clocks": ("nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClock"),
    "clock_events": ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
                     "nvmlDeviceGetSupportedClocksEventReasons"),
    "pcie_replay": ("nvmlDeviceGetPcieReplayCounter",),
    "nvlink": ("nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkVersion", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
               "nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNvLinkErrorCounter",
               "nvmlDeviceGetNvLinkCapability"),
    "fabric": ("nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"),
    # what a board without fans (an SXM module) answers NOT_SUPPORTED for; "display" for a board whose
    # display queries fail
    "fan": ("nvmlDeviceGetFanSpeed", "nvmlDeviceGetFanSpeed_v2", "nvmlDeviceGetNumFans"),
    "display": ("nvmlDeviceGetDisplayActive", "nvmlDeviceGetDisplayMode"),
}
