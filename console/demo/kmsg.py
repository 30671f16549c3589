"""GPU events injected into the demo host's kernel log (`.sim/kmsg`, kmsg records), for tests and drills:
an Xid as the NVIDIA driver logs it, a PCIe AER error as the port driver and the device's driver log it, a
host failure around passthrough as the kernel's PCI core and the NVIDIA driver log it."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from nodeconsole.console.xid import FALLEN_OFF_BUS, lookup

KMSG = ".sim/kmsg"
AER_CLASSES = {"fatal": "Uncorrected (Fatal)", "nonfatal": "Uncorrected (Non-Fatal)", "corrected": "Corrected"}
_ADDR = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_START_USEC = 86_400_000_000  # a tree without a boot time: up a day when its first event is injected


def _device(root: Path, gpu: str) -> Path:
    dev = root / "sys/bus/pci/devices" / gpu
    if not _ADDR.fullmatch(gpu) or not dev.is_dir():
        raise ValueError(f"{gpu} is not a PCI device of the demo host")
    return dev


def _driver(dev: Path) -> str:
    link = dev / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else "pcieport"


def _boot_time(root: Path) -> int | None:
    try:
        text = (root / "proc/stat").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("btime ") and line[6:].strip().isdigit():
            return int(line[6:].strip())
    return None


def _next(path: Path, root: Path) -> tuple[int, int]:
    """The next record's sequence number and time (microseconds since boot): now on the host's clock (its
    proc/stat boot time), and never before the file's last record."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        lines = []
    btime = _boot_time(root)
    usec = int((time.time() - btime) * 1e6) if btime is not None else _START_USEC
    for line in reversed(lines):
        head = line.split(b";", 1)[0].split(b",")
        if len(head) >= 3 and head[1].isdigit() and head[2].isdigit():
            return int(head[1]) + 1, max(usec, int(head[2]) + 1)
    return 1, usec


def _append(root: Path, messages: list[tuple[int, str]]) -> list[str]:
    path = root / KMSG
    path.parent.mkdir(exist_ok=True)
    seq, usec = _next(path, root)
    records = [f"{prio},{seq + i},{usec + i * 120},-;{msg}" for i, (prio, msg) in enumerate(messages)]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in records))
    return records


def inject_xid(root: Path, gpu: str, code: int) -> list[str]:
    """An Xid on `gpu` as the driver logs it (Xid 79 with its "fallen off the bus" line)."""
    _device(root, gpu)
    return _append(root, xid_messages(gpu, code))


def xid_messages(gpu: str, code: int) -> list[tuple[int, str]]:
    """The driver's lines (priority, text) for an Xid on the GPU at PCI address `gpu` (the host's, or the
    guest's for a guest's driver); ValueError for a code out of range."""
    if not 0 < code < 1_000_000:
        raise ValueError(f"{code} is not an Xid code")
    short = gpu.rsplit(".", 1)[0]
    if code == FALLEN_OFF_BUS:
        text = "pid=<unknown>, name=<unknown>, GPU has fallen off the bus."
        return [(3, f"NVRM: Xid (PCI:{short}): 79, {text}"),
                (3, f"NVRM: GPU {gpu}: GPU has fallen off the bus.")]
    return [(3, f"NVRM: Xid (PCI:{short}): {code}, pid=4242, name=python3, {lookup(code).meaning}")]


def inject_aer(root: Path, gpu: str, severity: str) -> list[str]:
    """A PCIe AER error on `gpu`: the port's summary and the device's own line."""
    dev = _device(root, gpu)
    cls = AER_CLASSES.get(severity)
    if cls is None:
        raise ValueError(f"{severity!r} is not an AER severity (fatal, nonfatal or corrected)")
    port = dev.resolve().parent.name
    kind = "Physical Layer, (Receiver ID)" if severity == "corrected" else "Transaction Layer, (Requester ID)"
    msgs = [] if not _ADDR.fullmatch(port) else [
        (3, f"pcieport {port}: AER: {cls} error message received from {gpu}")]
    msgs.append((3, f"{_driver(dev)} {gpu}: PCIe Bus Error: severity={cls}, type={kind}"))
    return _append(root, msgs)


# The host failures (console/host_failures.py) as the kernel logs them: priority and message, {drv} the
# device's driver, {gpu} its address (with the intermediate lines that come before the failure).
HOST_FAILURES: dict[str, list[tuple[int, str]]] = {
    "d3cold": [(3, "{drv} {gpu}: Unable to change power state from D3cold to D0, device inaccessible")],
    "inaccessible": [(3, "{drv} {gpu}: Unable to change power state from D3hot to D0, device inaccessible")],
    "not-ready": [(4, "{drv} {gpu}: not ready 65535ms after resume; giving up")],
    "flr-timeout": [(6, "{drv} {gpu}: not ready 1023ms after FLR; waiting"),
                    (6, "{drv} {gpu}: not ready 2047ms after FLR; waiting"),
                    (4, "{drv} {gpu}: not ready 65535ms after FLR; giving up")],
    "reset-timeout": [(4, "{drv} {gpu}: not ready 65535ms after bus reset; giving up")],
    "rm-init": [(3, "NVRM: GPU {gpu}: RmInitAdapter failed! (0x26:0x56:1474)"),
                (3, "NVRM: rm_init_adapter failed, device minor number 0")],
    "bar": [(4, "{drv} {gpu}: BAR 1: can't reserve [mem 0x38000000000-0x3ffffffffff 64bit pref]")],
    "pending": [(3, "{drv} {gpu}: timed out waiting for pending transaction; performing function level reset "
                    "anyway")],
    "power-refused": [(6, "{drv} {gpu}: Refused to change power state from D0 to D3hot")],
}


def inject_host(root: Path, gpu: str, failure: str) -> list[str]:
    """A host failure on `gpu` (one of HOST_FAILURES) as the kernel logs it."""
    dev = _device(root, gpu)
    lines = HOST_FAILURES.get(failure)
    if lines is None:
        raise ValueError(f"{failure!r} is not a host failure ({', '.join(HOST_FAILURES)})")
    drv = _driver(dev) if (dev / "driver").is_symlink() else "pci"
    return _append(root, [(prio, msg.format(drv=drv, gpu=gpu)) for prio, msg in lines])
