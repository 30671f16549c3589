"""The action session: typed requests planned on the demo host, bad input refused before anything is
planned, and one change applied, undone and redone through it."""
from __future__ import annotations

import pytest

from nodeconsole.actions.plan import RequestError
from nodeconsole.actions.progress import DONE, REFUSED
from nodeconsole.actions.session import (
    ActionSession,
    MigLayout,
    MigSave,
    NothingToDo,
    Passthrough,
    Pin,
    PinAll,
    Redo,
    Release,
    Undo,
    VgpuCreate,
    VgpuRemove,
)
from nodeconsole.console.seams import demo_host

IDLE = "0000:9a:00.0"  # demo: idle on nvidia, its own IOMMU group
MIG = "0000:3a:00.0"  # MIG on


@pytest.fixture(scope="module")
def session_ro(tmp_path_factory) -> ActionSession:
    """One demo session for the tests that only plan (they change nothing)."""
    return ActionSession.from_seams(demo_host(tmp_path_factory.mktemp("session-ro") / "demo"))


@pytest.mark.parametrize("request_", [Passthrough(IDLE), Release(IDLE), PinAll(), MigLayout(IDLE, "3g.40gb"),
                                      MigLayout(MIG, off=True), MigSave(), VgpuCreate(MIG, "1110")],
                         ids=lambda r: r.label)
def test_every_request_plans(session_ro, request_) -> None:
    plan = session_ro.plan(request_)
    assert plan.title and plan.action
    assert session_ro.can_apply(plan) == (plan.ok and not plan.empty)


@pytest.mark.parametrize("request_", [Passthrough("no-such-gpu"), Pin("no-such-vm"), MigLayout(IDLE, " "),
                                      MigLayout(IDLE), MigLayout(IDLE, "1g.10gb", off=True),
                                      VgpuRemove("not-a-vgpu"), Undo("no-such-id")], ids=repr)
def test_bad_input_is_a_request_error(session_ro, request_) -> None:
    with pytest.raises(RequestError):
        session_ro.plan(request_)


def test_nothing_to_undo_is_not_an_error(session_ro) -> None:
    with pytest.raises(NothingToDo, match="nothing to undo"):
        session_ro.plan(Undo())


def test_mig_state_for_an_editor(session_ro) -> None:
    st = session_ro.mig_state(MIG)
    assert st.capable and st.current == 1 and st.profiles
    with pytest.raises(RequestError):
        session_ro.mig_state("0000:19:00.0")  # on vfio-pci: NVML cannot see it


def test_apply_undo_redo(tmp_path) -> None:
    session = ActionSession.from_seams(demo_host(tmp_path / "demo"))
    plan = session.plan(Passthrough(IDLE))
    assert session.refusal(plan) == "" and session.typed_confirmation(plan) is None
    assert session.apply(plan, confirm=lambda _p: False).status == "cancelled"
    seen: list[str] = []
    done = session.apply(plan, progress=lambda e: seen.append(e.phase))
    assert done.status == DONE and "ok" in seen
    assert session.host.snapshot().gpu(IDLE).driver == "vfio-pci"
    with pytest.raises(RequestError, match="not an undo"):
        session.plan(Redo(done.record_id))
    undone = session.apply(session.plan(Undo()))
    assert undone.status == DONE and session.host.snapshot().gpu(IDLE).driver == "nvidia"
    redone = session.apply(session.plan(Redo(undone.record_id)))
    assert redone.status == DONE and session.host.snapshot().gpu(IDLE).driver == "vfio-pci"


def test_read_only_host_is_refused_in_one_place(tmp_path) -> None:
    session = ActionSession.from_seams(demo_host(tmp_path / "demo"))
    plan = session.plan(Passthrough(IDLE))
    session.host.is_root = lambda: False
    assert "needs root" in session.refusal(plan)
    assert session.apply(plan).status == REFUSED
    assert session.host.snapshot().gpu(IDLE).driver == "nvidia"
