"""Undo plans from the recorded *before* state and reaches it from wherever the host is now — e.g. a GPU
on nvidia with a stale driver_override=vfio-pci (what an interrupted run used to leave) — or refuses,
saying what blocks it and which older change could be undone instead."""
from __future__ import annotations

import json

from nodeconsole.actions.passthrough import plan_passthrough
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from tests.actions.test_passthrough import IDLE, IDLE_AUDIO, _driver, changed, demo, tree_state  # noqa: F401

OVERRIDE = f"sys/bus/pci/devices/{IDLE}/driver_override"


def test_undo_restores_a_stale_driver_override(demo):  # noqa: F811
    demo.kernel.write(OVERRIDE, "vfio-pci")  # stale: the GPU stays on nvidia until its next probe
    assert _driver(demo, IDLE) == "nvidia"
    before = tree_state(demo.state_dir)
    res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE))
    assert res.ok, res.message
    assert _driver(demo, IDLE) == "vfio-pci"
    undo = plan_undo(demo)
    assert undo.ok and undo.undoes == res.record_id
    done = Runner(demo).run(undo)
    assert done.ok, done.message
    assert _driver(demo, IDLE) == "nvidia" and demo.root.read(OVERRIDE) == "vfio-pci"
    assert changed(before, tree_state(demo.state_dir)) == set()
    assert demo.audit.latest_undoable() is None  # plain `undo` does not keep choosing it


def test_undo_reaches_the_before_state_from_a_host_changed_since(demo):  # noqa: F811
    before = tree_state(demo.state_dir)
    assert Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE)).ok
    # someone unbinds the audio function and leaves an override behind by hand
    demo.kernel.write(f"sys/bus/pci/devices/{IDLE_AUDIO}/driver/unbind", IDLE_AUDIO)
    demo.kernel.write(f"sys/bus/pci/devices/{IDLE_AUDIO}/driver_override", "pci-stub")
    res = Runner(demo).run(plan_undo(demo))
    assert res.ok, res.message
    assert changed(before, tree_state(demo.state_dir)) == set()


def test_a_blocked_undo_says_why_and_offers_the_next_older_change(demo):  # noqa: F811
    first = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE))
    assert first.ok
    log = demo.audit.path
    bad = {"id": "20990101-000000-dead", "action": "pin", "title": "damaged", "result": "applied",
           "undo": [{"kind": "vm_pins", "vm": "build-1", "scope": "config"}]}  # no vcpus: not "unpin all"
    with open(log, "a") as f:
        f.write(json.dumps(bad) + "\n")
    before = tree_state(demo.state_dir)
    plan = plan_undo(demo)
    assert not plan.ok and plan.undoes == bad["id"]
    assert "malformed vm_pins operation" in plan.refusal
    text = "\n".join(plan.lines())
    assert f"nodeconsole undo {first.record_id} --apply" in text
    assert changed(before, tree_state(demo.state_dir)) == set()
    assert Runner(demo).run(plan_undo(demo, first.record_id)).ok


def test_an_undo_with_nothing_left_is_recorded_and_plain_undo_moves_on(demo):  # noqa: F811
    first = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE))
    assert first.ok
    audio = f"sys/bus/pci/devices/{IDLE_AUDIO}"
    # a run killed before its first write: an in-progress record whose undo is already the host's state
    dead = {"id": "20990101-000000-beef", "action": "release", "title": "killed", "result": "in-progress",
            "undo": [{"kind": "pci_driver", "device": IDLE_AUDIO, "override": demo.root.read(f"{audio}/driver_override")
                      or None, "driver": "vfio-pci", "group": None}]}
    with open(demo.audit.path, "a") as f:
        f.write(json.dumps(dead) + "\n")
    before = tree_state(demo.state_dir)
    plan = plan_undo(demo)
    assert plan.undoes == dead["id"] and plan.empty
    res = Runner(demo).run(plan)
    assert res.status == "nothing to do" and "marked as undone" in res.message
    assert changed(before, tree_state(demo.state_dir)) == set()
    assert demo.audit.latest_undoable().id == first.record_id
