"""The demo owns only what it made: it generates into an absent or empty directory, or one holding its
marker (written before the first generated file) or an earlier release's stamp; any other directory,
and a symbolic link as the directory or the marker, is refused in one line (exit 2) with nothing
created or removed."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.demo import state
from nodeconsole.console.demo.owner import MARKER, ForeignStateDir
from nodeconsole.console.demo.state import ensure_demo, is_current, reset_demo

FOREIGN = {
    "root/.ssh/authorized_keys": b"ssh-ed25519 AAAA... admin@example\n",
    "libvirt.xml": b"<not-the-demo/>\n",
    "nvml.json": b'{"mine": true}\n',
    "notes.txt": b"keep me\n",
}


def _files(d: Path) -> dict[str, bytes | str]:
    """Every entry below `d`: file bytes, 'dir' or the link target."""
    out: dict[str, bytes | str] = {}
    for base, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(base, name)
            rel = str(p.relative_to(d))
            out[rel] = "link:" + os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


def _foreign(d: Path) -> dict[str, bytes | str]:
    for rel, data in FOREIGN.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    return _files(d)


def _cli(capsys, d: Path, monkeypatch, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv", [("snapshot", "--demo"), ("log", "--demo"), ("demo", "reset"),
                                  ("demo", "reboot"), ("demo", "inject", "xid", "0000:9a:00.0", "79")])
def test_a_directory_the_demo_did_not_make_is_refused_and_untouched(tmp_path, capsys, monkeypatch, argv):
    d = tmp_path / "somebody"
    before = _foreign(d)
    rc, out, err = _cli(capsys, d, monkeypatch, *argv)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "holds files the demo did not make" in err and "NODECONSOLE_STATE_DIR" in err
    assert _files(d) == before  # every file byte-equal, nothing added (not even a lock file)


def test_the_console_refuses_before_its_screen_opens(tmp_path, capsys, monkeypatch):
    d = tmp_path / "somebody"
    before = _foreign(d)
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
    rc = main(["--demo"], console=lambda args: pytest.fail("the console started"))
    assert rc == 2 and "did not make" in capsys.readouterr().err and _files(d) == before


def test_an_empty_or_absent_directory_is_used_and_marked(tmp_path):
    for d in (tmp_path / "empty", tmp_path / "absent/demo"):
        if d.name == "empty":
            d.mkdir()
        ensure_demo(d)
        assert is_current(d) and (d / MARKER).is_file()


def test_a_lock_file_alone_is_a_run_stopped_before_its_marker(tmp_path):
    d = tmp_path / "demo"
    d.mkdir()
    (d / state.LOCK).write_bytes(b"")
    assert is_current(ensure_demo(d).dest)


def test_an_interrupted_generation_is_recognised_and_redone(tmp_path, monkeypatch):
    d = tmp_path / "demo"
    from nodeconsole.console.demo import generator

    def cut(*args, **kwargs):
        (d / "root.partial/sys").mkdir(parents=True)  # half a tree, as a kill would leave it
        raise KeyboardInterrupt
    monkeypatch.setattr(generator, "generate", cut)
    with pytest.raises(KeyboardInterrupt):
        ensure_demo(d)
    assert (d / MARKER).is_file() and not (d / state.STAMP).exists()
    monkeypatch.undo()
    host = ensure_demo(d)
    assert is_current(d) and not (d / "root.partial").exists() and host.nvml_state.is_file()


def test_a_demo_of_an_earlier_release_is_regenerated(tmp_path):
    d = tmp_path / "demo"
    ensure_demo(d)
    (d / MARKER).unlink()  # earlier releases wrote no marker, only the stamp
    stamp = json.loads((d / state.STAMP).read_text())
    (d / state.STAMP).write_text(json.dumps({**stamp, "layout_version": stamp["layout_version"] - 1}))
    (d / "audit.jsonl").write_text("kept\n")
    assert not is_current(d)
    ensure_demo(d)
    assert is_current(d) and (d / MARKER).is_file() and (d / "audit.jsonl").read_text() == "kept\n"


def test_reset_obeys_the_same_rule(tmp_path):
    d = tmp_path / "somebody"
    before = _foreign(d)
    with pytest.raises(ForeignStateDir):
        reset_demo(d)
    assert _files(d) == before
    ensure_demo(tmp_path / "ours")
    (tmp_path / "ours/mine.txt").write_text("kept\n")
    reset_demo(tmp_path / "ours")  # a directory with its marker: regenerated, other files kept
    assert (tmp_path / "ours/mine.txt").read_text() == "kept\n"


def test_a_symlink_as_the_directory_or_the_marker_is_refused(tmp_path, capsys, monkeypatch):
    real = tmp_path / "real"
    ensure_demo(real)
    (tmp_path / "link").symlink_to(real)
    before = _files(real)
    for call in (ensure_demo, reset_demo):
        with pytest.raises(ForeignStateDir, match="symbolic link"):
            call(tmp_path / "link")
    rc, out, err = _cli(capsys, tmp_path / "link", monkeypatch, "snapshot", "--demo")
    assert rc == 2 and "symbolic link" in err and len(err.splitlines()) == 1

    d = tmp_path / "somebody"
    _foreign(d)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (d / MARKER).symlink_to(victim)
    before_d = _files(d)
    with pytest.raises(ForeignStateDir, match="not a regular file"):
        ensure_demo(d)
    assert _files(d) == before_d and victim.read_bytes() == b"precious\n" and _files(real) == before
