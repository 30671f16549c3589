"""Record first, then act: a change's in-progress record is written whole and synced before its first
step, or the change is refused with nothing touched (a short write is continued; a line that cannot be
finished is cut off again, so the log stays readable); a change is refused when the log's filesystem
has less than MIN_FREE_BYTES free; a change whose final record is lost stays applied, is reported in one
line with its id, and `log` / `undo` find it from its in-progress record. A full filesystem is
simulated through the audit module's two seams (free_bytes, write_some): deterministic, no mount."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from nodeconsole.actions import audit
from nodeconsole.actions.audit import IN_PROGRESS, MIN_FREE_BYTES, AuditLog
from nodeconsole.actions.cli import main
from tests.actions.test_passthrough import changed, tree_state

PF = "0000:3c:00.0"  # NIC1 of the demo host: no VFs
NUMVFS = f"root/sys/bus/pci/devices/{PF}/sriov_numvfs"
REC = {"id": "20260101-000000-0001", "action": "nic-vfs", "title": "t", "result": IN_PROGRESS, "undo": []}


def _full_after(limit: int):
    """A write_some that takes `limit` more bytes in all, then raises ENOSPC (a filesystem filling up)."""
    left = [limit]

    def write_some(fd: int, data: bytes) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = audit.os.write(fd, data[:left[0]])
        left[0] -= n
        return n
    return write_some


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([*argv, "--demo"])
    out, err = capsys.readouterr()
    return rc, out, err


# -- the writer --------------------------------------------------------------------------------------------

def test_short_writes_are_continued(tmp_path, monkeypatch):
    sizes = []

    def dribble(fd: int, data: bytes) -> int:
        sizes.append(len(data))
        return audit.os.write(fd, data[:7])
    monkeypatch.setattr(audit, "write_some", dribble)
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append(REC)
    log.append({"id": REC["id"], "result": "applied"})
    assert len(sizes) > 4 and [r.to_json() for r in log.records()] == [{**REC, "result": "applied"}] and log.problems == []


@pytest.mark.parametrize("limit", [0, 1, 40])
def test_a_line_that_cannot_be_finished_is_cut_off_again(tmp_path, monkeypatch, limit):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append(REC)
    before = log.path.read_bytes()
    monkeypatch.setattr(audit, "write_some", _full_after(limit))
    with pytest.raises(OSError) as e:
        log.append({**REC, "id": "20260101-000000-0002"})
    assert e.value.errno == errno.ENOSPC
    assert log.path.read_bytes() == before and [r.to_json() for r in log.records()] == [REC] and log.problems == []


def test_a_write_that_takes_nothing_is_an_error_not_a_loop(tmp_path, monkeypatch):
    log = AuditLog(tmp_path / "audit.jsonl")
    monkeypatch.setattr(audit, "write_some", lambda fd, data: 0)
    with pytest.raises(OSError):
        log.append(REC)
    assert log.path.read_bytes() == b""


def test_a_torn_line_left_by_a_crash_does_not_swallow_the_next_record(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    log.path.write_bytes(b'{"id": "torn", "resu')
    log.append(REC)
    assert [r.to_json() for r in log.records()] == [REC] and len(log.problems) == 1 and "line 1" in log.problems[0]


def test_free_space_is_asked_for_only_when_told(tmp_path, monkeypatch):
    monkeypatch.setattr(audit, "free_bytes", lambda path: MIN_FREE_BYTES - 1)
    log = AuditLog(tmp_path / "audit.jsonl")
    log.append(REC)  # a final record is never refused for space
    with pytest.raises(OSError, match="KiB free"):
        log.append({**REC, "id": "x"}, min_free=MIN_FREE_BYTES)
    assert [r.to_json() for r in log.records()] == [REC]


# -- the runner, through the CLI (the reproduction: `nic vfs PF 2 --demo --apply --yes`) ----------

def _agree(state: Path, before: dict, capsys) -> None:
    """The host and the log agree: the change is absent from the host and from `log`."""
    assert changed(before, tree_state(state)) == set()
    rc, out, err = _cli(capsys, "log")
    assert rc == 0 and out.startswith("no recorded changes") and err == ""


def test_too_little_free_space_refuses_the_change(state, monkeypatch, capsys):
    before = tree_state(state)
    monkeypatch.setattr(audit, "free_bytes", lambda path: 512 * 1024)
    rc, out, err = _cli(capsys, "nic", "vfs", PF, "2", "--apply", "--yes")
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1
    assert "512 KiB free" in err and "nothing was changed" in err and "[1/2]" not in out
    _agree(state, before, capsys)


@pytest.mark.parametrize("limit", [0, 100])
def test_a_cut_in_progress_record_refuses_the_change(state, monkeypatch, capsys, limit):
    before = tree_state(state)
    monkeypatch.setattr(audit, "write_some", _full_after(limit))
    rc, out, err = _cli(capsys, "nic", "vfs", PF, "2", "--apply", "--yes")
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1
    assert "cannot write the audit log" in err and "nothing was changed" in err and "[1/2]" not in out
    assert (state / "audit.jsonl").read_bytes() == b""  # no torn line left behind
    _agree(state, before, capsys)


def test_a_lost_final_record_keeps_the_change_and_log_and_undo_find_it(state, monkeypatch, capsys):
    before = tree_state(state)
    real = audit.write_some

    def no_final(fd: int, data: bytes) -> int:
        if b'"in-progress"' not in data:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(audit, "write_some", no_final)
    rc, out, err = _cli(capsys, "nic", "vfs", PF, "2", "--apply", "--yes")
    records = [r.to_json() for r in AuditLog(state / "audit.jsonl").records()]
    assert len(records) == 1 and records[0]["result"] == IN_PROGRESS and records[0]["undo"]
    rid = records[0]["id"]
    assert rc == 0 and "Traceback" not in err and "[2/2] ok" in out
    lines = err.splitlines()
    assert len(lines) == 1 and rid in lines[0] and "final audit record could not be written" in lines[0]
    assert (state / NUMVFS).read_text().strip() == "2"  # the applied, verified change stays

    monkeypatch.setattr(audit, "write_some", real)  # space again
    rc, out, err = _cli(capsys, "log")
    assert rc == 0 and err == "" and rid in out and "in-progress" in out
    assert f"undo: nodeconsole undo {rid} --apply" in out
    rc, out, err = _cli(capsys, "undo", "--apply", "--yes")  # the plain undo picks it
    assert rc == 0 and rid in out, err
    assert changed(before, tree_state(state)) == set()
    rows = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    assert rows[-1]["result"] == "applied" and any(r.get("undoes") == rid for r in rows)
