"""MIG layouts end to end on the demo host: the planner reads NVML (the simulated library under the real
pynvml), the runner applies, every step and the whole layout are verified by re-reading NVML.

The GPU carved here is 0000:9a:00.0: idle on the nvidia driver with MIG off, the GPU an admin would
actually carve. Its first plan turns MIG mode on; the simulated H100 driver answers RESET_REQUIRED, as
Hopper does, and the step resets the GPU (the simulator's reset stands for `nvidia-smi --gpu-reset`).
0000:3a:00.0 is the demo's MIG GPU: its GI 1 carries the running VM mig-infer-a's vGPU and a VF holds a
2g.20gb vGPU, so it is where refusals are checked."""
from __future__ import annotations

import json

import pynvml
import pytest

from nodeconsole.actions import mig_steps
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig import plan_mig
from nodeconsole.actions.mig_planner import Profile, format_layout, maximal_layouts
from nodeconsole.actions.plan import RequestError
from nodeconsole.actions.progress import DONE, FAILED_RESULT, REFUSED
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console import mig_profiles
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import changed, tree_state

GPU = "0000:9a:00.0"
MIG_GPU = "0000:3a:00.0"
TABLE = mig_profiles.table_for_model("H100-80GB-HBM3")
BASE = [Profile(p.name, p.profile_id, p.slice_count, p.max_instances, p.placements)
        for p in TABLE.profiles if p.profile_id in (19, 14, 9, 5, 0)]


@pytest.fixture
def demo(tmp_path) -> ActionHost:
    return ActionHost.from_seams(demo_host(tmp_path / "demo"))


def _layout(host: ActionHost, address: str = GPU) -> list[tuple[str, int, int, tuple[str, ...]]]:
    g = host.snapshot().gpu(address)
    return [(i.profile, i.start, i.size, i.compute_instances) for i in g.mig.instances]


def _mig_entry(host: ActionHost, address: str = GPU) -> dict:
    """The GPU's MIG state in nvml.json, without the simulated driver's UUID counter."""
    state = json.loads((host.state_dir / "nvml.json").read_text())
    mig = dict(next(g for g in state["gpus"] if g["address"] == address)["mig"])
    mig.pop("uuid_seq", None)
    return mig


def _apply(host: ActionHost, address: str, layout: str | None, off: bool = False):
    plan = plan_mig(host, host.snapshot(), address, layout, off=off)
    assert plan.ok, plan.refusal
    return plan, Runner(host).run(plan)


def test_every_maximal_layout_plans_applies_and_verifies(demo):
    layouts = maximal_layouts(BASE)
    assert len(layouts) == 19
    for i, lay in enumerate(layouts):
        text = format_layout(lay, BASE)
        plan, result = _apply(demo, GPU, text)
        assert result.status == DONE, f"{text}: {result.message}"
        kinds = [s.op["kind"] for s in plan.steps]
        assert kinds[-1] == "mig_verify" and (kinds[0] == "mig_mode") == (i == 0)
        got = _layout(demo)
        assert sorted((p, s) for p, s, _, _ in got) == sorted((w.profile, w.start) for w in lay), text
        assert all(cis == (p,) for p, _, _, cis in got)  # each GI has its full compute instance
        again = plan_mig(demo, demo.snapshot(), GPU, text)
        assert again.ok and again.empty, text
    assert demo.snapshot().gpu(GPU).mig.mode == "enabled"


def test_same_unpinned_layout_twice_gives_an_empty_plan(demo):
    _, result = _apply(demo, GPU, "1g.10gb,1g.10gb,2g.20gb,3g.40gb")  # the order the driver trips on
    assert result.status == DONE, result.message
    plan = plan_mig(demo, demo.snapshot(), "4", "3g.40gb,2g.20gb,1g.10gb*2")
    assert plan.empty and "Nothing to do" in "\n".join(plan.lines())


@pytest.mark.parametrize("layout, reason", [
    ("1g.10gb*8", "at most 7"),
    ("4g.40gb,3g.40gb,1g.10gb", "needs 8 compute slices"),
    ("3g.40gb*2,1g.10gb", "needs 9 memory slices"),
    ("3g.40gb@2", "placements start at 0 or 4"),
    ("1g.20gb@2,1g.20gb@6,3g.40gb", "3g.40gb needs 4 free memory slices starting at 0 or 4; slices 2-3"),
])
def test_layouts_that_do_not_fit_are_refused_and_change_nothing(demo, layout, reason):
    before = tree_state(demo.state_dir)
    plan = plan_mig(demo, demo.snapshot(), GPU, layout)
    assert not plan.ok and reason in plan.refusal and not plan.steps
    assert Runner(demo).run(plan).status == REFUSED
    assert changed(before, tree_state(demo.state_dir)) == set()


def test_instances_in_use_and_busy_gpus_are_refused_with_the_holders(demo):
    before = tree_state(demo.state_dir)
    snap = demo.snapshot()
    plan = plan_mig(demo, snap, MIG_GPU, "4g.40gb,3g.40gb")
    assert "slices 0-3 are taken by 3g.40gb (GI 1, in use by VM mig-infer-a (vGPU))" in plan.refusal
    plan = plan_mig(demo, snap, MIG_GPU, "3g.40gb*2")  # would destroy the 2g.20gb a VF's vGPU lives in
    assert "0000:3a:00.5 holds 2g.20gb vGPUs (1), the layout leaves 0" in plan.refusal
    plan = plan_mig(demo, snap, MIG_GPU, None, off=True)
    assert "in use by VM mig-infer-a" in plan.refusal
    assert plan_mig(demo, snap, MIG_GPU, "3g.40gb,2g.20gb,1g.10gb").empty  # what it has
    plan = plan_mig(demo, snap, "0000:18:00.0", "7g.80gb")
    assert "process pid 4242 python3; process pid 4310 torchrun" in plan.refusal
    plan = plan_mig(demo, snap, "0000:3b:00.0", "7g.80gb")  # MIG off, time-sliced vGPUs running
    assert "vGPU 1fee3a89" in plan.refusal and "VM vgpu-desk-1" in plan.refusal
    plan = plan_mig(demo, snap, "0000:19:00.0", "7g.80gb")
    assert "on vfio-pci; NVML cannot see it" in plan.refusal and "nodeconsole release" in plan.checks[0].fix
    assert changed(before, tree_state(demo.state_dir)) == set()


def test_bad_requests_are_errors(demo):
    snap = demo.snapshot()
    with pytest.raises(RequestError, match="no MIG profile '3g.20gb'; it offers: 1g.10gb"):
        plan_mig(demo, snap, GPU, "3g.20gb")
    with pytest.raises(RequestError, match="no GPU with index 42"):
        plan_mig(demo, snap, "42", "7g.80gb")
    with pytest.raises(RequestError, match="either a layout"):
        plan_mig(demo, snap, GPU, "7g.80gb", off=True)


@pytest.mark.parametrize("symbol", ["nvmlDeviceCreateGpuInstanceWithPlacement",
                                    "nvmlGpuInstanceCreateComputeInstanceWithPlacement"])
def test_a_failed_create_leaves_the_gpu_exactly_as_it_was(demo, symbol):
    lib = demo.seams.nvml_lib
    before, mig_before = tree_state(demo.state_dir, skip=("audit.jsonl", "nvml.json")), _mig_entry(demo)
    for k in range(4):  # the layout creates four instances: fail the k-th
        lib.fail_on(symbol, pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, after=k, times=1)
        plan, result = _apply(demo, GPU, "3g.40gb,2g.20gb,1g.10gb*2")
        lib.clear_faults()
        assert result.status == FAILED_RESULT and not result.undo_failed, result.message
        assert "Insufficient resources" in result.error and "the host is as it was" in result.message
        # MIG mode back off, no instance: only the simulated driver's UUID counter moved
        assert _mig_entry(demo) == mig_before, k
        assert changed(before, tree_state(demo.state_dir, skip=("audit.jsonl", "nvml.json"))) == set()


def test_a_failure_after_destroying_puts_the_old_layout_back(demo):
    _, result = _apply(demo, GPU, "3g.40gb@0,2g.20gb@4,1g.10gb@6")
    assert result.status == DONE
    start = _layout(demo)
    for k in range(2):  # 3g.40gb@0 is destroyed, two 2g.20gb are created: fail each
        demo.seams.nvml_lib.fail_on("nvmlDeviceCreateGpuInstanceWithPlacement",
                                    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, after=k, times=1)
        plan, result = _apply(demo, GPU, "2g.20gb*3,1g.10gb")
        demo.seams.nvml_lib.clear_faults()
        assert [s.op["present"] for s in plan.steps if s.op["kind"] == "mig_gi"] == [False, True, True]
        assert result.status == FAILED_RESULT and not result.undo_failed, result.message
        # same instances at the same placements with the same compute instances (NVML gives a re-created
        # instance a new UUID, as the real driver does)
        assert _layout(demo) == start, k


def test_a_create_that_reports_success_for_nothing_is_caught(demo, monkeypatch):
    """What fooled mig-parted: create calls that succeed and leave nothing. Verification re-reads NVML,
    fails the step and the runner removes what the plan did create."""
    real_gi, real_ci = mig_steps.nvml_mig.create_gpu_instance, mig_steps.nvml_mig.create_compute_instance
    nothing = object()

    def gi(handle, profile_id, placement=None):
        return nothing if placement == (4, 4) else real_gi(handle, profile_id, placement)

    def ci(gi_handle, profile_id, placement=None):
        return None if gi_handle is nothing else real_ci(gi_handle, profile_id, placement)

    monkeypatch.setattr(mig_steps.nvml_mig, "create_gpu_instance", gi)
    monkeypatch.setattr(mig_steps.nvml_mig, "create_compute_instance", ci)
    mig_before = _mig_entry(demo)
    plan, result = _apply(demo, GPU, "3g.40gb@4,1g.10gb*4")
    assert [s.title for s in plan.steps][-2].startswith("Create 3g.40gb at slices 4-7")
    assert result.status == FAILED_RESULT and not result.undo_failed, result.message
    assert result.error == "NVML lists no 3g.40gb at slices 4-7"
    assert _mig_entry(demo) == mig_before  # the four 1g.10gb and MIG mode were rolled back


def test_mig_off_and_undo(demo):
    _, result = _apply(demo, GPU, "7g.80gb")
    assert result.status == DONE
    undo = plan_undo(demo)
    assert [s.op["kind"] for s in undo.steps] == ["mig_gi", "mig_mode"]
    assert Runner(demo).run(undo).status == DONE
    g = demo.snapshot().gpu(GPU)
    assert g.mig.mode == "disabled" and not g.mig.instances
    _apply(demo, GPU, "4g.40gb,3g.40gb")
    plan, result = _apply(demo, GPU, None, off=True)
    assert [s.op["kind"] for s in plan.steps] == ["mig_gi", "mig_gi", "mig_mode"] and result.status == DONE
    assert demo.snapshot().gpu(GPU).mig.mode == "disabled"


def test_a_plan_made_before_someone_else_changed_the_gpu_is_refused(demo):
    stale = plan_mig(demo, demo.snapshot(), GPU, "7g.80gb")
    _, result = _apply(demo, GPU, "3g.40gb*2")
    assert result.status == DONE
    again = Runner(demo).run(stale)
    assert again.status == REFUSED and "the host changed" in again.message
    assert [p for p, *_ in _layout(demo)] == ["3g.40gb", "3g.40gb"]
