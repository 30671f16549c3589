"""What the console does before its first frame, and only that: the first frame written already lists
the GPUs, the first poll starts after it, the stylesheet is parsed once, and the collector's modules
wait for the first poll."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pyte
import pytest
import textual.app
import textual.css.stylesheet as stylesheet_module
from rich.console import Console
from textual.css.stylesheet import Stylesheet, StylesheetParseError

from nodeconsole.screens import rendering
from nodeconsole.screens.app import NodeConsoleApp, _ThriftyStylesheet
from nodeconsole.themes import CSS_PATH, all_themes

from .conftest import FIXED_IDS
from .helpers import wait_until


def _first_look(state):
    from nodeconsole.console.first_look import FirstLook
    from nodeconsole.console.seams import demo_host

    first = FirstLook(lambda: replace(demo_host(state), pci_ids=FIXED_IDS))
    assert first.wait(30) and first.snapshot is not None and len(first.snapshot.gpus) == 10
    return first


class Terminal:
    """Stands for the terminal: what Textual's display step writes (a frame not dropped by a batch) is
    fed to a VT100 emulator."""

    def __init__(self, monkeypatch, width: int, height: int) -> None:
        self.screen = pyte.Screen(width, height)
        self.stream = pyte.Stream(self.screen)
        self.con = Console(width=width, height=height, color_system="256", force_terminal=True,
                           legacy_windows=False)
        self.frames: list[dict] = []  # per frame written: what the app had then
        terminal = self

        def display(app, screen, renderable) -> None:
            if renderable is None or app._batch_count:
                return  # Textual drops these
            gpus = app.screen.query("#gpus")
            terminal.frames.append({"gpu_rows": gpus.first().row_count if gpus else None,
                                    "polling": app.collector is not None or app.polls > 0,
                                    "kind": type(renderable).__name__})
            terminal.stream.feed(renderable.render_segments(terminal.con))

        monkeypatch.setattr(textual.app.App, "_display", display)

    def text(self) -> str:
        return "\n".join(self.screen.display)


async def test_the_first_frame_written_lists_the_gpus_and_the_first_poll_follows_it(state_ro, monkeypatch):
    """The first look's view reaches the first screen before that screen's first frame (posted from
    the app's mount, it came after it: a frame without GPUs, then one with them); the first poll starts
    once that frame is out, so it does not take turns with it on the interpreter lock. Later frames,
    written through the terminal shadow, leave the terminal as a fresh render would."""
    term = Terminal(monkeypatch, 160, 50)
    app = NodeConsoleApp(_first_look(state_ro), interval=0.2)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls >= 3:
                break
        assert app.polls >= 3
        app.paused = True  # no poll after the one under way: the terminal and a fresh render then agree
        assert await wait_until(pilot, lambda: not app.poller.busy)
        await pilot.pause()
        first = term.frames[0]
        assert first["gpu_rows"] == 10 and not first["polling"], term.frames[:3]
        if not rendering.STOCK:  # the fast mode (screens/fast/): the later frames go through the shadow
            assert first["kind"] != "_ShadowedUpdate"  # the whole screen, as Textual renders it
            assert any(f["kind"] == "_ShadowedUpdate" for f in term.frames[1:])  # then only what changed
        fresh = pyte.Screen(160, 50)
        pyte.Stream(fresh).feed(app.screen._compositor.render_full_update().render_segments(term.con))
        assert term.text() == "\n".join(fresh.display)
        assert "0000:bb:00.0" in term.text() and "mig-infer-a" in term.text()


async def test_without_a_frame_the_polls_start_all_the_same(state_ro, monkeypatch):
    import nodeconsole.screens.app as app_module

    monkeypatch.setattr(app_module, "FIRST_POLL_LATEST_S", 0.1)

    class NoFrames(NodeConsoleApp):
        def _display(self, screen, renderable) -> None:
            pass  # no frame is ever written

    app = NoFrames(_first_look(state_ro), interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.polls)
        assert app.polls == 1 and len(app.snapshot.vms) == 14


# -- the stylesheet ----------------------------------------------------------------------------------
SOURCES = {("a.tcss", ""): "Screen { background: $background; }\n#x { color: $primary; padding: 0 1; }",
           ("b.tcss", ""): ".y { color: $text-muted; height: auto; }"}


def _sheet(cls, variables) -> Stylesheet:
    sheet = cls(variables=variables)
    for read_from, css in SOURCES.items():
        sheet.add_source(css, read_from=read_from)
    return sheet


def _count_parses(monkeypatch) -> list:
    parsed = []
    real = stylesheet_module.parse

    def counting(scope, css, read_from, **kw):
        parsed.append((read_from, kw.get("tie_breaker", 0)))
        return real(scope, css, read_from, **kw)

    monkeypatch.setattr(stylesheet_module, "parse", counting)
    return parsed


def test_the_stylesheet_parses_again_only_what_new_variables_change(monkeypatch):
    dark, light, _ = all_themes()
    dark_vars = dict(dark.to_color_system().generate())
    light_vars = dict(light.to_color_system().generate())
    parsed = _count_parses(monkeypatch)
    sheet = _sheet(_ThriftyStylesheet, dark_vars)
    sheet.parse()
    assert len(parsed) == 2
    sheet.set_variables(dict(dark_vars))  # what Textual does when a screen is first shown
    sheet.reparse()
    assert len(parsed) == 2  # the same variables: nothing parsed again
    sheet.add_source("#z { height: 1; }", read_from=("c.tcss", ""))
    sheet.reparse()
    assert [p[0] for p in parsed[2:]] == [("c.tcss", "")]  # a new source: that one alone
    sheet.set_variables(light_vars)  # a theme change
    sheet.reparse()
    assert sorted(p[0] for p in parsed[3:]) == sorted([*SOURCES, ("c.tcss", "")])  # all, with the new colours
    # the rules are Textual's own for the same sources and variables
    plain = _sheet(Stylesheet, light_vars)
    plain.add_source("#z { height: 1; }", read_from=("c.tcss", ""))
    plain.parse()
    assert sheet.css == plain.css and "#z" in sheet.css


def test_a_broken_source_is_reported_on_every_reparse_and_the_rules_stay(monkeypatch):
    sheet = _sheet(_ThriftyStylesheet, {"background": "#000000", "primary": "#ff0000",
                                        "text-muted": "#777777"})
    sheet.parse()
    before = sheet.css
    sheet.add_source("#broken { colour: red; }", read_from=("bad.tcss", ""))
    for _ in range(2):  # as with Textual's reparse: the broken source is tried (and refused) each time
        with pytest.raises(StylesheetParseError):
            sheet.reparse()
        assert sheet.css == before


async def test_the_consoles_stylesheet_is_parsed_once_before_the_first_frame(state_ro, monkeypatch):
    """Textual parses the whole stylesheet again when the first screen is shown; the console's theme
    is already set by then, so nothing is parsed twice. A theme change still applies its colours."""
    parsed = _count_parses(monkeypatch)
    term = Terminal(monkeypatch, 80, 24)
    app = NodeConsoleApp(_first_look(state_ro), interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert term.frames
        ours = [p for p in parsed if p[0][0] == str(CSS_PATH)]
        # each source once (a widget class's default CSS is parsed again only when a subclass's moves it
        # to a new tie-breaker, as Textual does)
        assert len(ours) == 1 and len(parsed) == len(set(parsed)), parsed
        dark_bg = app.screen.styles.background
        app.theme = "nodeconsole-light"
        await pilot.pause()
        light = all_themes()[1]
        assert app.screen.styles.background != dark_bg
        assert app.screen.styles.background.hex.lower() == light.background.lower()
        assert len([p for p in parsed if p[0][0] == str(CSS_PATH)]) == 2  # parsed again, with its colours


def test_the_collector_waits_for_the_first_poll():
    """Importing the console's app loads neither the collector nor the seams (~10 ms before the first
    frame): the first poll imports them, on its thread."""
    code = ("import sys, nodeconsole.screens.app; "
            "print(sorted(m for m in ('nodeconsole.console.collector', 'nodeconsole.console.seams') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
