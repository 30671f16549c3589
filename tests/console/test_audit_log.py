"""The audit reader (console/audit_log.py): records typed once, read through attributes; one status
vocabulary for runs and records; `log --json` prints each merged object as the log has it."""
from __future__ import annotations

import json

import pytest

from nodeconsole.console.audit_log import AuditReader, AuditRecord, Status


def test_one_status_vocabulary_with_the_strings_of_old():
    from nodeconsole.actions import audit, progress

    assert progress.DONE is audit.APPLIED is Status.APPLIED and progress.FAILED_RESULT is audit.FAILED is Status.FAILED
    assert [s.value for s in Status] == ["in-progress", "applied", "failed", "failed, undo incomplete",
                                         "interrupted", "interrupted, undo incomplete", "nothing to do",
                                         "refused", "cancelled"]
    assert json.dumps({"result": Status.APPLIED}) == '{"result": "applied"}' and f"{Status.REFUSED}" == "refused"


def test_lines_merge_into_typed_records_with_undone_by_computed(tmp_path):
    log = tmp_path / "audit.jsonl"
    lines = [{"id": "a", "action": "pin", "result": "in-progress", "undo": [{"kind": "x"}], "extra": 1},
             {"id": "a", "result": "applied", "notes": ["n"]},
             {"id": "b", "action": "undo", "undoes": "a", "result": "applied", "undone_by": "forged"},
             {"id": "c", "result": "weird", "fixes": "not a list"}]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + "{torn\n")
    reader = AuditReader(log)
    a, b, c = reader.records()
    assert a.result is Status.APPLIED and a.undo == ({"kind": "x"},) and a.notes == ("n",) and a.undone_by == "b"
    assert b.undoes == "a" and b.undone_by is None and c.result == "weird" and c.fixes == ()
    assert a.to_json() == {"id": "a", "action": "pin", "result": "applied", "undo": [{"kind": "x"}], "extra": 1,
                           "notes": ["n"], "undone_by": "b"}
    assert reader.problems == ["line 4: field 'fixes' is not a list of strings; ignored",
                               "line 5: not JSON (a torn line after a crash?); skipped"]
    assert reader.latest_undoable() is None  # a is undone, b undoes


def test_a_record_of_a_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="who"):
        AuditRecord.from_dict({"id": "x", "who": "root"})
    with pytest.raises(ValueError, match="no record id"):
        AuditRecord.from_dict({"result": "applied"})


def test_log_json_prints_the_merged_objects_byte_for_byte(tmp_path, monkeypatch, capsys):
    from nodeconsole.actions.cli import main

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    assert main(["log", "--demo"]) == 0  # makes the demo host
    log = tmp_path / "demo" / "audit.jsonl"
    first = {"id": "r1", "when": "2026-01-01T00:00:00+00:00", "result": "in-progress", "undoes": None,
             "who": {"user": "é"}, "z": [1, 2.5]}
    log.write_text(json.dumps(first) + "\n" + json.dumps({"id": "r1", "result": "applied"}) + "\n")
    capsys.readouterr()
    assert main(["log", "--demo", "--json"]) == 0
    assert capsys.readouterr().out == json.dumps({**first, "result": "applied"}, sort_keys=True) + "\n"
