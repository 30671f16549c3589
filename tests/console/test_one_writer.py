"""One safe file writer (console/outfile.write_atomic): a link at the final path is refused, the mode is
the one asked for whatever the umask, file and directory are fsynced, a reader sees the old file or the
new one, the temporary file never outlives a failure; and no other module renames a file into place."""
from __future__ import annotations

import ast
import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from nodeconsole.console import outfile
from nodeconsole.console.outfile import RefusedPath, write_atomic

PACKAGE = Path(outfile.__file__).resolve().parents[1]


def test_a_link_at_the_final_path_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    victim.chmod(0o600)
    (tmp_path / "out").symlink_to(victim)
    with pytest.raises(RefusedPath) as e:
        write_atomic(tmp_path / "out", b"new", 0o644)
    assert e.value.errno == errno.ELOOP and e.value.filename == str(tmp_path / "out")
    assert victim.read_text() == "keep" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert (tmp_path / "out").is_symlink() and sorted(os.listdir(tmp_path)) == ["out", "victim"]


def test_a_dangling_link_is_refused_and_nothing_is_created_where_it_points(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    with pytest.raises(RefusedPath):
        write_atomic(tmp_path / "out", b"new", 0o644)
    assert not (tmp_path / "nowhere").exists() and os.listdir(tmp_path) == ["out"]


def test_a_folder_or_a_fifo_at_the_final_path_is_refused(tmp_path):
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RefusedPath) as e:
        write_atomic(tmp_path / "dir", b"x", 0o644)
    assert e.value.errno == errno.EISDIR
    with pytest.raises(RefusedPath):
        write_atomic(tmp_path / "fifo", b"x", 0o644)
    assert sorted(os.listdir(tmp_path)) == ["dir", "fifo"] and os.listdir(tmp_path / "dir") == []


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o777])
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644, 0o755])
def test_the_mode_is_the_one_asked_for_whatever_the_umask(tmp_path, umask, mode):
    old = tmp_path / "old"
    old.write_bytes(b"before")
    old.chmod(0o666 if mode != 0o666 else 0o600)
    before = os.umask(umask)
    try:
        write_atomic(tmp_path / "new", b"data", mode)
        write_atomic(old, b"after", mode)
    finally:
        os.umask(before)
    for path, data in ((tmp_path / "new", b"data"), (old, b"after")):
        assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_bytes() == data


def test_the_whole_data_is_written_through_short_writes(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(outfile.os, "write", lambda fd, b: real_write(fd, bytes(b)[:7]))
    data = bytes(range(256)) * 40
    write_atomic(tmp_path / "f", data, 0o600)
    monkeypatch.undo()
    assert (tmp_path / "f").read_bytes() == data


def _boom(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("stage", ["write", "fsync", "fchmod", "replace"])
def test_the_temporary_file_is_gone_and_the_old_file_kept_after_a_failure(tmp_path, monkeypatch, stage):
    out = tmp_path / "out"
    out.write_bytes(b"old")
    with monkeypatch.context() as m:
        m.setattr(outfile.os, stage, _boom)
        with pytest.raises(OSError) as e:
            write_atomic(out, b"new", 0o644)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out)  # named by the final path
    assert os.listdir(tmp_path) == ["out"] and out.read_bytes() == b"old"


def test_the_temporary_file_is_gone_after_an_interrupt(tmp_path, monkeypatch):
    def interrupted(*a):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(outfile.os, "fsync", interrupted)
        with pytest.raises(KeyboardInterrupt):
            write_atomic(tmp_path / "out", b"new", 0o644)
    assert os.listdir(tmp_path) == []


def test_a_folder_that_cannot_take_the_temporary_file_raises_with_the_final_path(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        write_atomic(tmp_path / "missing" / "out", b"x", 0o644)
    assert e.value.filename == str(tmp_path / "missing" / "out")


def test_the_file_and_then_its_directory_are_fsynced(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def counting(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    with monkeypatch.context() as m:
        m.setattr(outfile.os, "fsync", counting)
        write_atomic(tmp_path / "out", b"data", 0o644)
    assert synced == ["file", "dir"]


def test_the_temporary_file_has_a_private_name_beside_the_final_path(tmp_path, monkeypatch):
    seen: list[str] = []
    real_replace = os.replace

    def spying(src, dst):
        seen.append(os.fspath(src))
        real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(outfile.os, "replace", spying)
        write_atomic(tmp_path / "out", b"data", 0o644)
        write_atomic(tmp_path / "out", b"data", 0o644)
    assert len(set(seen)) == 2
    assert all(Path(s).parent == tmp_path and Path(s).name.startswith(".out.") for s in seen)


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path, monkeypatch):
    names = iter(["planted", "fresh"])
    monkeypatch.setattr(outfile.secrets, "token_hex", lambda n: next(names))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / ".out.planted.tmp").symlink_to(victim)
    write_atomic(tmp_path / "out", b"new", 0o644)
    assert victim.read_text() == "keep" and (tmp_path / "out").read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == [".out.planted.tmp", "out", "victim"]


def test_a_concurrent_reader_sees_the_old_or_the_new_file_never_a_part(tmp_path):
    out = tmp_path / "out"
    versions = [b"a" * 300_000, b"b" * 200_000 + b"end"]
    write_atomic(out, versions[0], 0o644)
    done = threading.Event()
    seen: set[bytes] = set()

    def reader():
        while not done.is_set():
            seen.add(out.read_bytes())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(200):
            write_atomic(out, versions[i % 2], 0o644)
    finally:
        done.set()
        t.join()
    assert seen <= set(versions) and seen
    assert os.listdir(tmp_path) == ["out"]


def test_the_exporter_textfile_refuses_a_link_and_leaves_its_target(state_ro, tmp_path, capsys):
    from nodeconsole.console.cli import main

    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "nodeconsole.prom").symlink_to(victim)
    assert main(["exporter", "--demo", "--textfile", str(tmp_path / "nodeconsole.prom")]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert victim.read_text() == "keep\n" and sorted(os.listdir(tmp_path)) == ["nodeconsole.prom", "victim"]


def test_the_exporter_textfile_is_world_readable_whatever_the_umask(state_ro, tmp_path):
    from nodeconsole.console.cli import main

    before = os.umask(0o077)
    try:
        assert main(["exporter", "--demo", "--textfile", str(tmp_path / "n.prom")]) == 0
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "n.prom").stat().st_mode) == 0o644


# -- no other temp-file-and-rename --------------------------------------------------------------------------

WRITER = "console/outfile.py"
# Renames that are not a file write, with the reason each stays.
NOT_A_WRITE = {
    ("console/demo/generator.py", "_swap_root"): "swaps a whole generated directory tree (root.old)",
    ("console/demo/state.py", "_recover"): "puts the demo's root.old directory back after a cut run",
    ("console/capture/scratch.py", "private_dir"): "publishes a lock file created O_EXCL in a fresh "
                                                    "0700 directory of its own",
}


def _renames(tree: ast.AST, fn: str = "<module>"):
    """(innermost function, line) of every call that renames: os.replace/os.rename and
    Path.replace/Path.rename (`x.replace(y)`: one argument, no keywords, unlike str.replace)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _renames(node, node.name)
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, on = node.func.attr, node.func.value
            os_call = isinstance(on, ast.Name) and on.id == "os" and name in ("replace", "rename", "renames")
            path_call = name in ("replace", "rename") and len(node.args) == 1 and not node.keywords
            if os_call or path_call:
                yield fn, node.lineno
        yield from _renames(node, fn)


def _imports_a_rename(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module in ("os", "shutil")
               and any(a.name in ("replace", "rename", "renames", "move") for a in n.names)
               for n in ast.walk(tree))


def test_no_module_but_the_writer_renames_a_file_into_place():
    found = set()
    for folder in ("console", "actions", "screens"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            rel = path.relative_to(PACKAGE).as_posix()
            if rel == WRITER:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            assert not _imports_a_rename(tree), f"{rel} imports a rename by name"
            found |= {(rel, fn, line) for fn, line in _renames(tree)}
    outside = sorted(f"{rel}:{line} in {fn}()" for rel, fn, line in found if (rel, fn) not in NOT_A_WRITE)
    assert outside == [], "write through console/outfile.write_atomic instead"
    assert {(rel, fn) for rel, fn, _ in found} == set(NOT_A_WRITE), "an exception that no longer applies"


def test_the_scan_finds_each_spelling_of_a_rename():
    src = ("import os\ndef f(p, q):\n    os.replace(p, q)\n    os.rename(p, q)\n    p.replace(q)\n"
           "    p.rename(q)\n    'x'.replace('a', 'b')\n    d.replace(tzinfo=None)\n    replace(s, x=1)\n")
    assert list(_renames(ast.parse(src))) == [("f", 3), ("f", 4), ("f", 5), ("f", 6)]
