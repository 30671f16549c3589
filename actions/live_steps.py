"""Step kinds that change the running host now: kernel tunables and hugepage reservations (through the
host's kernel writer), NVIDIA persistence mode (through NVML, like actions/mig_steps.py) and enabling a
systemd unit. Each records the state it found as its inverse.

- `kernel_value` {"path", "value", "title", "why"}: a /proc/sys or /sys attribute holds `value`.
- `hugepages` {"node", "size_kib", "count", "boot"}: NUMA node `node` has `count` reserved pages of
  `size_kib`. The kernel may reserve fewer than asked (1 GiB pages need contiguous free memory): then
  verifying fails, unless `boot` says a boot-time reservation in the same change gets the rest, in which
  case the step says how many it got (its outcome) and the run goes on.
- `nvml_persistence` {"gpu", "mode": 0|1}: NVML persistence mode of one GPU; {"gpus": [...], "mode"}: of
  several in one step; {"modes": {gpu: mode}}: each its own (the inverse: the modes they had).
- `systemd_unit` {"unit", "enabled"}: a known unit (nvidia-persistenced) enabled at boot or not, through
  `systemctl enable|disable`; its wants link says which.
"""
from __future__ import annotations

import pynvml

from nodeconsole.actions.boot_steps import run_program
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig_steps import handle_of, nvml_session
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.doctor import facts
from nodeconsole.console.pciaddr import parse_pci_address

# Units a step may enable, with the link `systemctl enable` makes for each
UNITS = {"nvidia-persistenced": facts.PERSISTENCED_WANTS}
_WRITABLE = ("proc/sys/", "sys/")


def hugepages_path(node: int, size_kib: int) -> str:
    return f"{facts.NODE_DIR}/node{node}/hugepages/hugepages-{size_kib}kB/nr_hugepages"


def page_text(size_kib: int) -> str:
    return f"{size_kib // 1048576} GiB" if size_kib >= 1048576 else f"{size_kib // 1024} MiB"


@step_kind("kernel_value")
def kernel_value_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when the attribute already holds the value."""
    rel = str(op["path"]).strip("/")
    value = str(op["value"])
    if not rel.startswith(_WRITABLE) or ".." in rel.split("/"):
        raise StepError(f"refusing to write /{rel}: not a kernel attribute")
    current = host.root.read(rel)
    if current is None:
        raise StepError(f"/{rel} is not there: this kernel does not offer it")
    if current == value:
        return None

    def apply() -> None:
        host.kernel.write(rel, value)

    def verify() -> str | None:
        now = host.root.read(rel)
        return None if now == value else f"/{rel} is {now}, expected {value}"

    return Step(str(op.get("title") or f"Set /{rel} to {value}"), str(op.get("why") or "takes effect now"),
                (f"echo {value} > /{rel}",), dict(op, path=rel, value=value),
                {"kind": "kernel_value", "path": rel, "value": current, "title": f"Set /{rel} back to {current}",
                 "why": "undo"}, apply, verify)


@step_kind("hugepages")
def hugepages_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when the node already has that many pages reserved."""
    node, size, count = int(op["node"]), int(op["size_kib"]), int(op["count"])
    if node < 0 or size <= 0 or count < 0:
        raise StepError(f"malformed hugepages operation {op!r}")
    rel = hugepages_path(node, size)
    current = host.root.read_int(rel)
    if current is None:
        raise StepError(f"NUMA node {node} offers no {page_text(size)} pages (/{rel} is not there)")
    if current == count:
        return None
    boot = bool(op.get("boot"))

    def apply() -> None:
        host.kernel.write(rel, str(count))

    def verify() -> str | None:
        now = host.root.read_int(rel)
        if now == count:
            return None
        if now is not None and now < count and boot:
            step.outcome = (f"node {node}: the kernel could reserve only {now} of {count} {page_text(size)} pages "
                            f"now (free memory is fragmented); the boot-time reservation gets them after the reboot")
            return None
        return (f"node {node} has {now} {page_text(size)} pages reserved, expected {count}"
                + (" (the kernel could not find enough contiguous free memory: reserve them at boot)"
                   if now is not None and now < count else ""))

    verb = "Reserve" if count > current else "Release"
    step = Step(f"{verb} {page_text(size)} hugepages on NUMA node {node}: {current} → {count}",
                "VMs backed by hugepages start only when their node has enough reserved",
                (f"echo {count} > /{rel}",), dict(op, node=node, size_kib=size, count=count),
                {"kind": "hugepages", "node": node, "size_kib": size, "count": current}, apply, verify)
    return step


def _persistence(address: str) -> int:
    try:
        return int(pynvml.nvmlDeviceGetPersistenceMode(handle_of(address)))
    except pynvml.NVMLError as e:
        raise StepError(f"NVML cannot read the persistence mode of {address}: {e}") from None


def _wanted_modes(op: Op) -> dict[str, int]:
    """GPU address → persistence mode of the three forms: {"gpu", "mode"}, {"gpus": [...], "mode"} (one
    step for every GPU), {"modes": {address: mode}} (what an undo restores)."""
    if "modes" in op:
        raw = dict(op["modes"])
    elif "gpus" in op:
        raw = dict.fromkeys(op["gpus"], op["mode"])
    else:
        raw = {op["gpu"]: op["mode"]}
    out = {}
    for address, mode in raw.items():
        if int(mode) not in (0, 1):
            raise StepError(f"persistence mode must be 0 or 1, not {mode}")
        out[parse_pci_address(address)] = int(mode)
    if not out:
        raise StepError("malformed nvml_persistence operation: no GPU")
    return out


@step_kind("nvml_persistence")
def nvml_persistence_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when every GPU already is in its mode; the inverse names each GPU the
    step changed with the mode it had."""
    want = _wanted_modes(op)
    with nvml_session(host):
        current = {a: _persistence(a) for a in want}
    change = {a: m for a, m in want.items() if current[a] != m}
    if not change:
        return None

    def apply() -> None:
        with nvml_session(host):
            for address, mode in change.items():
                try:
                    pynvml.nvmlDeviceSetPersistenceMode(handle_of(address), mode)
                except pynvml.NVMLError as e:
                    raise StepError(f"NVML refused persistence mode {mode} on {address}: {e}") from None

    def verify() -> str | None:
        with nvml_session(host):
            wrong = [f"{a} is {now}" for a, m in change.items() if (now := _persistence(a)) != m]
        return f"persistence mode not as set: {', '.join(wrong)}" if wrong else None

    modes = set(change.values())
    word = ("on" if modes == {1} else "off") if len(modes) == 1 else "back"
    gpus = ", ".join(change)
    why = ("the driver stays initialised between users: no start-up delay for each CUDA program or "
           "nvidia-smi, and the GPU's clocks, ECC and MIG state are kept in between" if modes == {1}
           else "it was so before")
    cmds = tuple(f"nvidia-smi -i {a} -pm {m}" for a, m in change.items())
    title = (f"Turn persistence mode {word} for {gpus}" if len(change) < 3
             else f"Turn persistence mode {word} for {len(change)} GPUs ({gpus})")
    return Step(title, why, cmds, {"kind": "nvml_persistence", "modes": change},
                {"kind": "nvml_persistence", "modes": {a: current[a] for a in change}}, apply, verify)


@step_kind("systemd_unit")
def systemd_unit_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when the unit already is enabled (or not) as asked."""
    unit, want = str(op["unit"]), bool(op["enabled"])
    if unit not in UNITS:
        raise StepError(f"refusing to change the unit {unit!r}: not one nodeconsole manages")
    link = UNITS[unit]
    current = host.root.exists(link)
    if current == want:
        return None
    argv = ["systemctl", "enable" if want else "disable", f"{unit}.service"]

    def apply() -> None:
        run_program(host, argv)

    def verify() -> str | None:
        now = host.root.exists(link)
        return None if now == want else f"/{link} {'is missing' if want else 'is still there'}"

    why = ("it starts at every boot and keeps persistence mode on (persistence set through NVML lasts until "
           "the driver unloads)" if want else "it was not enabled before")
    return Step(f"{'Enable' if want else 'Disable'} {unit} at boot", why, (" ".join(argv),), dict(op),
                {"kind": "systemd_unit", "unit": unit, "enabled": current}, apply, verify)
