"""Sparks: the same line as spark() for every history, drawn again only when the history changed."""
from __future__ import annotations

import random

from nodeconsole.screens.widgets import sparks as sparks_module
from nodeconsole.screens.widgets.sparks import Sparks
from nodeconsole.screens.widgets.text import spark


def test_same_lines_as_spark_and_drawn_only_on_change(monkeypatch):
    drawn: list[tuple] = []
    monkeypatch.setattr(sparks_module, "spark", lambda values: drawn.append(tuple(values)) or spark(values))
    rng = random.Random(5)
    memo = Sparks()
    history = {f"vm{i}": () for i in range(20)}
    changed = 0
    for _ in range(40):
        for name in rng.sample(sorted(history), 3):  # a few VMs move a poll; the rest stay as they were
            history[name] = (*history[name], rng.choice([None, rng.uniform(0, 400)]))[-30:]
            changed += 1
        for name, values in history.items():
            assert memo(name, values) == spark(values)
    assert len(drawn) <= 20 + changed  # each VM once, then once per change
    assert memo("vm0", list(history["vm0"])) == spark(history["vm0"])  # a list compares by its values too


def test_vms_gone_are_forgotten():
    memo = Sparks()
    for i in range(200):
        memo(f"old{i}", (float(i),))
    memo.keep(200)
    assert len(memo._last) == 200
    memo.keep(10)  # most of those VMs are gone
    assert memo._last == {}
    assert memo("new", (50.0,)) == spark((50.0,))


def test_the_bar_filling_now_is_redrawn_alone_and_right(monkeypatch):
    """Between two bars only the last value moves: the line is patched in its last block, and equals
    spark()'s whenever the scale is the floor's; above it (a busy multi-vCPU VM) the line is drawn anew."""
    drawn: list[tuple] = []
    monkeypatch.setattr(sparks_module, "spark", lambda values: drawn.append(tuple(values)) or spark(values))
    rng = random.Random(11)
    memo = Sparks()
    done: tuple = ()
    patched = 0
    for _bar in range(60):
        top = 180.0 if rng.random() < 0.03 else rng.choice([40.0, 90.0])  # now and then above one busy CPU
        if rng.random() < 0.1:
            done = (*done, None)[-29:]
        for _poll in range(5):
            values = (*done, rng.uniform(0, top))
            before = len(drawn)
            assert memo("vm", values) == spark(values)
            patched += len(drawn) == before
        done = (*done, values[-1])[-29:]
    assert patched > 150  # most polls only patched the last block



def test_a_busy_vm_above_the_floor_is_patched_while_its_scale_holds(monkeypatch):
    """A multi-vCPU VM at 150–400 % is drawn on the scale of its highest bar: while the bar filling now
    stays below that bar only the last block is redrawn, and the line is spark()'s at every poll; when
    it becomes the highest (the scale moves) the line is drawn anew."""
    drawn: list[tuple] = []
    monkeypatch.setattr(sparks_module, "spark", lambda values: drawn.append(tuple(values)) or spark(values))
    rng = random.Random(3)
    memo = Sparks()
    done = tuple(rng.uniform(150, 400) for _ in range(20))
    patched = redrawn = 0
    for _bar in range(40):
        for _poll in range(5):
            values = (*done, rng.uniform(100, 420))
            before = len(drawn)
            assert memo("vm", values) == spark(values)
            if len(drawn) == before:
                patched += 1
            else:
                redrawn += 1
        done = (*done, values[-1])[-29:]
    assert patched > 120 and redrawn > 5  # mostly patched; redrawn when a new bar starts or the top moves


def test_a_new_bar_shifts_the_line_when_the_scale_holds(monkeypatch):
    """Every VM's history gains a bar at once (bars start on the same polls): the line moves left by a
    block and gains the new one instead of being drawn anew, equal to spark() before and after the
    history is full; a new bar that changes the scale is drawn anew."""
    drawn: list[tuple] = []
    monkeypatch.setattr(sparks_module, "spark", lambda values: drawn.append(tuple(values)) or spark(values))
    rng = random.Random(8)
    memo = Sparks()
    for low, high in ((0, 90), (150, 400)):
        history: tuple = ()
        shifted = 0
        for bar in range(45):  # past the 30 bars the app keeps: the oldest then drops
            history = (*history, rng.uniform(low, high))[-30:]
            before = len(drawn)
            assert memo(f"vm{low}", history) == spark(history), bar
            shifted += len(drawn) == before
        assert shifted > 30 if low == 0 else shifted > 10, (low, shifted)
    top = (*history[:-1], 1000.0)[-30:]  # the new bar is the highest: a new scale
    before = len(drawn)
    assert memo("vm150", top) == spark(top) and len(drawn) == before + 1
