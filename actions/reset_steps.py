"""The step kinds of `nodeconsole gpu reset` (actions/reset.py plans them):

- `vm_run`: `{"kind": "vm_run", "vm": NAME, "running": BOOL, "force": BOOL, "wait_s": S}` — a VM shut down
  (graceful: the guest is asked, then up to `wait_s` seconds of waiting; with `force` it is destroyed
  after the wait, without it the step fails) or started and seen running. Through the VM backend's
  run-state methods (console/vms/backend.py). A shutdown's inverse starts the VM again, so a reset that
  fails half-way starts what it stopped; a start has no inverse (the VMs running again is where a reset
  ends, and undoing a reset does not stop them).
- `pci_reset`: `{"kind": "pci_reset", "device": ADDR}` — "1" written to the function's sysfs `reset`
  (the kernel's reset method: FLR, a bus reset…), verified by the function answering: its config space
  readable, the vendor id not 0xffff, not in D3cold or an error power state. No inverse: a reset is not
  undone.
- `nvidia_reset`: `{"kind": "nvidia_reset", "gpu": ADDR}` — the nvidia driver's reset, `nvidia-smi -r -i
  ADDR` through the command seam (argv only; pynvml has no reset call), verified through NVML (the GPU
  answers: found by its bus id, its name read). No inverse.
"""
from __future__ import annotations

import time

import pynvml

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig_steps import handle_of, nvml_session
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.vms.backend import VmBackend, VmConfigError

SHUTDOWN_WAIT_S = 120.0  # how long a guest gets to shut down after it is asked
_POLL_S = 0.5
_BAD_POWER = ("D3cold", "error", "unknown")


def _backend(host: ActionHost) -> VmBackend:
    vms = host.vms
    if vms is None:
        raise StepError("this host has no VM backend (libvirt): VMs cannot be stopped or started")
    return vms


def _state(host: ActionHost, vm: str) -> str:
    try:
        return _backend(host).run_state(vm)
    except VmConfigError as e:
        raise StepError(str(e)) from None


def _stop(host: ActionHost, vm: str, force: bool, wait_s: float) -> None:
    vms = _backend(host)
    try:
        vms.shutdown(vm)
        deadline = time.monotonic() + wait_s
        while _state(host, vm) != "shut off":
            if time.monotonic() >= deadline:
                if not force:
                    raise StepError(f"{vm} did not shut down within {wait_s:g} s (its guest ignores the request?); "
                                    "--force destroys it after the wait")
                vms.destroy(vm)
                break
            time.sleep(_POLL_S)
    except VmConfigError as e:
        raise StepError(str(e)) from None


@step_kind("vm_run")
def vm_run_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when the VM already is in the state asked for."""
    now = _state(host, str(op["vm"]))
    if now == ("running" if op["running"] else "shut off"):
        return None
    return vm_step(host, op)


def vm_step(host: ActionHost, op: Op) -> Step:
    """The `vm_run` step whatever the VM's state now (a reset plans the start of a VM running now)."""
    vm, running = str(op["vm"]), bool(op["running"])
    force, wait_s = bool(op.get("force", False)), float(op.get("wait_s", SHUTDOWN_WAIT_S))

    def verify() -> str | None:
        got = _state(host, vm)
        want = "running" if running else "shut off"
        return None if got == want else f"{vm} is {got}, not {want}"

    if running:
        def start() -> None:
            try:
                _backend(host).start(vm)
            except VmConfigError as e:
                raise StepError(str(e)) from None
        return Step(f"Start VM {vm} again and see it running", "it was running before the reset",
                    (host.command_hint("start", vm),), dict(op), None, start, verify, host=host)
    how = f"destroyed if it has not stopped after {wait_s:g} s" if force else f"up to {wait_s:g} s, else the reset stops"
    return Step(f"Shut VM {vm} down ({how})", f"{vm} holds the GPU: a function in use by a guest is not reset",
                (host.command_hint("shutdown", vm),) + ((host.command_hint("stop", vm),) if force else ()), dict(op),
                {"kind": "vm_run", "vm": vm, "running": True}, lambda: _stop(host, vm, force, wait_s), verify,
                host=host)


def reset_method(host: ActionHost, addr: str) -> str:
    """The reset methods the kernel reports for the function ('' when it says none)."""
    return (host.root.read(f"sys/bus/pci/devices/{addr}/reset_method") or "").strip()


def function_answers(host: ActionHost, addr: str) -> str | None:
    """None when the function answers (config space readable, vendor id not 0xffff, no error power
    state), else what is wrong."""
    base = f"sys/bus/pci/devices/{addr}"
    config = host.root.read_bytes(f"{base}/config", limit=64)
    if config is not None and len(config) >= 2:
        vendor = int.from_bytes(config[:2], "little")
    else:
        text = (host.root.read(f"{base}/vendor") or "").strip()
        if not text:
            return f"{addr}: its config space cannot be read (gone from the bus?)"
        vendor = int(text, 16)
    if vendor == 0xFFFF:
        return f"{addr} answers 0xffff for its vendor id: it does not answer after the reset"
    power = (host.root.read(f"{base}/power_state") or "").strip()
    if power in _BAD_POWER:
        return f"{addr} is in power state {power} after the reset"
    return None


def pci_reset_step(host: ActionHost, op: Op) -> Step:
    addr = parse_pci_address(op["device"])
    method = reset_method(host, addr)
    if not host.root.exists(f"sys/bus/pci/devices/{addr}/reset"):
        raise StepError(f"{addr} has no reset file: the kernel knows no way to reset this function")
    how = f"reset method: {method}" if method else "the kernel's reset method"

    def apply() -> None:
        try:
            host.kernel.write(f"sys/bus/pci/devices/{addr}/reset", "1")
        except OSError as e:
            raise StepError(f"reset of {addr} failed: {e.strerror or e}") from None

    return Step(f"Reset function {addr} ({how})",
                "clears the GPU's state (what an Xid or a failed FLR left); then its config space must answer",
                (f"echo 1 > /sys/bus/pci/devices/{addr}/reset",), dict(op), None, apply,
                lambda: function_answers(host, addr), host=host,
                undo_note=f"{addr} stays reset: a reset is not undone (the VMs it stopped are started again)")


def _nvml_answers(host: ActionHost, addr: str) -> str | None:
    try:
        with nvml_session(host):
            pynvml.nvmlDeviceGetName(handle_of(addr))
    except (StepError, pynvml.NVMLError) as e:
        return f"NVML does not answer for {addr} after the reset: {e}"
    return None


def nvidia_reset_step(host: ActionHost, op: Op) -> Step:
    addr = parse_pci_address(op["gpu"])
    argv = ["nvidia-smi", "-r", "-i", addr]

    def apply() -> None:
        if not host.commands.which("nvidia-smi"):
            raise StepError("nvidia-smi is not installed: the nvidia driver's reset cannot be asked for")
        rc, out = host.commands.run(argv)
        if rc != 0:
            raise StepError(f"{' '.join(argv)} exited {rc}: {out.strip()}")

    return Step(f"Reset GPU {addr} through the nvidia driver", "the driver resets the GPU and re-initialises it",
                (" ".join(argv),), dict(op), None, apply, lambda: _nvml_answers(host, addr), host=host)


step_kind("pci_reset")(pci_reset_step)
step_kind("nvidia_reset")(nvidia_reset_step)
