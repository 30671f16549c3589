"""The top line: the screens' tab strip and the host's name. At 80 columns the strip compacts (the other
screens by key only) so the host's name stays on screen; wide terminals get every label."""
from __future__ import annotations

from types import SimpleNamespace

from nodeconsole.console.model import HostInfo, Sources
from nodeconsole.screens.base import host_line
from nodeconsole.screens.commands import COMMANDS


def _snap(hostname: str = "gpu-node-01"):
    return SimpleNamespace(sources=Sources(), host=HostInfo(hostname=hostname), iommu=SimpleNamespace(enabled=True))


def test_narrow_terminal_keeps_the_host_name_on_the_top_line():
    screens = [c for c in COMMANDS if c.group == "Screens"]
    for c in screens:
        line = host_line(_snap(), c.title, 80)
        assert line.cell_len <= 80, line.plain
        assert "gpu-node-01 IOMMU on" in line.plain
        assert f"{c.key} {c.title}" in line.plain  # the current screen keeps its name
        strip = line.plain.split("│")[0]
        others = [o for o in screens if o is not c]
        assert all(f" {o.key} " in strip and o.title not in strip for o in others)


def test_wide_terminal_shows_every_screen_by_name():
    line = host_line(_snap(), "Overview", 200)
    assert all(f"{c.key} {c.title}" in line.plain for c in COMMANDS if c.group == "Screens")
    assert line.plain.endswith("gpu-node-01 IOMMU on")
    assert host_line(_snap(), "Overview").plain == line.plain  # no width known: the full strip
