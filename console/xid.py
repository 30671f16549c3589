"""NVIDIA Xid codes: what each means, how bad it is, and what to do first.

Summarised from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors): one entry per code an admin
meets, with the catalog's immediate action. Severity says what is affected:

- ``fatal``: the GPU is unusable until it is reset, the node rebooted or the board replaced;
- ``error``: the application (or one VM's work) failed, the GPU keeps working;
- ``warning``: something to watch or to fix when convenient;
- ``info``: a consequence of another error, nothing to do on its own;
- ``unknown``: a code missing from this table (kept, never dropped: see the catalog).

PCIe AER classes (corrected / non-fatal / fatal) are here too: on a GPU given to a VM through vfio-pci
the guest's driver logs the Xids, and AER is the host's view of the card.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FATAL, ERROR, WARNING, INFO, UNKNOWN = "fatal", "error", "warning", "info", "unknown"
SEVERITIES = (FATAL, ERROR, WARNING, INFO, UNKNOWN)

# The immediate actions, worst last; an event's action starts with one of these words.
NONE = "none"
WATCH = "watch"
RESTART_APP = "restart app"
RESET_GPU = "reset GPU"
RESET_COMMAND = "nodeconsole gpu reset"  # the one plan that resets a GPU a VM holds (actions/reset.py)
REBOOT = "reboot node"
RMA = "drain and RMA"


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    severity: str
    action: str  # the immediate action, short (one of the constants above, sometimes with a hint)


def _x(code: int, meaning: str, severity: str, action: str) -> tuple[int, XidInfo]:
    return code, XidInfo(code, meaning, severity, action)


XIDS: dict[int, XidInfo] = dict([
    _x(8, "GPU stopped processing (timeout)", ERROR, RESTART_APP + "; reset GPU if it repeats"),
    _x(9, "driver error programming the GPU", FATAL, REBOOT),
    _x(12, "driver error handling a GPU exception", FATAL, REBOOT),
    _x(13, "graphics engine exception", ERROR, RESTART_APP + " (check the app)"),
    _x(31, "GPU memory page fault", ERROR, RESTART_APP + " (check the app)"),
    _x(32, "invalid or corrupted push buffer stream", ERROR, RESTART_APP + "; reset GPU if it repeats"),
    _x(38, "driver firmware error", FATAL, REBOOT),
    _x(43, "GPU stopped processing (the app was killed)", ERROR, RESTART_APP),
    _x(45, "preemptive cleanup after an app was stopped", INFO, NONE + " (follows other errors)"),
    _x(48, "double-bit ECC error", FATAL, RESET_GPU),
    _x(56, "display engine error", ERROR, RESET_GPU),
    _x(57, "error programming video memory interface", FATAL, RESET_GPU),
    _x(58, "unstable video memory interface detected", FATAL, RESET_GPU),
    _x(61, "internal micro-controller breakpoint/warning", ERROR, RESET_GPU),
    _x(62, "internal micro-controller halt", FATAL, RESET_GPU),
    _x(63, "ECC page retirement or row remapping recorded", WARNING,
       RESET_GPU + " when convenient (remap pending)"),
    _x(64, "ECC page retirement or row remapping failed", FATAL, RMA),
    _x(65, "video processor exception", ERROR, RESET_GPU),
    _x(68, "video processor (NVDEC) exception", ERROR, RESTART_APP),
    _x(69, "graphics engine class error", ERROR, RESTART_APP),
    _x(74, "NVLink error", FATAL, RESET_GPU + " (check the NVLink link)"),
    _x(79, "GPU has fallen off the bus", FATAL, REBOOT + " (check power, seating and the PCIe link)"),
    _x(92, "high single-bit ECC error rate", WARNING, WATCH + " (reset GPU if the rate keeps rising)"),
    _x(94, "contained uncorrectable ECC error", ERROR, RESTART_APP + " (the GPU keeps working)"),
    _x(95, "uncontained uncorrectable ECC error", FATAL, RESET_GPU),
    _x(109, "context switch timeout", ERROR, RESTART_APP),
    _x(110, "security fault error", FATAL, RESET_GPU),
    _x(119, "GSP RPC timeout", FATAL, RESET_GPU + "; reboot node if it repeats"),
    _x(120, "GSP error", FATAL, RESET_GPU + "; reboot node if it repeats"),
    _x(121, "C2C link corrected error", WARNING, WATCH),
    _x(123, "SPDM (attestation) failure", ERROR, RESET_GPU),
    _x(136, "link training failure", FATAL, RESET_GPU + "; reboot node if it repeats"),
    _x(140, "unrecovered ECC error", FATAL, RESET_GPU),
    _x(143, "GPU initialization failure", FATAL, RESET_GPU + "; reboot node if it repeats"),
    _x(144, "NVLink SAW error", FATAL, RESET_GPU + " (check the NVLink fabric)"),
    _x(145, "NVLink RLW error", FATAL, RESET_GPU + " (check the NVLink fabric)"),
    _x(146, "NVLink TLW error", FATAL, RESET_GPU + " (check the NVLink fabric)"),
    _x(147, "NVLink TREX error", FATAL, RESET_GPU + " (check the NVLink fabric)"),
    _x(148, "NVLink power error", FATAL, RESET_GPU + " (check the NVLink fabric)"),
    _x(149, "NVLink/NETIR link event", WARNING, "check the NVLink fabric"),
    _x(150, "NVLink MSE error", FATAL, RESET_GPU + " (check the NVLink fabric)"),
    _x(154, "GPU recovery action changed", WARNING, "do what the message names"),
])

FALLEN_OFF_BUS = 79
RECOVERY_ACTION = 154
UNKNOWN_ACTION = "look the code up in NVIDIA's Xid catalog"

# Xid 154 names the action it asks for: "… changed from 0x0 (None) to 0x1 (GPU Reset Required)".
_RECOVERY = re.compile(r"\bto 0x[0-9a-fA-F]+ \(([^()]{1,40})\)")
_RECOVERY_ACTIONS = {
    "none": (INFO, NONE),
    "gpu reset required": (FATAL, RESET_GPU),
    "node reboot required": (FATAL, REBOOT),
    "drain and reset": (FATAL, "drain and reset GPU"),
    "drain p2p": (ERROR, "drain peer-to-peer work"),
}


def lookup(code: int) -> XidInfo:
    """The table's entry, or one with severity "unknown" for a code it lacks."""
    info = XIDS.get(code)
    if info is not None:
        return info
    return XidInfo(code, "not in this table", UNKNOWN, UNKNOWN_ACTION)


def severity_action(code: int, text: str = "") -> tuple[str, str]:
    """Severity and immediate action of one Xid event (its message text refines Xid 154)."""
    if code == RECOVERY_ACTION:
        m = _RECOVERY.search(text)
        if m:
            named = m.group(1).strip()
            return _RECOVERY_ACTIONS.get(named.lower(), (WARNING, named))
    info = lookup(code)
    return info.severity, info.action


# -- PCIe AER --
AER_CORRECTED, AER_NONFATAL, AER_FATAL = "corrected", "nonfatal", "fatal"
AER_ACTIONS = {
    AER_CORRECTED: WATCH + " (a rising count points to the slot, riser or cable)",
    AER_NONFATAL: "check the slot; " + RESET_GPU + " if the VM sees errors",
    AER_FATAL: RESET_GPU + " / check the slot",
}
# The kernel's names for the classes (drivers/pci/pcie/aer.c aer_error_severity_string)
AER_CLASS_NAMES = {
    "Corrected": AER_CORRECTED,
    "Uncorrected (Non-Fatal)": AER_NONFATAL,
    "Uncorrected (Fatal)": AER_FATAL,
}
