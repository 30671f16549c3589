"""A guest's kernel log, read through the QEMU guest agent of its VM (the seam `Seams.guest_agent`).

On a GPU passed through to a VM the guest's driver logs the Xids, not the host's: the host learns of
them only by asking the guest. libvirt passes agent commands through (virDomainQemuAgentCommand,
`virsh qemu-agent-command`): `guest-exec` starts a program in the guest (argv only, no shell; qemu-ga
looks it up in the guest's PATH) with its output captured, and `guest-exec-status` is polled until it
exits and hands the output back, base64-encoded.

The programs tried, in order: `journalctl -k -o short-iso` (dated stamps with their zone: wall-clock
times without the guest's boot time), then `dmesg --time-format iso` for a guest without systemd's
journal. Every read is bounded: TIMEOUT_S in all for one VM (the agent's own calls included), the
newest MAX_BYTES of the output kept (cut at a line start). A VM without an agent, an agent that is not
running or refuses `guest-exec`, a program that fails or an answer that is not what the protocol says
raise GuestLogUnavailable with the reason in one line — never anything else.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

TIMEOUT_S = 5.0  # one VM's whole read: every agent call and the program's run
MAX_BYTES = 1 << 20  # the newest this many bytes of the guest's log are kept
POLL_S = (0.02, 0.05, 0.1, 0.2)  # the waits between guest-exec-status calls (then the last, repeated)
PROGRAMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("journalctl", ("-k", "-o", "short-iso", "--no-pager", "-q", "-n", "20000")),
    ("dmesg", ("--time-format", "iso")),
)


class GuestLogUnavailable(Exception):
    """The guest's log cannot be read; `reason` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GuestAgent(Protocol):
    """Reads a VM's guest kernel log (bytes in any of the kernel-log parser's forms), or raises
    GuestLogUnavailable. May be called from several threads at once."""

    def guest_kernel_log(self, vm_name: str) -> bytes: ...


class _Stop(GuestLogUnavailable):
    """The agent itself cannot be reached (no agent, VM not running…): no other program is tried."""


# (libvirt error code name, reason, stop): what an error from the agent's calls means
_AGENT_ERRORS = (
    ("VIR_ERR_NO_DOMAIN", "no such VM", True),
    ("VIR_ERR_AGENT_UNRESPONSIVE", "the guest agent is not responding", True),
    ("VIR_ERR_AGENT_UNSYNCED", "the guest agent is not in sync", True),
    ("VIR_ERR_OPERATION_INVALID", "", True),  # "domain is not running"
    ("VIR_ERR_ARGUMENT_UNSUPPORTED", "", True),  # "QEMU guest agent is not configured"
    ("VIR_ERR_OPERATION_TIMEOUT", "the guest agent did not answer in time", True),
)


def _first_line(text: object) -> str:
    from nodeconsole.console.hosttext import visible

    lines = str(text).strip().splitlines()
    return visible(lines[0] if lines else "")[:200]


def _libvirt_reason(e: Exception) -> GuestLogUnavailable:
    """A libvirt error as a GuestLogUnavailable (a _Stop when the agent itself is out of reach)."""
    import libvirt

    code = e.get_error_code() if isinstance(e, libvirt.libvirtError) else None
    message = _first_line(e.get_error_message() if isinstance(e, libvirt.libvirtError) else e) or type(e).__name__
    for name, reason, stop in _AGENT_ERRORS:
        if code is not None and code == getattr(libvirt, name, None):
            lowered = message.lower()
            if "not configured" in lowered:
                return _Stop("no guest agent (none configured for the VM)")
            if "not connected" in lowered:
                return _Stop("the guest agent is not connected (not running in the guest?)")
            return (_Stop if stop else GuestLogUnavailable)(reason or message)
    return GuestLogUnavailable(message)


AgentCall = Callable[[Any, str, int, int], str]  # libvirt_qemu.qemuAgentCommand(dom, json, timeout, flags)


class GuestExec:
    """One VM's log read over its agent: `run(program, args)` → the program's output. `call` is
    libvirt_qemu.qemuAgentCommand (a fake in tests); `clock` and `sleep` are time's."""

    def __init__(self, domain: Any, call: AgentCall, timeout_s: float = TIMEOUT_S, max_bytes: int = MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.domain = domain
        self.call = call
        self.max_bytes = max_bytes
        self.clock = clock
        self.sleep = sleep
        self.deadline = clock() + timeout_s
        self.timeout_s = timeout_s

    def _ask(self, execute: str, arguments: dict[str, Any]) -> Any:
        left = self.deadline - self.clock()
        if left <= 0:
            raise GuestLogUnavailable(f"no answer from the guest within {self.timeout_s:g} s")
        request = json.dumps({"execute": execute, "arguments": arguments})
        try:
            answer = self.call(self.domain, request, max(1, math.ceil(left)), 0)
        except Exception as e:  # libvirt.libvirtError, and whatever a broken binding raises
            raise _libvirt_reason(e) from None
        try:
            reply = json.loads(answer)
        except (TypeError, ValueError):
            raise GuestLogUnavailable(f"the guest agent's answer to {execute} is not JSON") from None
        if not isinstance(reply, dict):
            raise GuestLogUnavailable(f"the guest agent's answer to {execute} is not a JSON object")
        if "error" in reply:
            err = reply["error"]
            desc = err.get("desc") if isinstance(err, dict) else err
            raise GuestLogUnavailable(f"{execute} refused: {_first_line(desc)}")
        if not isinstance(reply.get("return"), dict):
            raise GuestLogUnavailable(f"the guest agent's answer to {execute} has no result")
        return reply["return"]

    def run(self, program: str, args: tuple[str, ...]) -> bytes:
        started = self._ask("guest-exec", {"path": program, "arg": list(args), "capture-output": True})
        pid = started.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise GuestLogUnavailable("guest-exec answered without a process id")
        for n in range(1_000_000):
            status = self._ask("guest-exec-status", {"pid": pid})
            if status.get("exited") is True:
                return self._output(program, status)
            wait = POLL_S[min(n, len(POLL_S) - 1)]
            if self.clock() + wait >= self.deadline:
                break
            self.sleep(wait)
        raise GuestLogUnavailable(f"the guest's {program} did not finish within {self.timeout_s:g} s")

    def _output(self, program: str, status: dict[str, Any]) -> bytes:
        code = status.get("exitcode")
        if code != 0:
            err = self._decode(status.get("err-data"), "err-data")
            why = _first_line(err.decode("utf-8", "replace")) if err else ""
            how = f"exited {code}" if isinstance(code, int) else f"ended by signal {status.get('signal', '?')}"
            raise GuestLogUnavailable(f"the guest's {program} {how}" + (f": {why}" if why else ""))
        return self._decode(status.get("out-data"), "out-data")

    def _decode(self, data: object, key: str) -> bytes:
        """The newest max_bytes of base64 `data` (decoded from its tail only), cut at a line start."""
        if data is None:
            return b""
        if not isinstance(data, str):
            raise GuestLogUnavailable(f"the guest agent's {key} is not a string")
        text = "".join(data.split())
        keep = (self.max_bytes + 2) // 3 * 4 + 4  # base64 quads covering max_bytes and a little more
        cut = len(text) > keep
        if cut:
            if len(text) % 4:
                raise GuestLogUnavailable(f"the guest agent's {key} is not base64")
            text = text[-keep:]
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise GuestLogUnavailable(f"the guest agent's {key} is not base64") from None
        if cut or len(raw) > self.max_bytes:
            raw = raw[-self.max_bytes:]
            nl = raw.find(b"\n")
            raw = raw[nl + 1:] if nl >= 0 else b""
        return raw


def read_guest_log(domain: Any, call: AgentCall, **kw: Any) -> bytes:
    """The guest's kernel log: each of PROGRAMS in turn until one runs (bounded in time in all)."""
    ex = GuestExec(domain, call, **kw)
    reasons = []
    for program, args in PROGRAMS:
        try:
            return ex.run(program, args)
        except _Stop:
            raise
        except GuestLogUnavailable as e:
            reasons.append(e.reason)
            if ex.clock() >= ex.deadline:
                break
    raise GuestLogUnavailable("; ".join(dict.fromkeys(reasons)))


class LibvirtGuestAgent:
    """The real seam: each VM's guest agent through libvirt at `uri` (a connection per read: a read is
    rare — at most once a minute per VM — and survives a restarted libvirtd)."""

    def __init__(self, uri: str, timeout_s: float = TIMEOUT_S) -> None:
        self.uri = uri
        self.timeout_s = timeout_s

    def guest_kernel_log(self, vm_name: str) -> bytes:
        try:
            import libvirt
            import libvirt_qemu
        except ImportError:
            raise GuestLogUnavailable("libvirt-python is not installed") from None
        libvirt.registerErrorHandler(lambda *_args: None, None)  # errors are reasons, not stderr lines
        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError as e:
            raise GuestLogUnavailable(f"libvirt: {_first_line(e.get_error_message())}") from None
        try:
            try:
                dom = conn.lookupByName(vm_name)
            except libvirt.libvirtError as e:
                raise _libvirt_reason(e) from None
            return read_guest_log(dom, libvirt_qemu.qemuAgentCommand, timeout_s=self.timeout_s)
        finally:
            conn.close()
