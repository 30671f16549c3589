"""The host's own failures around a GPU and passthrough: what each means, how bad it is, what to do first.

These are kernel lines about the PCI function itself, not Xids: the GPU did not come back from a low
power state, the driver could not start it, its BAR could not be reserved, a reset did not bring it back
(console/sources/host_lines.py reads them; events of kind `host`). Severities are those of console/xid.py:
`fatal` makes the GPU unhealthy (console/health.py), `warning` degraded. The short name is what the event
lists show ("host D3cold").

Not failures, and never events: the kernel's enumeration lines (`BAR 0 [mem …]`, `PME# supported from …`,
the available PCIe bandwidth), vfio-pci's `enabling device`, `resetting` / `reset done`, and the
intermediate `not ready …ms after FLR; waiting` (only `giving up` is a failure).
"""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.xid import FATAL, REBOOT, RESET_GPU, WARNING, WATCH

# The failures (the events' short names)
D3COLD = "D3cold"  # Unable to change power state from D3cold to D0, device inaccessible
INACCESSIBLE = "inaccessible"  # the same from another power state
NOT_READY = "not ready"  # not ready …ms after resume (or another transition); giving up
FLR_TIMEOUT = "FLR timeout"  # not ready …ms after FLR; giving up
RESET_TIMEOUT = "reset timeout"  # not ready …ms after bus reset (or another reset); giving up
RM_INIT = "RmInitAdapter"  # NVRM: GPU …: RmInitAdapter failed! (and rm_init_adapter failed, device minor number N)
BAR_RESERVE = "BAR reserve"  # BAR n: can't reserve [mem …]
PENDING = "FLR pending"  # timed out waiting for pending transaction; performing function level reset anyway
POWER_REFUSED = "power refused"  # Refused to change power state from D0 to D3hot


@dataclass(frozen=True)
class HostFailure:
    name: str
    meaning: str
    severity: str
    action: str


def _f(name: str, meaning: str, severity: str, action: str) -> tuple[str, HostFailure]:
    return name, HostFailure(name, meaning, severity, action)


FAILURES: dict[str, HostFailure] = dict([
    _f(D3COLD, "the GPU did not come back from D3cold (powered off): its config space reads as all ones",
       FATAL, REBOOT + " (the GPU lost power or left the bus: check power and seating; keep it out of D3cold: "
                       "its d3cold_allowed in sysfs to 0)"),
    _f(INACCESSIBLE, "the GPU does not answer after a power state change: its config space reads as all ones",
       FATAL, RESET_GPU + "; reboot node if it does not answer (check power and seating)"),
    _f(NOT_READY, "the GPU never answered after resuming from a low power state; the kernel gave up",
       FATAL, RESET_GPU + "; reboot node if it does not answer (check power and seating)"),
    _f(FLR_TIMEOUT, "the GPU never answered after a function level reset; the kernel gave up",
       FATAL, REBOOT + " (the reset failed: the GPU cannot be given to a VM until it answers)"),
    _f(RESET_TIMEOUT, "the GPU never answered after a reset of its bus; the kernel gave up",
       FATAL, REBOOT + " (the reset failed: check power, seating and the PCIe link)"),
    _f(RM_INIT, "the NVIDIA driver could not initialise the GPU",
       FATAL, RESET_GPU + "; reboot node if it repeats (check the driver version, power and seating)"),
    _f(BAR_RESERVE, "a BAR of the GPU could not be reserved: another driver or the firmware's framebuffer "
                    "holds its memory range, so no driver (nvidia, vfio-pci) can map it",
       FATAL, "free the range (efifb/simplefb: `video=efifb:off`; check above-4G decoding and resizable BAR "
              "in the firmware), then rebind the GPU; " + REBOOT + " if it stays"),
    _f(PENDING, "a reset was started while the GPU still had transactions in flight: a VM stopped mid-DMA",
       WARNING, WATCH + " (if the GPU then does not answer or the VM fails to start: reset GPU)"),
    _f(POWER_REFUSED, "the GPU refused a power state change and stays in its current state",
       WARNING, WATCH + " (harmless alone; if the next VM start or driver bind fails: reset GPU)"),
])


def failure(name: str) -> HostFailure:
    """The table's entry for one of the names above."""
    return FAILURES[name]
