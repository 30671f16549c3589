"""Bad arguments are refused with one line on stderr and exit 2, changing nothing: empty MIG layouts,
non-finite intervals, non-ASCII digits, out-of-range sizes and counts, flags that would be ignored,
unbounded inputs; a corrupt demo state names its file; failed or escaping writes leave the host as it
was; VM names with XML-special characters are found."""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from tests.actions.test_passthrough import changed, tree_state

GPU = "0000:9a:00.0"


def run(capsys, *args: str) -> tuple[int, str, str]:
    old = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        rc = main(list(args))
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("args, says", [
    (("mig", GPU, "", "--apply", "--yes", "--demo"), "empty LAYOUT"),
    (("mig", GPU, "  ", "--demo"), "empty LAYOUT"),
    (("--interval", "nan", "snapshot", "--demo"), "--interval"),
    (("--interval", "inf", "snapshot", "--demo"), "--interval"),
    (("--interval", "-1", "snapshot", "--demo"), "--interval"),
    (("--interval", "0", "snapshot", "--demo"), "--interval"),
    (("passthrough", "٤", "--demo"), "'٤' is not a GPU"),
    (("mig", "٤", "7g.80gb", "--demo"), "'٤' is not a GPU"),
    (("mig", GPU, "1g.10gb@٤", "--demo"), "not a layout item"),
    (("mig", GPU, "1g.10gb*٢", "--demo"), "not a layout item"),
    (("pin", "train-a", "--cpus", "٤", "--demo"), "bad CPU list"),
    (("pin", "train-a", "--reserve", "0,٤", "--demo"), "bad CPU list"),
    (("nccl", "check", "--gpus", "٤", "--demo"), "--gpus"),
    (("nccl", "check", "-e", "99999999999999999999999G", "--demo"), "out of range"),
    (("nccl", "check", "-e", "٤G", "--demo"), "not a size"),
    (("nccl", "check", "-f", "٢", "--demo"), "ASCII digits"),
    (("nccl", "check", "--timeout", "nan", "--demo"), "--timeout"),
    (("nccl", "command", "--hosts", "a,b", "--gpus-per-host", "99999999999999999999"), "out of range"),
    (("nccl", "command", "--hosts", "a,b", "--gpus-per-host", "٤"), "ASCII digits"),
    (("nccl", "command", "--hosts", "a,b", "--gpus-per-host", "0"), "out of range"),
    (("nccl", "command", "--hosts", "a,b", "--gpus-per-host", "2", "--launcher", "torchrun", "--binary", "/x"),
     "--binary is for --launcher mpirun"),
    (("log", "-n", "-5", "--demo"), "-n"),
    (("log", "-n", "٥", "--demo"), "ASCII digits"),
    (("demo", "reset", "--libvirt", "test:///default"), "demo reset takes no --libvirt"),
    (("nccl", "parse", "/dev/zero"), "not a regular file"),
])
def test_refused_with_one_line_and_exit_2(state_ro, capsys, args, says):
    state = state_ro  # each case asserts below that it changed nothing, so one demo serves them all
    before = tree_state(state)
    rc, out, err = run(capsys, *args)
    assert rc == 2, (out, err)
    assert says in err and err.startswith("nodeconsole: error:") and err.count("\n") == 1, err
    assert "Traceback" not in out + err
    assert changed(before, tree_state(state)) == set()


def test_nccl_parse_refuses_a_fifo_and_an_oversized_file(tmp_path, capsys, monkeypatch):
    from nodeconsole.actions.cli import nccl

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: a blocking open would hang
    rc, _, err = run(capsys, "nccl", "parse", str(fifo))
    assert rc == 2 and "not a regular file" in err
    big = tmp_path / "big.txt"
    big.write_text("x" * 2048)
    monkeypatch.setattr(nccl, "MAX_OUTPUT", 1024)
    rc, _, err = run(capsys, "nccl", "parse", str(big))
    assert rc == 2 and "larger than" in err and err.count("\n") == 1


@pytest.mark.parametrize("content", ["{bad", "", "\x00\x01"])
def test_a_corrupt_demo_nvml_state_names_the_file_and_the_fix(state, capsys, content):
    (state / "nvml.json").write_text(content)
    before = tree_state(state)
    rc, out, err = run(capsys, "snapshot", "--demo")
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1
    assert str(state / "nvml.json") in err and "nodeconsole demo reset" in err
    assert changed(before, tree_state(state)) == set()


def test_a_failed_mig_save_leaves_no_empty_directories(state, capsys, monkeypatch):
    before = tree_state(state)

    def broken_symlink(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "symlink", broken_symlink)
    rc, out, err = run(capsys, "mig", "save", "--apply", "--yes", "--demo")
    assert rc != 0
    assert changed(before, tree_state(state)) == set()


def test_a_failed_layout_write_removes_the_directories_it_made(state, capsys, monkeypatch):
    from nodeconsole.console import outfile

    before = tree_state(state)

    def broken_temp_file(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outfile, "_create_temp", broken_temp_file)  # the one writer's temporary file
    rc, out, err = run(capsys, "mig", "save", "--apply", "--yes", "--demo")
    assert rc != 0
    assert changed(before, tree_state(state)) == set()


def test_mig_save_refuses_a_directory_linked_out_of_the_demo_root(state, capsys, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    etc = state / "root/etc"
    if etc.exists():
        os.rename(etc, elsewhere / "etc-was")
    etc.symlink_to(elsewhere, target_is_directory=True)  # ln -s /elsewhere $D/root/etc
    before, outside = tree_state(state), tree_state(elsewhere)
    rc, out, err = run(capsys, "mig", "save", "--apply", "--yes", "--demo")
    assert rc != 0 and "outside the root" in out + err
    assert changed(before, tree_state(state)) == set()
    assert changed(outside, tree_state(elsewhere)) == set()
    # the demo's own /etc (moved to etc-was) has units of its own; no new one was written anywhere
    assert not [p for p in Path(elsewhere).rglob("*.service") if "etc-was" not in p.relative_to(elsewhere).parts]


def test_vm_names_with_xml_special_characters_are_found(state, capsys):
    xml = state / "libvirt.xml"
    xml.write_text(xml.read_text().replace("<name>train-b</name>", "<name>t&amp;r&lt;b</name>"))
    rc, out, err = run(capsys, "pin", "t&r<b", "--demo")
    assert rc == 0, out + err
    assert "no VM named" not in out + err
    rc, out, err = run(capsys, "passthrough", "3", "--vm", "t&r<b", "--demo")
    assert "to VM t&r<b" in out and "no VM named" not in out + err
