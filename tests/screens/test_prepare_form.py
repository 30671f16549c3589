"""The VMs screen's prepare form on its own: it asks its placer for the recommendation off the UI thread
with the fields' values, again whenever one changes, shows only the newest answer, says what is wrong
with a bad field instead of asking, and Enter hands back the fields (Esc: nothing)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rich.console import Console
from textual.app import App
from textual.widgets import Checkbox, Input, Static

from nodeconsole.screens.prepare_form import PrepareChoice, PrepareModal, parse_fields, placement_text
from tests.screens.helpers import wait_until


@dataclass(frozen=True)
class Pages:
    size_kib: int
    per_node: dict
    free: dict


@dataclass(frozen=True)
class Alt:
    gpus: tuple
    worse: str


@dataclass(frozen=True)
class FakePlacement:
    """The fields of actions/placement.Placement the form reads."""
    gpus: tuple = ()
    nics: tuple = ()
    nodes: tuple = ()
    vcpus: int = 0
    cpus: tuple = ()
    emulator: tuple = ()
    memory_kib: int = 0
    hugepages: Pages = Pages(0, {}, {})
    reasons: tuple = ()
    alternatives: tuple = ()
    refusal: str = ""
    nic_notes: tuple = ()

    @property
    def ok(self) -> bool:
        return not self.refusal


@dataclass
class Placer:
    """Answers with the GPU count it was asked for in the GPUs' names; records each call and its thread."""
    calls: list = field(default_factory=list)
    threads: set = field(default_factory=set)
    hold: threading.Event | None = None  # the first call waits for it (an answer that comes late)

    def __call__(self, count: int, nic: bool, factor: float) -> FakePlacement:
        self.calls.append((count, nic, factor))
        self.threads.add(threading.get_ident())
        if self.hold is not None and len(self.calls) == 1:
            self.hold.wait(5)
        if count > 4:
            return FakePlacement(refusal=f"{count} GPUs asked for; 2 free", reasons=("GPU 1 is busy",))
        return FakePlacement(gpus=tuple(f"0000:d{i}:00.0" for i in range(count)), nics=("0000:dc:00.2",) * nic,
                             nodes=(1,), vcpus=22, cpus=tuple(range(24, 46)), emulator=(64, 65),
                             memory_kib=int(factor * count * 80 * 1048576),
                             hugepages=Pages(1048576, {1: int(factor * count * 80)}, {1: 100}))


def _text(widget: Static) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


class Host(App):
    def __init__(self, placer: Placer, state: str = "shut off") -> None:
        super().__init__()
        self.placer, self.state = placer, state
        self.answers: list = []

    def on_mount(self) -> None:
        self.push_screen(PrepareModal("train-d", self.state, self.placer), self.answers.append)


def test_fields_are_checked_and_the_text_says_what_it_found():
    assert parse_fields(" 2 ", "2.5") == (2, 2.5)
    assert "whole number" in parse_fields("two", "2") and "at most 64" in parse_fields("2", "0")
    assert "not 65" in parse_fields("65", "2") and "a number above 0" in parse_fields("1", "nan")
    p = FakePlacement(gpus=("0000:da:00.0", "0000:db:00.0"), nics=("0000:dc:00.2", "0000:dc:00.3"), nodes=(1,),
                      vcpus=4, cpus=(24, 25, 26, 27), emulator=(64,), memory_kib=320 * 1048576,
                      hugepages=Pages(1048576, {1: 320}, {1: 100}), reasons=("one PCIe switch",),
                      alternatives=(Alt(("0000:18:00.0", "0000:9a:00.0"), "across the sockets"),))
    assert "GPUs: 0000:da:00.0, 0000:db:00.0\n" in str(placement_text(p))
    text = str(placement_text(p, {"0000:da:00.0": "GPU 8", "0000:db:00.0": "GPU 9"}))
    assert "GPUs: GPU 8 (0000:da:00.0), GPU 9 (0000:db:00.0)" in text and "NIC VFs: 0000:dc:00.2, 0000:dc:00.3" in text
    assert "node 1 · 4 vCPUs on CPUs 24-27 · emulator on 64" in text
    assert "memory 320 GiB · 1 GiB hugepages: node 1 needs 320, 100 free  (the plan reserves the rest)" in text
    assert "· one PCIe switch" in text and "runner-up 0000:18:00.0, 0000:9a:00.0: across the sockets" in text
    refused = str(placement_text(FakePlacement(refusal="3 GPUs asked for; 2 free\x1b[31m")))
    assert refused.startswith("cannot place: 3 GPUs asked for; 2 free") and "\x1b" not in refused


async def test_the_form_asks_again_when_a_field_changes_and_enter_hands_back_the_fields():
    placer = Placer()
    app = Host(placer)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, PrepareModal))
        modal = app.screen
        place = modal.query_one("#prep-place", Static)
        assert await wait_until(pilot, lambda: "GPUs: 0000:d0:00.0, 0000:d1:00.0" in _text(place))
        assert placer.calls[-1] == (2, True, 2.0) and threading.get_ident() not in placer.threads
        assert "NIC VFs" in _text(place) and "memory 320 GiB" in _text(place)
        assert app.focused is modal.query_one("#prep-count", Input)

        await pilot.press("backspace", "8")  # more GPUs than are free: what stands in the way
        assert await wait_until(pilot, lambda: "cannot place: 8 GPUs asked for; 2 free" in _text(place))
        assert "GPU 1 is busy" in _text(place)
        await pilot.press("backspace", "x")  # not a number: said, the placer is not asked
        asked = len(placer.calls)
        status = modal.query_one("#prep-status", Static)
        assert await wait_until(pilot, lambda: "GPU count: a whole number" in str(status.content))
        await pilot.press("enter")  # stays open
        await pilot.pause(0.2)
        assert app.screen is modal and len(placer.calls) == asked and app.answers == []

        await pilot.press("backspace", "1", "tab", "backspace", "3")  # 1 GPU, 3× its VRAM
        assert await wait_until(pilot, lambda: placer.calls[-1] == (1, True, 3.0) and "memory 240 GiB" in _text(place))
        await pilot.press("tab", "space")  # the NIC box off
        assert await wait_until(pilot, lambda: placer.calls[-1] == (1, False, 3.0) and "NIC VFs" not in _text(place))
        assert not modal.query_one("#prep-nic", Checkbox).value and str(status.content) == ""
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: app.answers == [PrepareChoice(1, False, 3.0)])


async def test_a_late_answer_to_an_older_question_is_dropped_and_escape_answers_nothing():
    placer = Placer(hold=threading.Event())
    app = Host(placer)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, PrepareModal) and bool(placer.calls))
        modal = app.screen
        place = modal.query_one("#prep-place", Static)
        await pilot.press("backspace", "1")  # asked again while the first answer is still on its way
        assert await wait_until(pilot, lambda: "GPUs: 0000:d0:00.0\n" in _text(place))
        placer.hold.set()  # the first (2 GPUs) now answers: too late to be shown
        await pilot.pause(0.3)
        assert "0000:d1:00.0" not in _text(place) and modal.shown.gpus == ("0000:d0:00.0",)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.answers == [None])


async def test_a_vm_that_is_not_shut_off_is_told_so_up_front():
    app = Host(Placer(), "running")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, PrepareModal))
        title = _text(app.screen.query_one("#prep-title", Static))
        assert "Prepare VM train-d for training (running)" in title and "only a shut-off VM is prepared" in title
    app = Host(Placer())
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, PrepareModal))
        assert "only a shut-off" not in _text(app.screen.query_one("#prep-title", Static))
