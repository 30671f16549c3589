"""Interrupted changes: ^C / SIGTERM during `--apply` roll back like any failure; a run killed outright
leaves its lock, which the next run reports (who, pid, when, the change) and takes over. The CLI runs in
a subprocess, held half-way through a step by the fault switch (NODECONSOLE_FAIL_STEP=N:block)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeconsole.actions.audit import IN_PROGRESS, INTERRUPTED, AuditLog
from nodeconsole.actions.interrupt import FaultSwitch
from nodeconsole.actions.plan import StepError
from tests.actions.test_passthrough import IDLE, changed, tree_state

REPO = Path(__file__).resolve().parents[2]
CODE = "import sys; from nodeconsole.actions.cli import main; sys.exit(main(sys.argv[1:]))"


def _env(state: Path, fail: str = "") -> dict[str, str]:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state)}
    env.pop("NODECONSOLE_FAIL_STEP", None)
    if fail:
        env["NODECONSOLE_FAIL_STEP"] = fail
    return env


def _cli(state: Path, *args: str, fail: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CODE, *args], cwd=REPO, env=_env(state, fail),
                          capture_output=True, text=True, timeout=120)


def _blocked(state: Path, step: int, *args: str) -> subprocess.Popen:
    """The CLI applying a change, blocked right after step `step` applied (half-way through the change)."""
    p = subprocess.Popen([sys.executable, "-c", CODE, *args], cwd=REPO, env=_env(state, f"{step}:block"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    line = p.stderr.readline()  # the fault switch says when it blocks
    assert "blocking" in line, line + p.stderr.read()
    return p


def _records(state: Path) -> list[dict]:
    return [r.to_json() for r in AuditLog(state / "audit.jsonl").records()]


PASSTHROUGH = ("passthrough", IDLE, "--vm", "build-1", "--persist", "--demo", "--apply", "--yes")


@pytest.mark.parametrize("sig, name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_mid_apply_rolls_back_and_says_so(state, sig, name):
    before = tree_state(state)
    p = _blocked(state, 1, *PASSTHROUGH)  # driver_override written, nothing else yet
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1, err
    assert f"interrupted by {name} at step 1" in err and "the host is as it was" in err
    assert "undone" in out
    assert changed(before, tree_state(state)) == set()  # no stale driver_override left behind
    rec = _records(state)[-1]
    assert rec["result"] == INTERRUPTED and rec["interrupted"]["signal"] == name
    assert not (state / "nodeconsole.lock").exists()
    assert _cli(state, "undo", "--demo").stdout.startswith("nothing to undo")


def test_a_signal_after_several_steps_undoes_them_all(state):
    before = tree_state(state)
    p = _blocked(state, 3, *PASSTHROUGH)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1 and "interrupted by SIGINT at step 3" in err
    assert out.count("undone") == 3
    assert changed(before, tree_state(state)) == set()


def test_a_killed_run_is_reported_and_its_lock_taken_over(state):
    before = tree_state(state)
    p = _blocked(state, 1, *PASSTHROUGH)
    p.kill()  # kill -9: nothing runs, the lock file and an in-progress record stay behind
    p.communicate(timeout=60)
    lock = json.loads((state / "nodeconsole.lock").read_text())
    rid = lock["change"]
    assert lock["pid"] == p.pid and _records(state)[-1]["result"] == IN_PROGRESS
    assert "never finished" in _cli(state, "log", "--demo").stdout

    res = _cli(state, "undo", "--demo", "--apply", "--yes")  # the next run: reported, taken over
    assert res.returncode == 0, res.stderr
    warn = [line for line in res.stderr.splitlines() if "warning" in line]
    assert len(warn) == 1 and f"pid {p.pid}" in warn[0] and rid in warn[0]
    assert "`nodeconsole log`" in warn[0] and f"`nodeconsole undo {rid} --apply`" in warn[0]
    assert changed(before, tree_state(state)) == set()
    assert not (state / "nodeconsole.lock").exists()


def test_fault_switch_from_the_cli_fails_and_rolls_back(state):
    before = tree_state(state)
    for fail in ("2", "pci_driver", "2:verify", "vm_hostdev"):
        res = _cli(state, *PASSTHROUGH, fail=fail)
        assert res.returncode == 1 and "injected" in res.stderr, (fail, res.stderr)
        assert "the host is as it was" in res.stderr
        assert changed(before, tree_state(state)) == set(), fail
    res = _cli(state, *PASSTHROUGH, fail="2:sometimes")
    assert res.returncode == 1 and "NODECONSOLE_FAIL_STEP" in res.stderr
    assert changed(before, tree_state(state)) == set()


def test_fault_switch_parsing():
    assert FaultSwitch.from_env({}).target == ""
    f = FaultSwitch.from_env({"NODECONSOLE_FAIL_STEP": "pci_driver:verify"})
    assert (f.target, f.phase) == ("pci_driver", "verify") and f.hits(5, "pci_driver") and not f.hits(5, "file")
    assert FaultSwitch.from_env({"NODECONSOLE_FAIL_STEP": "3"}).hits(3, "x")
    with pytest.raises(StepError):
        FaultSwitch.from_env({"NODECONSOLE_FAIL_STEP": "3:never"})


def test_signal_during_the_rollback_does_not_cut_it_short(state):
    """A second ^C while the rollback runs is deferred: every change is still undone."""
    before = tree_state(state)
    p = _blocked(state, 2, *PASSTHROUGH)
    p.send_signal(signal.SIGINT)
    time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode in (1, 130, -signal.SIGINT), err  # the second ^C came after the run had ended
    assert "interrupted by SIGINT at step 2" in err
    assert changed(before, tree_state(state)) == set()
