"""The console's own files: lock, audit log and demo state are never reached through a symbolic link,
directories get explicit modes whatever the umask, and the audit reader survives any bytes and any JSON
shape (a bad line is named by its number, the rest is read; malformed undo data refuses)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nodeconsole.actions.audit import AuditLog
from nodeconsole.actions.lock import HostLock
from nodeconsole.actions.passthrough import plan_passthrough
from nodeconsole.actions.plan import StepError, build_step
from nodeconsole.actions.progress import REFUSED
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.safe_files import UnsafePath, ensure_dir
from nodeconsole.actions.undo import plan_undo
from tests.actions.test_passthrough import IDLE, changed, demo, tree_state  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
CODE = "import sys; from nodeconsole.actions.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli(state: Path, *args: str, umask: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state)}
    env.pop("NODECONSOLE_FAIL_STEP", None)
    return subprocess.run([sys.executable, "-c", CODE, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, umask=-1 if umask is None else umask)


# -- symbolic links ----------------------------------------------------------------------------------

def test_a_symlinked_lock_is_refused_and_its_target_untouched(demo, tmp_path):  # noqa: F811
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (demo.state_dir / "nodeconsole.lock").symlink_to(victim)
    before = tree_state(demo.state_dir)
    res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE))
    assert res.status == REFUSED and "symbolic link" in res.message and "nothing was changed" in res.message
    assert victim.read_text() == "precious\n" and changed(before, tree_state(demo.state_dir)) == set()
    assert not demo.audit.path.exists()
    with pytest.raises(UnsafePath):
        HostLock(demo.state_dir / "nodeconsole.lock").acquire()


def test_a_symlinked_audit_log_is_refused_and_its_target_untouched(demo, tmp_path):  # noqa: F811
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    demo.audit.path.symlink_to(victim)
    before = tree_state(demo.state_dir)
    res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE))
    assert res.status == REFUSED and "cannot write the audit log" in res.message and "symbolic link" in res.message
    assert victim.read_text() == "precious\n" and changed(before, tree_state(demo.state_dir)) == set()
    with pytest.raises(UnsafePath):
        demo.audit.records()


def test_cli_symlinked_files_give_one_line_errors(state, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / "audit.jsonl").symlink_to(victim)
    res = _cli(state, "log", "--demo")
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1 and "symbolic link" in res.stderr
    res = _cli(state, "passthrough", IDLE, "--demo", "--apply", "--yes")
    assert res.returncode == 1 and "Traceback" not in res.stderr and "symbolic link" in res.stderr
    (state / "audit.jsonl").unlink()
    (state / ".demo.lock").unlink(missing_ok=True)
    (state / ".demo.lock").symlink_to(victim)
    res = _cli(state, "demo", "reset")
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1 and "symbolic link" in res.stderr
    assert victim.read_text() == "precious\n"


# -- modes ----------------------------------------------------------------------------------------------

def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_directories_and_files_get_explicit_modes_under_umask_000(tmp_path):
    state = tmp_path / "a" / "demo"
    res = _cli(state, "passthrough", IDLE, "--demo", "--apply", "--yes", umask=0)
    assert res.returncode == 0, res.stderr
    assert _mode(state) == 0o700 and _mode(state.parent) == 0o700
    assert _mode(state / "audit.jsonl") == 0o640
    ensure_dir(tmp_path / "var" / "log" / "nodeconsole", 0o750)
    assert _mode(tmp_path / "var" / "log" / "nodeconsole") == 0o750
    log = AuditLog(tmp_path / "x" / "audit.jsonl")
    old = os.umask(0)
    try:
        log.append({"id": "a"})
        lock = HostLock(tmp_path / "y" / "nodeconsole.lock")
        lock.acquire()
        assert _mode(lock.path) == 0o600
        lock.release()
    finally:
        os.umask(old)
    assert _mode(log.path.parent) == 0o750 and _mode(log.path) == 0o640


def test_a_symlinked_state_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePath):
        ensure_dir(tmp_path / "link", 0o700)


# -- a damaged audit log ------------------------------------------------------------------------------

GOOD = {"id": "20260101-000000-0001", "action": "passthrough", "title": "ok", "result": "applied",
        "who": {"user": "root"}, "undo": []}
BAD_LINES = [
    b"\xff\xfe not utf-8 at all\n",
    b'{"id": "r1", "who": "root", "steps": "abc", "undo": "x", "failed": [1], "result": 7}\n',
    b'{"id": "r2", "undone": [1, 2], "undo_failed": {"a": 1}, "title": ["t"], "when": 5}\n',
    b"[" * 100000 + b"\n",
    b'{"id": ' + b"[" * 50000 + b"\n",
    b"[1, 2, 3]\n",
    b'{"no": "id"}\n',
    b'{"id": "torn", "resu',
]


def test_the_reader_survives_any_bytes_and_shapes(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_bytes((json.dumps(GOOD) + "\n").encode() + b"".join(BAD_LINES))
    log = AuditLog(path)
    records = [r.to_json() for r in log.records()]
    assert [r["id"] for r in records] == [GOOD["id"], "r1", "r2"]
    r1 = records[1]
    assert "who" not in r1 and "steps" not in r1 and "undo" not in r1 and "result" not in r1
    assert r1["undo_invalid"].startswith("line 3:")
    assert any(p.startswith("line 2: not UTF-8") for p in log.problems)
    assert any(p.startswith("line 5: nested too deeply") for p in log.problems), log.problems
    assert any(p.startswith("line 9: not JSON") for p in log.problems)
    assert log.latest_undoable() is None  # r1's damaged undo: no result, not offered


@pytest.mark.parametrize("command", [("log",), ("log", "--json"), ("undo",), ("undo", "r1"), ("release", IDLE)])
def test_cli_on_a_damaged_audit_log(state, command):
    path = state / "audit.jsonl"
    path.write_bytes((json.dumps(GOOD) + "\n").encode() + b"".join(BAD_LINES))
    before = tree_state(state, skip=())
    res = _cli(state, *command, "--demo")
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode in (0, 1), res.stderr
    if command[0] == "log":
        assert res.returncode == 0 and "line 2: not UTF-8" in res.stderr and GOOD["id"] in res.stdout
    if command == ("undo", "r1"):
        assert res.returncode == 1 and "damaged" in res.stdout
    assert changed(before, tree_state(state, skip=())) == set()


def test_undo_refuses_malformed_operations(demo):  # noqa: F811
    for op in ({"kind": "pci_driver"}, {"kind": "pci_driver", "device": 5}, {"kind": "file"},
               {"kind": "vm_pins", "vm": "train-b", "scope": "config", "emulator": None},
               {"kind": "vm_pins", "vm": "train-b", "vcpus": "0-3", "emulator": None},
               {"kind": "vm_pins", "vm": "train-b", "vcpus": [[0, 5]], "emulator": None},
               {"kind": "vm_pins", "vm": "train-b", "vcpus": [], "emulator": None, "numa": "strict"},
               {"kind": "mdev"}, {"kind": "vm_hostdev"}, "not an op", ["kind"], {"kind": ["x"]}):
        with pytest.raises(StepError):
            build_step(demo, op)
    before = tree_state(demo.state_dir)
    with open(demo.audit.path, "a") as f:
        f.write(json.dumps({"id": "p1", "action": "pin", "result": "applied", "title": "pin",
                            "undo": [{"kind": "vm_pins", "vm": "train-b", "scope": "config", "emulator": None}]}))
        f.write("\n")
    plan = plan_undo(demo)
    assert not plan.ok and "malformed vm_pins operation" in plan.refusal and not plan.steps
    assert Runner(demo).run(plan).status == REFUSED
    assert changed(before, tree_state(demo.state_dir)) == set()
