"""Files the CLI writes where asked (capture -o, nccl topo -o): whole, with the mode asked for, never
through a symbolic link, no temporary file left behind."""
from __future__ import annotations

import os

import pytest

from nodeconsole.console.outfile import OutputError, write_output


def test_written_whole_with_its_mode_and_replacing_the_old_file(tmp_path):
    out = tmp_path / "topo.xml"
    out.write_text("old")
    write_output(out, b"new", 0o600)
    assert out.read_bytes() == b"new" and (out.stat().st_mode & 0o777) == 0o600
    assert os.listdir(tmp_path) == ["topo.xml"]


def test_a_link_or_a_folder_is_refused_and_nothing_is_written(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OutputError, match="symbolic link"):
        write_output(tmp_path / "link", b"x", 0o644)
    with pytest.raises(OutputError, match="not a regular file"):
        write_output(tmp_path, b"x", 0o644)
    with pytest.raises(OutputError, match="cannot write there"):
        write_output(tmp_path / "missing" / "f", b"x", 0o644)
    assert target.read_text() == "keep" and sorted(os.listdir(tmp_path)) == ["elsewhere", "link"]
