"""A MIG re-layout that fails is rolled back to the same profiles and placements, but NVML gives the
re-created instances new ids and UUIDs: the result and the audit record say so."""
from __future__ import annotations

import io
from contextlib import redirect_stdout

from nodeconsole.actions.cli import main
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.interrupt import FAIL_ENV
from nodeconsole.actions.mig import plan_mig
from nodeconsole.actions.progress import FAILED_RESULT
from nodeconsole.actions.runner import Runner
from nodeconsole.console.seams import demo_host

GPU = "0000:9a:00.0"


def _layout(host: ActionHost) -> list[tuple[str, int]]:
    g = host.snapshot().gpu(GPU)
    assert g is not None
    return sorted((i.profile, i.start) for i in g.mig.instances)


def test_failed_relayout_notes_new_uuids(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    host = ActionHost.from_seams(demo_host(tmp_path / "demo"))
    assert Runner(host).run(plan_mig(host, host.snapshot(), GPU, "3g.40gb,3g.40gb")).ok
    before = _layout(host)
    assert before == [("3g.40gb", 0), ("3g.40gb", 4)]

    plan = plan_mig(host, host.snapshot(), GPU, "7g.80gb")
    monkeypatch.setenv(FAIL_ENV, f"{len(plan.steps)}:verify")  # the last step fails: everything is undone
    res = Runner(host).run(plan)
    monkeypatch.delenv(FAIL_ENV)
    assert res.status == FAILED_RESULT
    assert _layout(host) == before  # same profiles and placements again
    assert "new MIG device UUIDs" in res.message
    rec = host.audit.find(res.record_id).to_json()
    assert rec is not None and len(rec["notes"]) == 2 and all("3g.40gb" in n for n in rec["notes"])
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["log", "--demo"]) == 0
    assert out.getvalue().count("note: 3g.40gb at") == 2


def test_a_rollback_that_recreates_nothing_has_no_note(tmp_path, monkeypatch):
    host = ActionHost.from_seams(demo_host(tmp_path / "demo"))
    plan = plan_mig(host, host.snapshot(), GPU, "3g.40gb,3g.40gb")
    monkeypatch.setenv(FAIL_ENV, f"{len(plan.steps)}:verify")
    res = Runner(host).run(plan)
    monkeypatch.delenv(FAIL_ENV)
    assert res.status == FAILED_RESULT and "Note:" not in res.message
    rec = host.audit.find(res.record_id).to_json()
    assert rec is not None and "notes" not in rec
