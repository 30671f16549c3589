"""The runner: confirm, lock, apply with verification, roll back on failure, audit, undo — driven by a
small step kind whose state lives in a file, so failures can be injected at every step."""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from nodeconsole.actions.audit import APPLIED, FAILED, FAILED_PARTIAL
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Check, Plan, RequestError, Step, build_step, step_kind
from nodeconsole.actions.progress import CANCELLED, DONE, FAILED_RESULT, NOTHING, REFUSED, Progress
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams

STATE = "values.json"


def _load(host) -> dict:
    p = host.root.p(STATE)
    return json.loads(p.read_text()) if p.exists() else {"values": {}, "fail": {}}


def _save(host, data: dict) -> None:
    host.root.p(STATE).write_text(json.dumps(data, sort_keys=True))


@step_kind("test_value")
def _value_step(host, op):
    """A key of values.json holds `value` (None: absent). `fail` in the file injects failures."""
    key, value = op["key"], op["value"]
    values = _load(host)["values"]
    if values.get(key) == value:
        return None
    inverse = {"kind": "test_value", "key": key, "value": values.get(key)}
    tag = f"{key}={value}"

    def apply():
        d = _load(host)
        mode = d["fail"].get(tag)
        if mode == "apply-before":
            raise OSError(5, "injected write error", f"/sys/{key}")
        if value is None:
            d["values"].pop(key, None)
        else:
            d["values"][key] = value
        _save(host, d)
        if mode == "apply-after":  # half done: written, then the call fails
            raise RuntimeError("injected failure after the write")

    def verify():
        d = _load(host)
        if d["fail"].get(tag) == "verify":
            return f"{key} reads back wrong (injected)"
        return None if d["values"].get(key) == value else f"{key} is {d['values'].get(key)}"

    return Step(f"Set {key} to {value}", "test", (f"echo {value} > {key}",), dict(op), inverse, apply, verify)


@pytest.fixture
def host(tmp_path) -> ActionHost:
    root = tmp_path / "root"
    root.mkdir()
    h = ActionHost(seams=Seams(root=Root(root), libvirt_uri=None), kernel=None, domains=None,
                   state_dir=tmp_path / "state", is_root=lambda: True)
    _save(h, {"values": {"a": 1, "c": 3}, "fail": {}})
    return h


def _plan(host, changes: dict) -> Plan:
    plan = Plan("test", f"set {changes}", {"changes": changes})
    for k, v in changes.items():
        s = build_step(host, {"kind": "test_value", "key": k, "value": v})
        if s is not None:
            plan.steps.append(s)
    return plan


CHANGES = {"a": 10, "b": 20, "c": None, "d": 40}


def _snapshot_dir(path: Path) -> dict:
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, path)] = os.readlink(p) if os.path.islink(p) else Path(p).read_bytes()
    return out


def test_success_audits_and_reports_progress(host):
    events: list[Progress] = []
    asked: list[Plan] = []
    plan = _plan(host, CHANGES)
    res = Runner(host).run(plan, confirm=lambda p: asked.append(p) or True, progress=events.append)
    assert res.status == DONE and res.ok and asked == [plan]
    assert _load(host)["values"] == {"a": 10, "b": 20, "d": 40}
    assert [(e.index, e.phase) for e in events] == [(i, ph) for i in range(1, 5) for ph in ("apply", "verify", "ok")]
    rec = host.audit.find(res.record_id).to_json()
    assert rec["result"] == APPLIED and rec["action"] == "test" and rec["request"] == {"changes": CHANGES}
    assert [s["commands"] for s in rec["steps"]] == [["echo 10 > a"], ["echo 20 > b"], ["echo None > c"], ["echo 40 > d"]]
    assert rec["undo"] == [{"kind": "test_value", "key": "d", "value": None},
                           {"kind": "test_value", "key": "c", "value": 3},
                           {"kind": "test_value", "key": "b", "value": None},
                           {"kind": "test_value", "key": "a", "value": 1}]
    assert rec["who"]["uid"] == os.getuid() and rec["undo_command"] == f"nodeconsole undo {res.record_id} --apply"
    assert not (host.state_dir / "nodeconsole.lock").exists()


@pytest.mark.parametrize("mode", ["apply-before", "apply-after", "verify"])
@pytest.mark.parametrize("k", range(4))
def test_failure_at_step_k_rolls_everything_back(host, k, mode):
    key, value = list(CHANGES.items())[k]
    d = _load(host)
    d["fail"] = {f"{key}={value}": mode}
    _save(host, d)
    before = _load(host)
    events: list[Progress] = []
    res = Runner(host).run(_plan(host, CHANGES), progress=events.append)
    assert res.status == FAILED_RESULT and not res.ok
    assert _load(host) == before  # exactly as it was
    rec = host.audit.find(res.record_id).to_json()
    assert rec["result"] == FAILED and rec["failed"]["step"] == k + 1
    assert rec["failed"]["title"] == f"Set {key} to {value}"
    assert ("injected" in rec["failed"]["error"]) and rec["undo"] == []
    titles = [f"Set {kk} to {vv}" for kk, vv in list(CHANGES.items())[: k + 1]]
    assert rec["undone"] == list(reversed(titles))  # the failed step too: it may be half-applied
    assert res.undone == rec["undone"] and "Every change was undone" in res.message
    assert [e.index for e in events if e.phase == "undone"] == list(range(k + 1, 0, -1))
    assert host.audit.latest_undoable() is None


def test_failed_undo_is_reported_and_left_undoable(host):
    d = _load(host)
    # b fails after writing; undoing b (back to absent) then fails too
    d["fail"] = {"b=20": "apply-after", "b=None": "apply-before"}
    _save(host, d)
    res = Runner(host).run(_plan(host, CHANGES))
    assert res.status == FAILED_RESULT and res.undo_failed and "Set b to 20" in res.undo_failed[0]
    rec = host.audit.find(res.record_id).to_json()
    assert rec["result"] == FAILED_PARTIAL and rec["undone"] == ["Set a to 10"]
    assert rec["undo"] == [{"kind": "test_value", "key": "b", "value": None}]
    assert host.audit.latest_undoable().id == res.record_id
    # the admin fixes the cause and undoes what is left
    d = _load(host)
    d["fail"] = {}
    _save(host, d)
    undo = plan_undo(host)
    assert [s.title for s in undo.steps] == ["Set b to None"]
    assert Runner(host).run(undo).status == DONE
    assert _load(host)["values"] == {"a": 1, "c": 3}


def _unchanged(host, plan, **kw) -> tuple:
    before = _snapshot_dir(host.root.path)
    res = Runner(host).run(plan, **kw)
    assert _snapshot_dir(host.root.path) == before
    assert not host.audit.path.exists()
    return res


def test_refusals_change_nothing(host):
    refused = _plan(host, CHANGES)
    refused.checks.append(Check("IOMMU is on", False, "no IOMMU"))
    res = _unchanged(host, refused)
    assert res.status == REFUSED and res.message == "IOMMU is on: no IOMMU"

    assert _unchanged(host, _plan(host, {"a": 1})).status == NOTHING

    host.is_root = lambda: False
    res = _unchanged(host, _plan(host, CHANGES))
    assert res.status == REFUSED and "needs root" in res.message
    host.is_root = lambda: True

    res = _unchanged(host, _plan(host, CHANGES), confirm=lambda p: False)
    assert res.status == CANCELLED

    host.read_only_reason = "a captured tree (--root) is read-only"
    assert _unchanged(host, _plan(host, CHANGES)).message == "a captured tree (--root) is read-only"


def test_lock_held_refuses(host):
    host.state_dir.mkdir(parents=True)
    path = host.state_dir / "nodeconsole.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242\n")
    try:
        asked = []
        res = _unchanged(host, _plan(host, CHANGES), confirm=lambda p: asked.append(1) or True)
        assert res.status == REFUSED
        assert "another nodeconsole (pid 4242) is changing this host" in res.message
    finally:
        os.close(fd)


def test_stale_plan_is_refused_under_the_lock(host):
    plan = _plan(host, CHANGES)
    plan.rebuild = lambda: _plan(host, CHANGES)
    d = _load(host)
    d["values"]["b"] = 20  # someone else did part of it meanwhile
    _save(host, d)
    res = Runner(host).run(plan)
    assert res.status == REFUSED and "changed since the plan was made" in res.message
    assert _load(host)["values"] == {"a": 1, "b": 20, "c": 3}
    fresh = _plan(host, CHANGES)
    fresh.rebuild = lambda: _plan(host, CHANGES)
    assert Runner(host).run(fresh).status == DONE


def test_undo_latest_then_walks_back(host):
    first = Runner(host).run(_plan(host, {"a": 10}))
    second = Runner(host).run(_plan(host, {"b": 20}))
    assert first.ok and second.ok
    undo = plan_undo(host)
    assert undo.undoes == second.record_id and [s.title for s in undo.steps] == ["Set b to None"]
    res = Runner(host).run(undo)
    assert res.status == DONE and _load(host)["values"] == {"a": 10, "c": 3}
    assert host.audit.find(res.record_id).to_json()["undoes"] == second.record_id
    # again: the change before, not a redo of the undo
    assert plan_undo(host).undoes == first.record_id
    assert Runner(host).run(plan_undo(host)).ok
    assert _load(host)["values"] == {"a": 1, "c": 3}
    with pytest.raises(RequestError, match="nothing to undo"):
        plan_undo(host)
    again = plan_undo(host, first.record_id)
    assert not again.ok and "already undone" in again.refusal
    with pytest.raises(RequestError, match="no change with id"):
        plan_undo(host, "nope")
    # an undo can itself be undone by its id (a redo)
    redo = plan_undo(host, res.record_id)
    assert Runner(host).run(redo).ok and _load(host)["values"] == {"a": 1, "b": 20, "c": 3}


def test_undo_of_a_change_already_reverted_by_hand_is_empty(host):
    res = Runner(host).run(_plan(host, {"a": 10}))
    d = _load(host)
    d["values"]["a"] = 1
    _save(host, d)
    undo = plan_undo(host, res.record_id)
    assert undo.ok and undo.empty


def test_refusal_says_why_without_changing_anything(host):
    """One refusal check, used by run() itself: a refused plan, no root; a held lock refuses in run()."""
    plan = _plan(host, CHANGES)
    runner = Runner(host)
    assert runner.refusal(plan) == ""
    assert not host.state_dir.exists() or not (host.state_dir / "nodeconsole.lock").exists()
    host.is_root = lambda: False
    assert "needs root" in runner.refusal(plan)
    assert runner.run(plan).message == runner.refusal(plan)
    host.is_root = lambda: True
    assert runner.refusal(_plan(host, {"a": 1})) == ""  # empty: not refused, run() settles it
    host.state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(host.state_dir / "nodeconsole.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        res = runner.run(plan)
        assert res.status == REFUSED and "another nodeconsole" in res.message
    finally:
        os.close(fd)
    assert _load(host)["values"] == {"a": 1, "c": 3}


def test_no_audit_log_no_change(host):
    host.state_dir.mkdir(parents=True, exist_ok=True)
    (host.state_dir / "audit.jsonl").mkdir()  # cannot be written
    before = _load(host)
    res = Runner(host).run(_plan(host, CHANGES))
    assert res.status == REFUSED and "cannot write the audit log" in res.message
    assert _load(host) == before


def test_a_failing_progress_display_never_stops_a_change_half_way(host):
    """The CLI's stdout can break (a pipe to head, a dropped SSH session), the console can close."""
    def broken(_event):
        raise BrokenPipeError(32, "Broken pipe")

    res = Runner(host).run(_plan(host, CHANGES), progress=broken)
    assert res.status == DONE
    assert _load(host)["values"] == {"a": 10, "b": 20, "d": 40}
    assert host.audit.find(res.record_id).to_json()["result"] == APPLIED


def test_after_a_redo_plain_undo_targets_the_change_back_in_effect(host):
    older = Runner(host).run(_plan(host, {"a": 10}))
    change = Runner(host).run(_plan(host, {"b": 20}))
    undo = Runner(host).run(plan_undo(host))
    assert undo.ok and _load(host)["values"] == {"a": 10, "c": 3}
    redo = Runner(host).run(plan_undo(host, undo.record_id))
    assert redo.ok and _load(host)["values"] == {"a": 10, "b": 20, "c": 3}
    # b=20 is in effect again: the next plain undo must take it back, not the older a=10
    nxt = plan_undo(host)
    assert nxt.undoes == change.record_id != older.record_id
    assert Runner(host).run(nxt).ok and _load(host)["values"] == {"a": 10, "c": 3}


def test_lock_is_not_kept_when_recording_the_holder_fails(host, monkeypatch):
    lock = host.lock()
    real_write = os.write

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError):
        lock.acquire()
    monkeypatch.setattr(os, "write", real_write)
    again = host.lock()
    again.acquire()  # not held by the failed attempt
    again.release()
