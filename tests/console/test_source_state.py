"""A source's state is a small immutable type (console/source_state.py): the collector's guard gives each
source one, read through ok / pending / lost / reason; its text, and so the snapshot's JSON, is the
state as written before ("ok", "pending", "unavailable: reason")."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeconsole.console.collector import Collector
from nodeconsole.console.model import Sources, SourceState
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams


def test_the_collectors_states_are_typed_and_keep_their_text(tmp_path):
    class Boom(Collector):
        def _read_nvml(self):
            raise RuntimeError("GPU is lost")

    c = Boom(Seams(root=Root(tmp_path), libvirt_uri="test:///default"))
    c.disabled["psutil"] = "switched off"
    first = c.collect(partial=True)
    assert all(type(s) is SourceState for _, s in first.sources.items())
    assert first.sources.nvml.pending and not first.sources.nvml.lost and first.sources.nvml.reason == ""
    snap = c.collect()
    c.close()
    nvml, psutil = snap.sources.nvml, snap.sources.psutil
    assert nvml.lost and not nvml.ok and not nvml.pending and nvml.reason == "RuntimeError: GPU is lost"
    assert psutil.lost and psutil.reason == "switched off"
    assert snap.sources.sysfs.ok and snap.sources.sysfs.reason == ""
    data = json.loads(json.dumps(snap.to_dict()))
    assert data["sources"]["nvml"] == "unavailable: RuntimeError: GPU is lost"
    assert data["sources"]["psutil"] == "unavailable: switched off" and data["sources"]["sysfs"] == "ok"


def test_sources_given_text_hold_states():
    s = Sources(nvml="unavailable: no driver", libvirt="pending")
    assert type(s.nvml) is SourceState and s.nvml.reason == "no driver" and s.libvirt.pending
    assert s.items()[0] == ("sysfs", "ok") and s == Sources(nvml=SourceState.unavailable("no driver"),
                                                             libvirt=SourceState("pending"))
    with pytest.raises(AttributeError):
        s.nvml.note = "x"  # type: ignore[attr-defined]


@given(st.text())
def test_a_reason_comes_back_as_given(reason):
    state = SourceState.unavailable(reason)
    assert state.lost and state.reason == reason and state == "unavailable: " + reason
