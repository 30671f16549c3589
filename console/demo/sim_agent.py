"""The demo host's QEMU guest agents (the seam `Seams.guest_agent`, chosen in console/seams.py).

train-a and train-b run an agent; every other VM has none ("no guest agent"), as a VM without the
agent's channel or without qemu-ga in the guest answers. A guest's kernel log is the file
`.sim/guest/VM.log` below the demo root, in the form the real agent asks the guest for
(`journalctl -k -o short-iso`: `2026-12-02T10:15:03+0000 train-a kernel: NVRM: …`), so the answer
goes through the same parse as a real guest's; a guest that logged nothing has no file (an empty log).
The stamps are dated: the guest's own boot time is not needed (a guest booted with the host, as far as
the demo is concerned).

`demo inject xid GPU CODE --guest` (`inject_guest_xid`) appends the Xid the guest's driver would log
for the GPU the VM holds, at the guest's PCI address for it (the hostdev's guest `<address>`), stamped
with the moment of injection.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from nodeconsole.console.demo.kmsg import xid_messages
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.root import Root
from nodeconsole.console.sources.guest_agent import MAX_BYTES, GuestLogUnavailable

AGENTS = ("train-a", "train-b")  # the demo's VMs with a guest agent
GUEST_DIR = ".sim/guest"


def guest_log(vm: str) -> str:
    """The guest log's path below the demo root."""
    return f"{GUEST_DIR}/{vm}.log"


class SimulatedGuestAgent:
    """Answers for AGENTS from their guest logs below `root`; refuses every other VM."""

    def __init__(self, root: Path) -> None:
        self.root = Root(root)

    def guest_kernel_log(self, vm_name: str) -> bytes:
        if vm_name not in AGENTS:
            raise GuestLogUnavailable("no guest agent")
        path = self.root.resolve_parent(guest_log(vm_name))
        if path is None:
            raise GuestLogUnavailable(f"the guest's log {GUEST_DIR} leads out of the demo root")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return b""
        except OSError as e:
            raise GuestLogUnavailable(f"the guest's journalctl failed: {e.strerror or e}") from None
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size
            f.seek(max(0, size - MAX_BYTES))
            return f.read(MAX_BYTES)


def _holder(libvirt_uri: str, gpu: str) -> tuple[str, str | None, bool]:
    """(VM, the guest's address for the GPU, running) of the VM whose PCI hostdev is `gpu`."""
    import libvirt

    conn = libvirt.openReadOnly(libvirt_uri)
    try:
        for dom in conn.listAllDomains():
            for h in parse_domain(dom.XMLDesc(0)).hostdevs:
                if h.type == "pci" and h.address == gpu:
                    return dom.name(), h.guest_address, dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        conn.close()
    raise ValueError(f"no VM holds {gpu} (--guest logs in the guest of the VM it is passed through to)")


def inject_guest_xid(root: Path, libvirt_uri: str, gpu: str, code: int) -> list[str]:
    """Append an Xid on `gpu` to the log of the guest holding it; the lines written. ValueError when no
    running VM with an agent holds the GPU, or for a bad code."""
    vm, address, running = _holder(libvirt_uri, gpu)
    if not running:
        raise ValueError(f"VM {vm} holds {gpu} but is not running: its guest logs nothing")
    if vm not in AGENTS:
        raise ValueError(f"VM {vm} holds {gpu} but has no guest agent on the demo host "
                         f"({' and '.join(AGENTS)} have one): its guest's log cannot be read")
    if address is None:
        raise ValueError(f"VM {vm}'s hostdev {gpu} has no guest <address>")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())
    lines = [f"{stamp} {vm} kernel: {msg}" for _prio, msg in xid_messages(address, code)]
    r = Root(root)
    where = r.resolve_parent(guest_log(vm))
    if where is None:
        raise ValueError(f"the guest's log {GUEST_DIR} leads out of the demo root")
    path = Path(where)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return lines
