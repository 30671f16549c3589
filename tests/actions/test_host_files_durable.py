"""The host's files a change writes (the boot loader's and initramfs files, modprobe.d, the drains file)
go through the one writer: fsynced with their directory, mode 0644 whatever the umask, and a link planted
at the final path between planning and applying is refused, its target untouched."""
from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from nodeconsole.actions.boot_steps import write_exact
from nodeconsole.actions.drain import write_drains
from nodeconsole.actions.host_steps import file_step
from nodeconsole.console import outfile
from nodeconsole.console.drains import DRAINS_FILE
from nodeconsole.console.root import Root

GRUB = "etc/default/grub"
MODPROBE = "etc/modprobe.d/nodeconsole-vfio.conf"
ENTRY = {"reason": "RMA ticket 42", "when": "2026-01-01T00:00:00Z", "who": {"user": "admin"}}


def _write_grub(root: Root) -> None:
    write_exact(root, GRUB, b'GRUB_CMDLINE_LINUX="intel_iommu=on"\n')


def _write_modprobe(root: Root) -> None:
    step = file_step(SimpleNamespace(root=root), {"kind": "file", "path": MODPROBE, "content": "options x\n"})
    assert step is not None
    step.apply()


def _write_drains(root: Root) -> None:
    write_drains(root, {"0000:9a:00.0": ENTRY})


WRITERS = [(GRUB, _write_grub), (MODPROBE, _write_modprobe), (DRAINS_FILE, _write_drains)]


@pytest.mark.parametrize(("rel", "write"), WRITERS)
def test_the_file_and_its_directory_are_fsynced_with_mode_0644(tmp_path, monkeypatch, rel, write):
    (tmp_path / rel).parent.mkdir(parents=True)
    synced: list[str] = []
    real_fsync = os.fsync

    def counting(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    before = os.umask(0o077)
    try:
        with monkeypatch.context() as m:
            m.setattr(outfile.os, "fsync", counting)
            write(Root(tmp_path))
    finally:
        os.umask(before)
    assert synced == ["file", "dir"]
    assert stat.S_IMODE((tmp_path / rel).stat().st_mode) == 0o644
    assert os.listdir((tmp_path / rel).parent) == [os.path.basename(rel)]


@pytest.mark.parametrize(("rel", "write"), WRITERS[:2])
def test_a_link_planted_at_the_final_path_is_refused_and_its_target_untouched(tmp_path, rel, write):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).symlink_to(victim)
    with pytest.raises(outfile.RefusedPath):
        write(Root(tmp_path))
    assert victim.read_text() == "keep\n" and (tmp_path / rel).is_symlink()
    assert os.listdir((tmp_path / rel).parent) == [os.path.basename(rel)]
