"""What the symbol mixins of the simulated NVML library (SystemSymbols, DeviceSymbols, MigSymbols,
MigComputeSymbols, VgpuSymbols) share: the handle encoding, the `Target` a device handle resolves to, and the declarations of
the attributes and methods each mixin uses from the class combining them (SimulatedNvml) or from a
sibling mixin — so every mixin type-checks on its own, and leaving one unimplemented makes SimulatedNvml
abstract."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from nodeconsole.console.mig_profiles import CiProfile, GiProfile, GpuMigTable, Placement

# Handle addresses: a kind tag in the top byte, then GPU position (in the state), GI id, CI id.
KIND_DEVICE, KIND_MIG, KIND_GI, KIND_CI = 0xD0, 0xE0, 0xA0, 0xB0


class Target(NamedTuple):
    """What a handle points at: a physical GPU, or a MIG device (gi_id/ci_id set) on it. A named tuple:
    one is made on every call."""
    gpu: dict[str, Any]
    pos: int
    gi_id: int | None = None
    ci_id: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.gi_id is not None


class NvmlSimBase(ABC):
    """Base of the symbol mixins. The attributes are set by SimulatedNvml.__init__; the abstract methods
    are implemented by SimulatedNvml or by the mixin named above them."""

    state: dict[str, Any]  # the nvml.json state
    clock: Callable[[], float]  # drives the moving values (utilization, temperature, power)
    _enum: list[int]  # state positions of the GPUs enumerated at init, in NVML order

    # -- handles --------------------------------------------------------------------------------------
    @staticmethod
    def _device_handle(pos: int) -> int:
        return (KIND_DEVICE << 24) | (pos << 16)

    @staticmethod
    def _mig_handle(pos: int, gi_id: int, ci_id: int) -> int:
        return (KIND_MIG << 24) | (pos << 16) | (gi_id << 8) | ci_id

    @staticmethod
    def _gi_handle(pos: int, gi_id: int) -> int:
        return (KIND_GI << 24) | (pos << 16) | (gi_id << 8)

    @staticmethod
    def _ci_handle(pos: int, gi_id: int, ci_id: int) -> int:
        return (KIND_CI << 24) | (pos << 16) | (gi_id << 8) | ci_id

    # -- SimulatedNvml --------------------------------------------------------------------------------
    @property
    @abstractmethod
    def privileged(self) -> bool: ...

    @abstractmethod
    def gpu_state(self, address: str) -> dict[str, Any]: ...

    @abstractmethod
    def save(self) -> None: ...

    @abstractmethod
    def reload_if_changed(self) -> bool: ...

    @abstractmethod
    def _target(self, handle: Any, symbol: str, allow_mig: bool = False) -> Target: ...

    @abstractmethod
    def _check_alive(self, gpu: dict[str, Any], symbol: str) -> None: ...

    # -- MigSymbols -----------------------------------------------------------------------------------
    @abstractmethod
    def _mig_state(self, gpu: dict[str, Any]) -> tuple[dict[str, Any], GpuMigTable]: ...

    @abstractmethod
    def _mig_enabled(self, gpu: dict[str, Any]) -> tuple[dict[str, Any], GpuMigTable]: ...

    @abstractmethod
    def _find_gi(self, gpu: dict[str, Any], gi_id: int | None) -> dict[str, Any]: ...

    @abstractmethod
    def _gi_profile(self, gpu: dict[str, Any], profile_id: int) -> GiProfile: ...

    @abstractmethod
    def _ci_place(self, gpu: dict[str, Any], gi: dict[str, Any], ci: dict[str, Any]) -> Placement: ...

    @abstractmethod
    def _ci_profiles(self, gpu: dict[str, Any], gi: dict[str, Any]) -> tuple[CiProfile, ...]: ...

    @abstractmethod
    def _mig_devices(self, gpu: dict[str, Any]) -> list[tuple[int, int, str]]: ...

    @staticmethod
    @abstractmethod
    def _derived_uuid(gpu: dict[str, Any], gi_id: int, ci_id: int, seq: int) -> str: ...

    @abstractmethod
    def _mig_device_profile_name(self, gpu: dict[str, Any], gi_id: int | None, ci_id: int | None) -> str: ...

    @abstractmethod
    def _require_privilege(self) -> None: ...

    @abstractmethod
    def _write_placements(self, arr_arg: Any, elem: type, places: Sequence[Placement], cnt: Any,
                          sym: str) -> None: ...

    @abstractmethod
    def _fill_handles(self, arr: Any, values: list[int], sym: str) -> None: ...

    @abstractmethod
    def _gi_target(self, handle: Any, sym: str) -> tuple[Target, dict[str, Any]]: ...

    @abstractmethod
    def _as_device(self, value: int) -> Any: ...
