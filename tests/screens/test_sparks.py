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
