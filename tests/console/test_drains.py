"""The drains file read into the snapshot (console/drains.py) and written by the drain step
(actions/drain.py): damaged entries are left out and said, the file is re-read only when it changes,
a link in its place is never followed, a damaged file is never overwritten."""
from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeconsole.console.drains import DRAINS_FILE, REASON_MAX, DrainReader, parse, reason_problem, render
from nodeconsole.console.root import Root

ENTRY = {"reason": "RMA ticket 42", "who": {"user": "alice", "uid": 1000, "sudo_user": "bob"},
         "when": "2026-12-02T09:15:03Z"}


def _write(root, obj) -> None:
    path = root / DRAINS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(obj if isinstance(obj, bytes) else json.dumps(obj).encode())


def test_parse_keeps_good_entries_and_names_the_bad_ones():
    data = json.dumps({"version": 1, "drains": {"0000:9A:00.0": ENTRY, "nope": ENTRY,
                                                "0000:18:00.0": {"reason": 3}}}).encode()
    entries, problems = parse(data)
    assert list(entries) == ["0000:9a:00.0"]  # the address normalised to lower case
    assert len(problems) == 2 and any("nope" in p for p in problems)
    assert parse(b"{not json")[0] == {} and parse(b"{not json")[1]
    assert parse(None) == ({}, [])


@given(st.text(max_size=REASON_MAX))
def test_a_reason_is_accepted_exactly_when_it_is_one_visible_line(reason):
    from nodeconsole.console.hosttext import visible

    ok = not reason_problem(reason)
    assert ok == (bool(reason.strip()) and visible(reason) == reason)


@given(st.dictionaries(st.sampled_from(["0000:18:00.0", "0000:9a:00.0", "0000:bb:00.0"]),
                       st.fixed_dictionaries({"reason": st.text(min_size=1).filter(lambda r: not reason_problem(r)),
                                              "when": st.just("2026-12-02T09:15:03Z")})))
def test_render_then_parse_gives_the_entries_back(entries):
    assert parse(render(entries)) == (entries, [])


def test_reader_rereads_only_on_change(tmp_path, monkeypatch):
    root = Root(tmp_path)
    reader = DrainReader()
    assert reader.drains(root) == {}
    _write(tmp_path, {"drains": {"0000:9a:00.0": ENTRY}})
    d = reader.drains(root)["0000:9a:00.0"]
    assert (d.reason, d.who, d.when) == ("RMA ticket 42", "bob", "2026-12-02T09:15:03Z")  # the sudo caller
    calls = []
    monkeypatch.setattr(Root, "read_bytes", lambda self, rel, limit=0: calls.append(rel))
    assert reader.drains(root)["0000:9a:00.0"] == d and calls == []  # unchanged: not read again
    monkeypatch.undo()
    _write(tmp_path, {"drains": {"0000:18:00.0": dict(ENTRY, reason="other")}})
    assert list(reader.drains(root)) == ["0000:18:00.0"]
    os.unlink(tmp_path / DRAINS_FILE)
    assert reader.drains(root) == {}


def test_a_link_out_of_the_root_reads_as_no_drains(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"drains": {"0000:9a:00.0": ENTRY}}))
    host = tmp_path / "host"
    (host / DRAINS_FILE).parent.mkdir(parents=True)
    os.symlink(outside, host / DRAINS_FILE)
    assert DrainReader().drains(Root(host)) == {}


def test_the_step_refuses_a_link_and_a_damaged_file(tmp_path):
    from nodeconsole.actions.drain import read_drains, write_drains
    from nodeconsole.actions.plan import StepError

    host = tmp_path / "host"
    _write(host, b"{torn")
    with pytest.raises(StepError, match="not JSON"):
        read_drains(Root(host))
    os.unlink(host / DRAINS_FILE)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.symlink(victim, host / DRAINS_FILE)
    with pytest.raises(StepError, match="symbolic link"):
        write_drains(Root(host), {"0000:9a:00.0": ENTRY})
    assert victim.read_text() == "keep me"
    os.unlink(host / DRAINS_FILE)
    write_drains(Root(host), {"0000:9a:00.0": ENTRY})
    assert read_drains(Root(host)) == {"0000:9a:00.0": ENTRY}
    assert [n for n in os.listdir(host / os.path.dirname(DRAINS_FILE))] == ["drains.json"]  # no temp left
