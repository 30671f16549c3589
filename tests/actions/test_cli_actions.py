"""`nodeconsole passthrough / release / log / undo` on the demo host, in a temporary state directory."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.lock import HostLock
from tests.actions.test_passthrough import IDLE, IDLE_AUDIO, changed, tree_state

REPO = Path(__file__).resolve().parents[2]


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state)}
    code = "import sys; from nodeconsole.actions.cli import main; sys.exit(main(sys.argv[1:]))"  # what the script runs
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_acceptance_passthrough_snapshot_undo(state):
    before = tree_state(state)
    dry = _cli(state, "passthrough", IDLE, "--demo", "--vm", "build-1", "--persist")
    assert dry.returncode == 0, dry.stderr
    assert "Nothing was changed: add --apply" in dry.stdout and f"  1. Bind {IDLE} to vfio-pci" in dry.stdout
    assert changed(before, tree_state(state, skip=())) == set()  # no audit either

    done = _cli(state, "passthrough", "4", "--demo", "--vm", "build-1", "--persist", "--apply", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[6/6] ok" in done.stdout and "applied 6 step(s)" in done.stdout

    snap = json.loads(_cli(state, "snapshot", "--demo", "--json").stdout)
    gpu = next(g for g in snap["gpus"] if g["address"] == IDLE)
    assert gpu["driver"] == "vfio-pci" and gpu["owner"]["kind"] == "vfio"
    vm = next(v for v in snap["vms"] if v["name"] == "build-1")
    assert {h["address"] for h in vm["hostdevs"]} == {IDLE, IDLE_AUDIO}
    audio = next(d for d in snap["pci_devices"] if d["address"] == IDLE_AUDIO)
    assert audio["driver"] == "vfio-pci" and audio["driver_override"] == "vfio-pci"

    log = _cli(state, "log", "--demo")
    rid = json.loads(_cli(state, "log", "--demo", "--json").stdout.splitlines()[-1])["id"]
    assert rid in log.stdout and "applied" in log.stdout and f"nodeconsole undo {rid} --apply" in log.stdout

    undo = _cli(state, "undo", "--demo", "--apply", "--yes")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert f"Undo {rid}" in undo.stdout
    assert changed(before, tree_state(state)) == set()  # exactly as before, the audit log aside
    assert "applied, undone by" in _cli(state, "log", "--demo").stdout
    nothing = _cli(state, "undo", "--demo")
    assert nothing.returncode == 0 and "nothing to undo" in nothing.stdout


def _run(monkeypatch, capsys, argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_typed_confirmation_on_the_terminal(state, monkeypatch, capsys):
    before = tree_state(state, skip=())
    argv = ["passthrough", IDLE, "--demo", "--vm", "build-1", "--apply"]
    rc, out, err = _run(monkeypatch, capsys, argv, "y\n")  # a y is not the address
    assert rc == 1 and f"Type {IDLE} to go ahead" in err and "cancelled" in err
    assert changed(before, tree_state(state, skip=())) == set()
    rc, out, err = _run(monkeypatch, capsys, argv, "")  # end of input: no
    assert rc == 1 and "cancelled" in err
    assert changed(before, tree_state(state, skip=())) == set()
    rc, out, err = _run(monkeypatch, capsys, argv, f"{IDLE}\n")
    assert rc == 0 and "applied 4 step(s)" in out


def test_yes_no_prompt(state, monkeypatch, capsys):
    before = tree_state(state, skip=())
    argv = ["passthrough", IDLE, "--demo", "--apply"]
    rc, _out, err = _run(monkeypatch, capsys, argv, "n\n")
    assert rc == 1 and "Apply these 2 step(s)? [y/N]" in err
    assert changed(before, tree_state(state, skip=())) == set()
    rc, out, _err = _run(monkeypatch, capsys, argv, "y\n")
    assert rc == 0 and "applied 2 step(s)" in out
    rc, out, _err = _run(monkeypatch, capsys, ["release", IDLE, "--demo", "--apply", "--yes"])
    assert rc == 0 and f"Give {IDLE} back to nvidia" in out


@pytest.mark.parametrize("argv,fragment", [
    (["passthrough", "../../etc"], "'../../etc' is not a GPU"),
    (["passthrough", "0000:zz:00.0"], "'0000:zz:00.0' is not a GPU"),
    (["passthrough", "99"], "no GPU with index 99"),
    (["passthrough", IDLE, "--vm", "ghost"], "unknown VM ghost"),
    (["release", "99"], "no GPU with index 99"),
    (["undo", "no-such-id"], "no change with id 'no-such-id'"),
])
def test_bad_requests_exit_2_with_one_line(state_ro, monkeypatch, capsys, argv, fragment):
    state = state_ro
    before = tree_state(state, skip=())
    rc, out, err = _run(monkeypatch, capsys, argv + ["--demo", "--apply", "--yes"])
    assert rc == 2 and out == "" and err.startswith("nodeconsole: error: ") and fragment in err
    assert err.count("\n") == 1
    assert changed(before, tree_state(state, skip=())) == set()


def test_refused_and_locked_exit_1(state_ro, monkeypatch, capsys):
    state = state_ro
    before = tree_state(state, skip=())
    rc, out, _err = _run(monkeypatch, capsys, ["passthrough", "0", "--demo", "--apply", "--yes"])
    assert rc == 1 and "[FAILED] no process uses the GPU: pid 4242 python3" in out
    with HostLock(state / "nodeconsole.lock"):
        rc, _out, err = _run(monkeypatch, capsys, ["passthrough", IDLE, "--demo", "--apply", "--yes"])
    assert rc == 1 and f"another nodeconsole (pid {os.getpid()}) is changing this host" in err
    assert changed(before, tree_state(state, skip=())) == set()


def test_log_shows_failures_and_what_was_undone(state, monkeypatch, capsys):
    from nodeconsole.actions.host import ActionHost
    from nodeconsole.actions.passthrough import plan_passthrough
    from nodeconsole.actions.runner import Runner
    from nodeconsole.console.seams import demo_host

    host = ActionHost.from_seams(demo_host())
    host.kernel.fail_on("drivers_probe", after=1)  # the second function's probe fails
    res = Runner(host).run(plan_passthrough(host, host.snapshot(), IDLE))
    assert not res.ok
    rc, out, _err = _run(monkeypatch, capsys, ["log", "--demo"])
    assert rc == 0
    assert f"failed at step 2 (Bind {IDLE_AUDIO} to vfio-pci)" in out
    assert f"undone: Bind {IDLE_AUDIO} to vfio-pci; Bind {IDLE} to vfio-pci" in out
    assert "nodeconsole undo" not in out  # nothing left to undo
    rc, out, _err = _run(monkeypatch, capsys, ["log", "--demo", "--json", "-n", "1"])
    rec = json.loads(out)
    assert rec["result"] == "failed" and rec["failed"]["step"] == 2 and rec["who"]["uid"] == os.getuid()
