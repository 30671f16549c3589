"""MIG through NVML for actions: one NVML session per read or change, the GPU's MIG state as the planner
needs it, and the step kinds that change it — MIG mode, one GPU instance with its compute instances, and
a final check of the whole layout. Everything goes through the pynvml wrappers (console/nvml_mig.py), so
the same code drives libnvidia-ml and the demo's simulated library.

Step kinds (see actions/plan.py):
- `mig_mode` {"gpu", "mode": 0|1}: MIG mode current and pending; resets the GPU when the driver asks.
- `mig_gi` {"gpu", "profile_id", "profile", "start", "size", "present", "cis": [[ci_profile_id, start,
  size], ...]}: a GPU instance at exactly that placement with exactly those compute instances (present),
  or none there. A GPU instance is found by its placement, which outlives GI ids and UUIDs.
- `mig_verify` {"gpu", "layout": [[profile_id, start, size], ...]}: nothing to apply; verifying re-reads
  every GPU instance and compares it with the layout (catches a driver that reports success for
  nothing, and instances someone else made meanwhile).
"""
from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig_planner import CiSpec, Existing, Profile, slices_text
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console import nvml_mig
from nodeconsole.console.mig_profiles import table_for_pci_device_id
from nodeconsole.console.pciaddr import parse_pci_address

_NA_U32 = 0xFFFFFFFF


@contextmanager
def nvml_session(host: ActionHost) -> Iterator[None]:
    """NVML initialised on the host's library (the simulated one on the demo) for the duration."""
    seams = host.seams
    if seams.nvml_lib is None and not seams.use_real_nvml:
        raise StepError("this host has no NVML (a captured tree is read-only)")
    # the real library is whatever CDLL pynvml loaded, never a stand-in somebody else left there
    want = seams.nvml_lib if seams.nvml_lib is not None else (
        pynvml.nvmlLib if isinstance(pynvml.nvmlLib, ctypes.CDLL) else None)
    if pynvml.nvmlLib is not want:
        pynvml.nvmlLib = want
        pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise StepError(f"NVML cannot start: {e}") from None
    try:
        yield
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def handle_of(address: str) -> Any:
    try:
        return pynvml.nvmlDeviceGetHandleByPciBusId(address)
    except pynvml.NVMLError_NotFound:
        raise StepError(f"NVML does not see {address} (only GPUs on the nvidia driver are visible)") from None
    except pynvml.NVMLError as e:
        raise StepError(f"NVML cannot open {address}: {e}") from None


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass
class MigState:
    """What NVML says about one GPU's MIG state."""
    address: str
    capable: bool = False
    current: int = 0
    pending: int = 0
    pci_device_id: int = 0
    profiles: list[Profile] = field(default_factory=list)
    table: str = ""  # '' when the profiles come from NVML, else the bundled table's model (MIG off)
    instances: list[Existing] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)  # "pid 42 python3" on the whole GPU
    vgpu_vms: list[str] = field(default_factory=list)  # VM ids of the GPU's running vGPUs


def _profile(p: nvml_mig.GiProfileInfo) -> Profile:
    return Profile(p.name, p.profile_id, p.slice_count, p.max_instances, tuple(p.placements), p.memory_mib)


def _processes(h: Any) -> list[tuple[int, str, int]]:
    """(pid, name, gpu instance id or _NA_U32) of the processes on a GPU."""
    out: dict[int, tuple[int, str, int]] = {}
    for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            procs = fn(h)
        except pynvml.NVMLError:
            continue
        for p in procs:
            try:
                name = _text(pynvml.nvmlSystemGetProcessName(p.pid))
            except pynvml.NVMLError:
                name = "?"
            out[p.pid] = (p.pid, name, int(getattr(p, "gpuInstanceId", _NA_U32)))
    return sorted(out.values())


def _active_vgpus(h: Any) -> list[tuple[str, int]]:
    """(VM id, gpu instance id or _NA_U32) of the vGPUs running on a GPU."""
    try:
        ids = pynvml.nvmlDeviceGetActiveVgpus(h)
    except pynvml.NVMLError:
        return []
    out = []
    for inst in ids:
        try:
            vm = _text(pynvml.nvmlVgpuInstanceGetVmID(inst)[0])
        except pynvml.NVMLError:
            vm = str(inst)
        try:
            gi = int(pynvml.nvmlVgpuInstanceGetGpuInstanceId(inst))
        except pynvml.NVMLError:
            gi = _NA_U32
        out.append((vm, gi))
    return out


def _cis(gi_handle: Any) -> tuple[CiSpec, ...]:
    cps = nvml_mig.ci_profiles(gi_handle)
    return tuple(sorted((c.profile_id, c.start, c.size) for c in nvml_mig.compute_instances(gi_handle, cps)))


def read_mig_state(host: ActionHost, address: str, vm_names: dict[str, str] | None = None) -> MigState:
    """Mode, profiles, instances (with compute instances and users) of one GPU, in one NVML session.
    `vm_names` maps VM UUIDs to names for the users of MIG-backed vGPUs. Raises StepError."""
    names = vm_names or {}
    st = MigState(address=address)
    with nvml_session(host):
        h = handle_of(address)
        try:
            st.pci_device_id = int(pynvml.nvmlDeviceGetPciInfo_v3(h).pciDeviceId)
            st.current, st.pending = (int(m) for m in pynvml.nvmlDeviceGetMigMode(h))
        except pynvml.NVMLError_NotSupported:
            return st
        except pynvml.NVMLError as e:
            raise StepError(f"NVML cannot read the MIG mode of {address}: {e}") from None
        st.capable = True
        procs = _processes(h)
        vgpus = _active_vgpus(h)
        st.processes = [f"pid {pid} {name}" for pid, name, _ in procs]
        st.vgpu_vms = [names.get(vm, vm) for vm, _ in vgpus]
        if not st.current:
            table = table_for_pci_device_id(st.pci_device_id)
            if table is not None:
                st.table = table.model
                st.profiles = [Profile(p.name, p.profile_id, p.slice_count, p.max_instances, p.placements,
                                       p.memory_mib) for p in table.profiles]
            return st
        try:
            infos = nvml_mig.gi_profiles(h, st.pci_device_id)
            st.profiles = [_profile(p) for p in infos]
            pname = {p.profile_id: p.name for p in infos}
            for gi in nvml_mig.gpu_instances(h, infos):
                users = [f"pid {pid} {name}" for pid, name, g in procs if g == gi.gi_id]
                users += [f"VM {names.get(vm, vm)} (vGPU)" for vm, g in vgpus if g == gi.gi_id]
                st.instances.append(Existing(gi.gi_id, gi.profile_id, pname.get(gi.profile_id, str(gi.profile_id)),
                                             gi.start, gi.size, _cis(gi.handle), tuple(users)))
        except pynvml.NVMLError as e:
            raise StepError(f"NVML cannot list the MIG instances of {address}: {e}") from None
    return st


@dataclass(frozen=True)
class _Gi:
    gi_id: int
    start: int
    size: int
    handle: Any


def _gis(h: Any, profile_id: int) -> list[_Gi]:
    """GPU instances of one profile (none while MIG mode is off)."""
    arr = (pynvml.c_nvmlGpuInstance_t * 16)()
    count = ctypes.c_uint(0)
    try:
        pynvml.nvmlDeviceGetGpuInstances(h, profile_id, arr, ctypes.byref(count))
    except pynvml.NVMLError_NotSupported:
        return []
    out = []
    for i in range(count.value):
        info = pynvml.nvmlGpuInstanceGetInfo(arr[i])
        out.append(_Gi(info.id, info.placement.start, info.placement.size, arr[i]))
    return out


def _gi_at(h: Any, profile_id: int, start: int, size: int) -> _Gi | None:
    return next((g for g in _gis(h, profile_id) if (g.start, g.size) == (start, size)), None)


# -- steps --------------------------------------------------------------------------------------------

def reset_gpu(host: ActionHost, address: str) -> None:
    """Reset one GPU so a pending MIG mode takes effect: the simulated driver's reset on the demo,
    `nvidia-smi --gpu-reset` (an argv, never a shell) on a real host."""
    resetter = getattr(host.seams.nvml_lib, "reset_gpu", None)
    if resetter is not None:
        try:
            resetter(address)
        except (RuntimeError, KeyError) as e:
            raise StepError(f"the GPU reset failed: {e}") from None
        return
    if not host.commands.which("nvidia-smi"):
        raise StepError(f"the new MIG mode needs a GPU reset and nvidia-smi is not installed: reset {address} "
                        f"(nvidia-smi --gpu-reset -i {address}) or reboot, then plan again")
    argv = ["nvidia-smi", "--gpu-reset", "-i", address]
    rc, out = host.commands.run(argv)
    if rc != 0:
        raise StepError(f"{' '.join(argv)} exited {rc}: {out} (stop what holds the GPU open, or reboot)")


@step_kind("mig_mode")
def mig_mode_step(host: ActionHost, op: Op) -> Step | None:
    address, want = parse_pci_address(op["gpu"]), int(op["mode"])
    with nvml_session(host):
        cur, pend = (int(m) for m in pynvml.nvmlDeviceGetMigMode(handle_of(address)))
    if cur == want and pend == want:
        return None
    word = "on" if want else "off"
    verb = "Enable" if want else "Disable"

    def apply() -> None:
        with nvml_session(host):
            status = pynvml.nvmlDeviceSetMigMode(handle_of(address), want)
        if status == pynvml.NVML_ERROR_RESET_REQUIRED:
            reset_gpu(host, address)
        elif status == pynvml.NVML_ERROR_IN_USE:
            raise StepError(f"NVML: the GPU is in use, MIG mode {word} only takes effect once nothing uses it")
        elif status != pynvml.NVML_SUCCESS:
            raise StepError(f"NVML refused MIG mode {word}: {_text(pynvml.nvmlErrorString(status))}")

    def verify() -> str | None:
        with nvml_session(host):
            now, now_pend = (int(m) for m in pynvml.nvmlDeviceGetMigMode(handle_of(address)))
        return None if now == want else f"MIG mode of {address} is {now} (pending {now_pend}), expected {want}"

    why = ("GPU instances can only be created with MIG mode on" if want else
           "the layout is empty and MIG mode is to be off")
    cmds = (f"nvidia-smi -i {address} -mig {want}", f"nvidia-smi --gpu-reset -i {address}  # when the driver asks")
    return Step(f"{verb} MIG mode on {address}", why, cmds, dict(op, gpu=address),
                {"kind": "mig_mode", "gpu": address, "mode": cur}, apply, verify)


def _nvml_error(what: str, e: Exception) -> StepError:
    return StepError(f"{what}: NVML answered {e}")


@step_kind("mig_gi")
def mig_gi_step(host: ActionHost, op: Op) -> Step | None:
    address = parse_pci_address(op["gpu"])
    pid, start, size = int(op["profile_id"]), int(op["start"]), int(op["size"])
    name, present = op.get("profile") or str(pid), bool(op["present"])
    want_cis = tuple(sorted(tuple(int(x) for x in c) for c in op.get("cis") or ()))
    where = slices_text(start, size)
    with nvml_session(host):
        now = _gi_at(handle_of(address), pid, start, size)
        now_cis = _cis(now.handle) if now is not None else ()
    if present and now is not None and now_cis == want_cis:
        return None
    if not present and now is None:
        return None
    inverse = {"kind": "mig_gi", "gpu": address, "profile_id": pid, "profile": name, "start": start,
               "size": size, "present": now is not None, "cis": [list(c) for c in now_cis]}

    def apply() -> None:
        with nvml_session(host):
            _reach_gi(handle_of(address), pid, start, size, name, present, want_cis)

    def verify() -> str | None:
        with nvml_session(host):
            gi = _gi_at(handle_of(address), pid, start, size)
            cis = _cis(gi.handle) if gi is not None else ()
        if not present:
            return None if gi is None else f"GI {gi.gi_id} ({name}, {where}) still exists"
        if gi is None:
            return f"NVML lists no {name} at {where}"
        return None if cis == want_cis else (f"{name} at {where} has compute instances {list(cis)}, "
                                             f"expected {list(want_cis)}")

    title, why, cmds = _gi_step_text(address, pid, start, name, where, present, now, want_cis)
    step = Step(title, why, cmds, dict(op, gpu=address), inverse, apply, verify)
    if not present:  # undoing re-creates the instance: same profile and placement, new identity
        step.undo_note = (f"{name} at {where} on {address} was re-created by the undo with a new GPU "
                          f"instance id and new MIG device UUIDs: update anything that names the old ones "
                          f"(CUDA_VISIBLE_DEVICES, vGPU/VM configs)")
    return step


def _reach_gi(h: Any, pid: int, start: int, size: int, name: str, present: bool,
              want_cis: tuple[tuple[int, ...], ...]) -> None:
    """Make the GPU instance at (start, size) of GPU `h` exist with exactly `want_cis`, or not exist."""
    where = slices_text(start, size)
    gi = _gi_at(h, pid, start, size)
    if not present:
        if gi is not None:
            try:
                nvml_mig.destroy_gpu_instance(gi.handle)
            except pynvml.NVMLError as e:
                raise _nvml_error(f"destroying GI {gi.gi_id} ({name}, {where})", e) from None
        return
    have: tuple[CiSpec, ...] = ()  # a new GPU instance has no compute instance yet
    if gi is None:
        try:
            handle = nvml_mig.create_gpu_instance(h, pid, (start, size))
        except pynvml.NVMLError as e:
            raise _nvml_error(f"creating {name} at {where}", e) from None
    else:
        handle = gi.handle
        have = _cis(handle)
        for ci in nvml_mig.compute_instances(handle, nvml_mig.ci_profiles(handle)):
            if (ci.profile_id, ci.start, ci.size) not in want_cis:
                pynvml.nvmlComputeInstanceDestroy(ci.handle)
    for ci_pid, cs, cn in want_cis:
        if (ci_pid, cs, cn) not in have:
            try:
                nvml_mig.create_compute_instance(handle, ci_pid, (cs, cn))
            except pynvml.NVMLError as e:
                raise _nvml_error(f"creating compute instance {ci_pid} in {name} at {where}", e) from None


def _gi_step_text(address: str, pid: int, start: int, name: str, where: str, present: bool, now: _Gi | None,
                  want_cis: tuple[tuple[int, ...], ...]) -> tuple[str, str, tuple[str, ...]]:
    """The title, the reason and the nvidia-smi commands of a GPU-instance step."""
    dev = f"nvidia-smi mig -i {address}"
    if not present:
        assert now is not None
        title = f"Destroy GPU instance {now.gi_id} ({name}, {where}) on {address}"
        why = "the layout to reach has no GPU instance there (its compute instances go first)"
        cmds: tuple[str, ...] = (f"{dev} -gi {now.gi_id} -dci", f"{dev} -gi {now.gi_id} -dgi")
    elif now is None:
        title = f"Create {name} at {where} on {address}"
        why = "an explicit placement: the order of creation cannot make the layout fail"
        full = len(want_cis) == 1 and want_cis[0][1] == 0  # one CI over the whole GI: -C
        cmds = (f"{dev} -cgi {pid}:{start}" + (" -C" if full else ""),) + (() if full else tuple(
            f"{dev} -gi NEW -cci {c[0]}:{c[1]}" for c in want_cis))
    else:
        title = f"Create the compute instances of GPU instance {now.gi_id} ({name}, {where}) on {address}"
        why = "a GPU instance without compute instances cannot run anything"
        cmds = tuple(f"{dev} -gi {now.gi_id} -cci {c[0]}:{c[1]}" for c in want_cis)
    return title, why, cmds


def current_layout(host: ActionHost, address: str) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(MIG mode, [(profile id, start, size, number of compute instances)]) as NVML reports it now."""
    with nvml_session(host):
        h = handle_of(address)
        mode = int(pynvml.nvmlDeviceGetMigMode(h)[0])
        if not mode:
            return 0, []
        profiles = nvml_mig.gi_profiles(h)
        return mode, sorted((g.profile_id, g.start, g.size, len(_cis(g.handle)))
                            for g in nvml_mig.gpu_instances(h, profiles))


@step_kind("mig_verify")
def mig_verify_step(host: ActionHost, op: Op) -> Step | None:
    address = parse_pci_address(op["gpu"])
    want = sorted(tuple(int(x) for x in item) for item in op.get("layout") or ())

    def verify() -> str | None:
        mode, have = current_layout(host, address)
        if not mode:
            return f"MIG mode of {address} is off"
        got = sorted((p, s, n) for p, s, n, _ in have)
        if got != want:
            return f"NVML lists GPU instances {got} (profile id, start, size), expected {want}"
        empty = [(p, s) for p, s, _, c in have if c == 0]
        return f"GPU instances without compute instances: {empty}" if empty else None

    return Step(f"Verify the MIG layout of {address} (re-read from NVML)",
                "a create call that reports success must have created the instance",
                (f"nvidia-smi mig -i {address} -lgi",),
                dict(op, gpu=address), None, lambda: None, verify)
