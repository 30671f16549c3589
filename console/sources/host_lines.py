"""The kernel's lines about a GPU's PCI function failing around passthrough (console/host_failures.py
names them), as console/sources/kernel_log.py finds them among its candidate lines.

The wording is the kernel's (drivers/pci/pci.c) and the NVIDIA driver's:
- `DRV ADDR: not ready 65535ms after resume; giving up` (pci_dev_wait; also after FLR, bus reset, …;
  the `…; waiting` lines before it are not failures);
- `DRV ADDR: Unable to change power state from D3cold to D0, device inaccessible`;
- `DRV ADDR: Refused to change power state from D0 to D3hot` (older kernels: `refused …`);
- `DRV ADDR: timed out waiting for pending transaction; performing function level reset anyway`;
- `DRV ADDR: BAR 1: can't reserve [mem …]`, and the newer kernels' `DRV ADDR: BAR 1 [mem …]: can't reserve`;
- `NVRM: GPU ADDR: RmInitAdapter failed! (0x26:0x56:1474)`, then `NVRM: rm_init_adapter failed, device minor
  number 0` (newer drivers: `NVRM: GPU ADDR: rm_init_adapter failed, …`). That second line tells the same
  failure again: it is folded into the RmInitAdapter event of the same GPU held within the parser's window
  (the line just before, as the driver logs them); one that names no GPU and follows no RmInitAdapter
  line is dropped (it cannot be tied to a GPU). One naming its GPU with no RmInitAdapter line before is
  an RmInitAdapter event of its own.

Linear: each pattern is tried only when its fixed text is in the line, is anchored where that text is,
and has only bounded repeats.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from nodeconsole.console.host_failures import (
    BAR_RESERVE,
    D3COLD,
    FLR_TIMEOUT,
    INACCESSIBLE,
    NOT_READY,
    PENDING,
    POWER_REFUSED,
    RESET_TIMEOUT,
    RM_INIT,
)
from nodeconsole.console.pciaddr import format_pci_address

# Fixed texts that make a line a candidate (kernel_log's block search): one is in every failure line above
# (the NVIDIA driver's lines are candidates already, by "NVRM")
MARKS = (b": not ready ", b"change power state from ", b": timed out waiting for pending", b"can't reserve")

_H = "[0-9a-fA-F]"
_ADDR_F = rf"{_H}{{4,8}}:{_H}{{2}}:{_H}{{2}}\.[0-7]"
_ADDR = rf"(?:{_H}{{4,8}}:)?{_H}{{2}}:{_H}{{2}}(?:\.[0-7])?"
_DEV = re.compile(rf"\s{{0,8}}(?P<drv>[\w.-]{{1,64}}) (?P<addr>{_ADDR_F}): ", re.A)
_STATE = r"[\w]{1,8}"  # pci_power_name: D0 … D3hot, D3cold, unknown, error
_NOT_READY = re.compile(r"not ready [0-9]{1,9}ms after (?P<after>[^;]{1,40}); giving up", re.A)
_UNABLE = re.compile(rf"Unable to change power state from (?P<from>{_STATE}) to {_STATE}, device inaccessible", re.A)
_REFUSED = re.compile(rf"[Rr]efused to change power state from {_STATE} to {_STATE}", re.A)
_PENDING = "timed out waiting for pending transaction"
_BAR = re.compile(r"BAR [0-9]{1,2}(?:: can't reserve \[|(?: \[[^\]]{1,100}\])?: can't reserve)", re.A)
_RM = re.compile(rf"NVRM: (?:GPU (?P<addr>{_ADDR}): )?(?:(?P<init>RmInitAdapter failed!)|rm_init_adapter failed\b)",
                 re.A)


@dataclass(frozen=True)
class HostLine:
    gpu: str | None  # DDDD:BB:DD.F; None: the line names none (rm_init_adapter failed on old drivers)
    name: str  # a console/host_failures.py name
    text: str  # the message, from the driver's name on
    follows: bool = False  # rm_init_adapter failed: the RmInitAdapter failure above, told again


def _address(addr: str) -> str:
    head, _, fn = addr.partition(".")
    parts = head.split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    return format_pci_address(int(parts[0], 16), int(parts[1], 16), int(parts[2], 16), int(fn or 0))


def _device(rest: str) -> str | None:
    """The failure named by a device's message (the text after `DRV ADDR: `), None when it is no failure."""
    if rest.startswith("not ready "):
        m = _NOT_READY.match(rest)
        if m is None:
            return None
        after = m.group("after")
        return FLR_TIMEOUT if "FLR" in after else RESET_TIMEOUT if "reset" in after else NOT_READY
    if rest.startswith("Unable to change power state from "):
        m = _UNABLE.match(rest)
        return None if m is None else D3COLD if m.group("from") == "D3cold" else INACCESSIBLE
    if rest.startswith(("Refused to change power state from ", "refused to change power state from ")):
        return POWER_REFUSED if _REFUSED.match(rest) else None
    if rest.startswith(_PENDING):
        return PENDING
    if rest.startswith("BAR ") and "can't reserve" in rest:
        return BAR_RESERVE if _BAR.match(rest) else None
    return None


def host_line(msg: str) -> HostLine | None:
    """The failure one message (the text after the stamp) tells, if any."""
    i = msg.find("NVRM: ")
    if i >= 0:
        if "RmInitAdapter failed" not in msg and "rm_init_adapter failed" not in msg:
            return None
        m = _RM.match(msg, i)
        if m is None:
            return None
        gpu = _address(m.group("addr")) if m.group("addr") else None
        return HostLine(gpu, RM_INIT, msg[i + 6:].strip(), follows=m.group("init") is None)
    m = _DEV.match(msg)
    if m is None:
        return None
    name = _device(msg[m.end():])
    if name is None:
        return None
    return HostLine(_address(m.group("addr")), name, msg[m.start("drv"):].strip())


class Held(Protocol):
    line: int
    origin: str
    gpu: str
    text: str
    failure: str | None


def fold(held: Sequence[Held], lineno: int, hl: HostLine, window: int) -> bool:
    """Folds an `rm_init_adapter failed` line into the RmInitAdapter event held for its GPU within `window`
    lines (one not folded yet). True when the line needs no event of its own: folded, or dropped (it
    names no GPU and follows no RmInitAdapter line)."""
    if not hl.follows:
        return False
    for h in reversed(held):
        if (h.origin == "host" and h.failure == RM_INIT and lineno - h.line <= window
                and (hl.gpu is None or h.gpu == hl.gpu)):
            h.text = f"{h.text}; {hl.text}"
            h.origin = "host-folded"
            return True
    return hl.gpu is None
