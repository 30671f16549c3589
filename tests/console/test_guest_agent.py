"""The real guest-agent seam (console/sources/guest_agent.py): guest-exec and guest-exec-status as
qemu-ga answers them through libvirt, against a fake domain (no libvirtd): output, exit codes, timeouts,
oversize output, answers that are not what the protocol says, and the agent's absence."""
from __future__ import annotations

import base64
import json

import libvirt
import pytest

from nodeconsole.console.sources import guest_agent as ga
from nodeconsole.console.sources.guest_agent import GuestLogUnavailable, LibvirtGuestAgent, read_guest_log

LOG = b"2026-12-02T10:15:03+0000 train-a kernel: NVRM: Xid (PCI:0000:07:00): 48, pid=1, name=x, DBE\n"


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class FakeDomain:
    """A domain whose agent runs each program per `programs`: name → (exit code, stdout, stderr,
    status calls before it exits); or `answer` overrides every reply (raw text, or an exception)."""

    def __init__(self, programs: dict[str, tuple[int, bytes, bytes, int]] | None = None,
                 clock: FakeClock | None = None) -> None:
        self.programs = programs or {}
        self.clock = clock
        self.requests: list[dict] = []
        self.timeouts: list[int] = []
        self.raw: dict[str, object] = {}  # execute → a reply text or an exception to raise
        self._pids: dict[int, list] = {}

    def agent(self, dom: FakeDomain, cmd: str, timeout: int, flags: int) -> str:
        assert dom is self and flags == 0
        req = json.loads(cmd)
        self.requests.append(req)
        self.timeouts.append(timeout)
        if self.clock is not None:
            self.clock.t += 0.01  # each call takes a little time
        raw = self.raw.get(req["execute"])
        if isinstance(raw, BaseException):
            raise raw
        if raw is not None:
            return str(raw)
        if req["execute"] == "guest-exec":
            args = req["arguments"]
            assert args["capture-output"] is True and isinstance(args["arg"], list)
            if args["path"] not in self.programs:
                raise _error(libvirt.VIR_ERR_INTERNAL_ERROR, "internal error: unable to execute QEMU agent "
                             f"command 'guest-exec': Failed to execute child process \u201c{args['path']}\u201d "
                             "(No such file or directory)")
            pid = 100 + len(self._pids)
            self._pids[pid] = list(self.programs[args["path"]])
            return json.dumps({"return": {"pid": pid}})
        state = self._pids[req["arguments"]["pid"]]
        code, out, err, calls = state
        if calls > 0:
            state[3] -= 1
            return json.dumps({"return": {"exited": False}})
        reply: dict = {"exited": True, "exitcode": code}
        if out:
            reply["out-data"] = base64.b64encode(out).decode()
        if err:
            reply["err-data"] = base64.b64encode(err).decode()
        return json.dumps({"return": reply})


def _error(code: int, message: str) -> libvirt.libvirtError:
    e = libvirt.libvirtError(message)
    e.err = (code, 0, message, 0, "", None, None, 0, 0)
    return e


def _read(dom: FakeDomain, clock: FakeClock | None = None, **kw) -> bytes:
    clock = clock or dom.clock or FakeClock()
    return read_guest_log(dom, dom.agent, clock=clock, sleep=clock.sleep, **kw)


def test_journalctl_output_is_read_after_polling_until_it_exits():
    dom = FakeDomain({"journalctl": (0, LOG, b"", 3)}, FakeClock())
    assert _read(dom) == LOG
    first = dom.requests[0]
    assert first == {"execute": "guest-exec", "arguments": {
        "path": "journalctl", "arg": ["-k", "-o", "short-iso", "--no-pager", "-q", "-n", "20000"],
        "capture-output": True}}
    assert [r["execute"] for r in dom.requests] == ["guest-exec"] + ["guest-exec-status"] * 4
    assert all(r["arguments"] == {"pid": 100} for r in dom.requests[1:])
    assert all(1 <= t <= ga.TIMEOUT_S for t in dom.timeouts)  # each call bounded by what is left


def test_without_journalctl_dmesg_is_asked_and_a_failing_journalctl_too():
    dom = FakeDomain({"dmesg": (0, LOG, b"", 0)})
    assert _read(dom) == LOG
    assert [r["arguments"].get("path") for r in dom.requests if r["execute"] == "guest-exec"] == ["journalctl", "dmesg"]
    assert dom.requests[-2]["arguments"]["arg"] == ["--time-format", "iso"]
    dom = FakeDomain({"journalctl": (1, b"", b"Failed to get journal access\n", 0), "dmesg": (0, LOG, b"", 0)})
    assert _read(dom) == LOG


def test_a_non_zero_exit_of_every_program_is_the_reason():
    dom = FakeDomain({"journalctl": (1, b"", b"No journal files were found.\nmore\n", 0),
                      "dmesg": (1, b"", b"dmesg: read kernel buffer failed: Operation not permitted\n", 0)})
    with pytest.raises(GuestLogUnavailable) as e:
        _read(dom)
    assert e.value.reason == ("the guest's journalctl exited 1: No journal files were found.; "
                              "the guest's dmesg exited 1: dmesg: read kernel buffer failed: Operation not permitted")


def test_a_program_that_never_exits_is_given_up_within_the_time_bound():
    clock = FakeClock()
    dom = FakeDomain({"journalctl": (0, LOG, b"", 10**9)}, clock)
    with pytest.raises(GuestLogUnavailable) as e:
        _read(dom, timeout_s=2.0)
    assert "did not finish within 2 s" in e.value.reason
    assert clock.t <= 2.0 + 0.05  # the bound holds: no call after the deadline, dmesg not started past it
    assert len(dom.requests) < 40


def test_oversize_output_keeps_the_newest_bytes_from_a_line_start():
    lines = [f"2026-12-02T10:15:{i % 60:02d}+0000 g kernel: line {i:06d}\n".encode() for i in range(50_000)]
    big = b"".join(lines)
    assert len(big) > 2 << 20
    out = _read(FakeDomain({"journalctl": (0, big, b"", 0)}), max_bytes=1 << 20)
    assert len(out) <= 1 << 20 and big.endswith(out) and out.startswith(b"2026-12-02T")
    assert len(out) > (1 << 20) - 100  # only the partial first line was dropped


@pytest.mark.parametrize("reply, reason", [
    ("{not json", "the guest agent's answer to guest-exec-status is not JSON"),
    ('["a list"]', "is not a JSON object"),
    ('{"return": {"exited": true, "exitcode": 0, "out-data": "%%%not base64%%%"}}', "out-data is not base64"),
    ('{"return": {"exited": true, "exitcode": 0, "out-data": 42}}', "out-data is not a string"),
    ('{"error": {"class": "GenericError", "desc": "Invalid parameter \'pid\'"}}',
     "guest-exec-status refused: Invalid parameter 'pid'"),
    ('{"return": 7}', "has no result"),
])
def test_garbage_answers_are_a_reason_not_a_crash(reply, reason):
    dom = FakeDomain({"journalctl": (0, LOG, b"", 0), "dmesg": (0, LOG, b"", 0)})
    dom.raw["guest-exec-status"] = reply
    with pytest.raises(GuestLogUnavailable) as e:
        _read(dom)
    assert reason in e.value.reason


def test_guest_exec_without_a_pid():
    dom = FakeDomain()
    dom.raw["guest-exec"] = '{"return": {}}'
    with pytest.raises(GuestLogUnavailable, match="without a process id"):
        _read(dom)


def test_guest_exec_disabled_in_the_guest_says_so_once():
    dom = FakeDomain()
    dom.raw["guest-exec"] = _error(libvirt.VIR_ERR_INTERNAL_ERROR, "internal error: unable to execute QEMU "
                                   "agent command 'guest-exec': Command guest-exec has been disabled")
    with pytest.raises(GuestLogUnavailable) as e:
        _read(dom)
    assert e.value.reason.count("guest-exec has been disabled") == 1


@pytest.mark.parametrize("code, message, reason", [
    ("VIR_ERR_ARGUMENT_UNSUPPORTED", "argument unsupported: QEMU guest agent is not configured",
     "no guest agent (none configured for the VM)"),
    ("VIR_ERR_AGENT_UNRESPONSIVE", "Guest agent is not responding: QEMU guest agent is not connected",
     "the guest agent is not connected (not running in the guest?)"),
    ("VIR_ERR_AGENT_UNRESPONSIVE", "Guest agent is not responding: Guest agent not available for now",
     "the guest agent is not responding"),
    ("VIR_ERR_OPERATION_INVALID", "Requested operation is not valid: domain is not running",
     "Requested operation is not valid: domain is not running"),
])
def test_an_unreachable_agent_stops_at_the_first_call(code, message, reason):
    dom = FakeDomain({"journalctl": (0, LOG, b"", 0)})
    dom.raw["guest-exec"] = _error(getattr(libvirt, code), message)
    with pytest.raises(GuestLogUnavailable) as e:
        _read(dom)
    assert e.value.reason == reason
    assert len(dom.requests) == 1  # dmesg is not tried: the agent itself is out of reach


def test_control_characters_in_a_reason_are_shown_escaped():
    dom = FakeDomain({"journalctl": (1, b"", b"bad\x1b[2Jthing\n", 0), "dmesg": (1, b"", b"", 0)})
    with pytest.raises(GuestLogUnavailable) as e:
        _read(dom)
    assert "\x1b" not in e.value.reason and "bad" in e.value.reason


def test_the_libvirt_seam_on_the_test_driver_refuses_with_a_reason(capfd):
    # libvirt's test driver has domains but refuses agent commands: a reason, never a traceback
    agent = LibvirtGuestAgent("test:///default", timeout_s=2.0)
    with pytest.raises(GuestLogUnavailable) as e:
        agent.guest_kernel_log("test")
    assert e.value.reason
    with pytest.raises(GuestLogUnavailable, match="no such VM"):
        agent.guest_kernel_log("no-such-vm")
    assert capfd.readouterr().err == ""  # libvirt's own error printer is silenced
