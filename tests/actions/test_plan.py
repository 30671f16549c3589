"""Plans as data, the audit log and the host lock (no host needed)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeconsole.actions.audit import APPLIED, FAILED, IN_PROGRESS, AuditLog, who
from nodeconsole.actions.lock import HostLock, LockHeld, parse_holder
from nodeconsole.actions.plan import Check, Plan, Step, StepError, build_step, needs_typed_confirmation

REPO = Path(__file__).resolve().parents[2]


def _step(title: str, op: dict | None = None) -> Step:
    return Step(title=title, why=f"why {title}", commands=(f"echo {title}",), op=op or {"kind": "x", "t": title},
                inverse=None, apply_fn=lambda: None, verify_fn=lambda: None, detail="line one\nline two")


def test_plan_states_and_lines():
    ok = Check("IOMMU is on", True, "group 5")
    bad = Check("no process uses the GPU", False, "pid 7 python3", "stop it\nthen plan again")
    refused = Plan("passthrough", "Pass GPU 0", {}, checks=[ok, bad], steps=[_step("a")])
    assert not refused.ok and not refused.empty
    assert refused.refusal == "no process uses the GPU: pid 7 python3"
    lines = refused.lines()
    assert "  [FAILED] no process uses the GPU: pid 7 python3" in lines
    assert "      fix: stop it" in lines and "           then plan again" in lines
    assert "Refused: nothing will be changed." in lines
    assert not any(line.startswith("Steps") for line in lines)

    empty = Plan("passthrough", "Pass GPU 0", {}, checks=[ok])
    assert empty.ok and empty.empty
    assert "Nothing to do: the host is already in the requested state." in empty.lines()

    full = Plan("passthrough", "Pass GPU 0", {}, checks=[ok], steps=[_step("a"), _step("b")], notes=["n1"])
    lines = full.lines()
    assert lines[0] == "Pass GPU 0"
    assert lines.index("  1. a") < lines.index("  2. b")
    assert "     $ echo b" in lines and "     | line two" in lines and "  - n1" in lines
    assert full.ops() == [{"kind": "x", "t": "a"}, {"kind": "x", "t": "b"}]
    json.dumps(full.to_dict())  # a plan is JSON-able for tools


def test_typed_confirmation_only_for_a_runnable_plan():
    p = Plan("release", "t", {}, steps=[_step("a")], confirm_text="0000:17:00.0")
    assert needs_typed_confirmation(p) == "0000:17:00.0"
    p.checks.append(Check("x", False, "no"))
    assert needs_typed_confirmation(p) is None
    assert needs_typed_confirmation(Plan("release", "t", {}, confirm_text="0000:17:00.0")) is None
    assert needs_typed_confirmation(Plan("release", "t", {}, steps=[_step("a")])) is None


def test_build_step_unknown_kind():
    with pytest.raises(StepError, match="unknown step kind"):
        build_step(None, {"kind": "no-such-kind"})


def test_audit_merges_lines_and_finds_undoable(tmp_path):
    log = AuditLog(tmp_path / "sub" / "audit.jsonl")
    assert [r.to_json() for r in log.records()] == [] and log.latest_undoable() is None
    log.append({"id": "a", "action": "passthrough", "result": IN_PROGRESS, "undo": [{"kind": "k"}]})
    log.append({"id": "a", "result": APPLIED})
    log.append({"id": "b", "action": "release", "result": FAILED, "undo": []})
    with open(log.path, "a") as f:
        f.write('{"id": "torn", "result"\n')  # a crash mid-line must not hide the other records
    recs = [r.to_json() for r in log.records()]
    assert [r["id"] for r in recs] == ["a", "b"]
    assert recs[0]["result"] == APPLIED and recs[0]["action"] == "passthrough"
    assert log.latest_undoable().id == "a"  # b failed and was rolled back: nothing to undo
    log.append({"id": "c", "action": "undo", "undoes": "a", "result": APPLIED, "undo": [{"kind": "k"}]})
    assert log.find("a").to_json()["undone_by"] == "c"
    assert log.latest_undoable() is None  # the undo record itself is not undone by a plain `undo`


def test_who_names_the_caller():
    w = who()
    assert w["uid"] == os.getuid() and isinstance(w["user"], str) and w["user"]
    assert set(w) >= {"user", "uid", "tty", "ssh_client"}


_HOLDER = """
import sys
from nodeconsole.actions.lock import HostLock
lock = HostLock(sys.argv[1]); lock.acquire()
print("locked", flush=True)
sys.stdin.readline()
lock.release()
"""


def test_lock_second_taker_is_told_who_holds_it(tmp_path):
    path = tmp_path / "state" / "nodeconsole.lock"
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeld) as e:
            HostLock(path).acquire()
        assert e.value.pid == proc.pid
        assert f"another nodeconsole (pid {proc.pid}) is changing this host" in str(e.value)
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
    # released: the next taker gets it, and leaves nothing behind
    with HostLock(path) as lock:
        assert lock.held and parse_holder(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_lock_survives_an_unlink_race(tmp_path):
    """A taker that opened the file just before the holder unlinked it must not also hold a lock."""
    path = tmp_path / "nodeconsole.lock"
    a = HostLock(path)
    a.acquire()
    stale_fd = os.open(path, os.O_RDWR)  # what a racing taker had opened
    a.release()
    b = HostLock(path)
    b.acquire()
    try:
        import fcntl

        fcntl.flock(stale_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old inode is free...
        assert os.fstat(stale_fd).st_ino != os.stat(path).st_ino  # ...but it is not the lock file
        with pytest.raises(LockHeld):
            HostLock(path).acquire()
    finally:
        os.close(stale_fd)
        b.release()


def test_lock_in_same_process_is_exclusive(tmp_path):
    path = tmp_path / "l"
    with HostLock(path):
        t0 = time.monotonic()
        with pytest.raises(LockHeld):
            HostLock(path).acquire()
        assert time.monotonic() - t0 < 2  # never waits
