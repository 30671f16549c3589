"""MIG steps of an undo that can only be built once an earlier step of the same undo has given the GPU
back to the nvidia driver: NVML cannot see a GPU on vfio-pci, so undoing a passthrough that turned MIG
off (actions/passthrough_mig.py) plans "MIG mode on, then the GPU instances" blind. Each such step is
built for real when it runs, after the rebinding; its title, commands and inverse follow from the
operation alone (the inverse of turning MIG mode on is turning it off; of creating an instance,
destroying it).
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig_planner import slices_text
from nodeconsole.actions.plan import Op, Step, build_step
from nodeconsole.console.pciaddr import parse_pci_address

VFIO = "vfio-pci"

_KINDS = ("mig_mode", "mig_gi", "mig_verify")
_WHY = "once the GPU is back on nvidia (NVML cannot see it on vfio-pci)"


def _rebinds_to_host(earlier: list[Step], address: str) -> bool:
    return any(s.op.get("kind") == "pci_driver" and s.op.get("device") == address and s.op.get("driver") != VFIO
               for s in earlier)


def _text(op: Op, address: str) -> tuple[str, tuple[str, ...], Op | None]:
    """Title, commands and inverse of a deferred MIG operation."""
    dev = f"nvidia-smi mig -i {address}"
    if op["kind"] == "mig_mode":
        mode = int(op["mode"])
        return (f"{'Enable' if mode else 'Disable'} MIG mode on {address}",
                (f"nvidia-smi -i {address} -mig {mode}", f"nvidia-smi --gpu-reset -i {address}  # when the driver asks"),
                {"kind": "mig_mode", "gpu": address, "mode": 1 - mode})
    if op["kind"] == "mig_gi":
        name, start, size = op.get("profile") or str(op["profile_id"]), int(op["start"]), int(op["size"])
        present = bool(op["present"])
        inverse = dict(op, gpu=address, present=not present, cis=op.get("cis") if not present else [])
        verb = "Create" if present else "Destroy"
        cis = op.get("cis") or []
        full = len(cis) == 1 and int(cis[0][1]) == 0  # one compute instance over the whole GI: -C
        cmds = ((f"{dev} -cgi {op['profile_id']}:{start}" + (" -C" if full else ""),)
                + (() if full else tuple(f"{dev} -gi NEW -cci {c[0]}:{c[1]}" for c in cis))) if present \
            else (f"{dev} -lgi  # then -dci and -dgi on the instance at that placement",)
        return f"{verb} {name} at {slices_text(start, size)} on {address}", cmds, inverse
    return f"Verify the MIG layout of {address} (re-read from NVML)", (f"{dev} -lgi",), None


def deferred_mig_step(host: ActionHost, op: Op, earlier: list[Step]) -> Step | None:
    """A step for MIG operation `op` built when it runs, or None when `op` is not a MIG operation on a
    GPU that an `earlier` step gives back to a host driver (then it cannot be deferred)."""
    if not isinstance(op, dict) or op.get("kind") not in _KINDS or not isinstance(op.get("gpu"), str):
        return None
    address = parse_pci_address(op["gpu"])
    if not _rebinds_to_host(earlier, address):
        return None
    built: list[Step | None] = []

    def real() -> Step | None:
        if not built:
            built.append(build_step(host, op))
        return built[0]

    def apply() -> None:
        step = real()
        if step is not None:
            step.apply()

    def verify() -> str | None:
        step = real()
        return step.verify() if step is not None else None

    title, cmds, inverse = _text(op, address)
    step = Step(title, _WHY, cmds, dict(op, gpu=address), inverse, apply, verify)
    step.host = host
    return step
