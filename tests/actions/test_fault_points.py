"""Property: whatever step of whatever action fails (its apply or its verification, through the fault
switch NODECONSOLE_FAIL_STEP), the demo host ends exactly as it was before the run or exactly as
planned, and the audit record says which ("failed" / "applied"). Every action kind: passthrough,
release, pin, MIG layout, vGPU create (mdev and SR-IOV VF) and remove, and undo itself."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeconsole.actions.audit import APPLIED, FAILED
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.interrupt import FAIL_ENV
from nodeconsole.actions.mig import plan_mig
from nodeconsole.actions.passthrough import plan_passthrough, plan_release
from nodeconsole.actions.pinning import plan_pin
from nodeconsole.actions.plan import Plan
from nodeconsole.actions.progress import DONE, FAILED_RESULT
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.actions.vgpu import plan_vgpu_create, plan_vgpu_remove
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import IDLE, tree_state

MDEV_GPU, SRIOV_GPU, VM = "0000:3b:00.0", "0000:3a:00.0", "build-1"
UUID = "5b7c3a9e-0000-4000-8000-00000000c0de"


def host_state(host: ActionHost) -> dict[str, str]:
    """Every file of the demo host but the audit log; nvml.json without the simulated driver's UUID
    counter and MIG instance UUIDs (fresh for every new instance, like a real driver's)."""
    out = tree_state(host.state_dir, skip=("audit.jsonl", "nvml.json"))
    nvml = json.loads((host.state_dir / "nvml.json").read_text())
    for g in nvml.get("gpus", []):
        if isinstance(g.get("mig"), dict):
            g["mig"].pop("uuid_seq", None)
            for gi in g["mig"].get("instances") or []:
                gi.pop("uuid", None)  # a new GPU instance gets a new UUID, as on a real driver
    out["nvml.json"] = json.dumps(nvml, sort_keys=True)
    return out


def _setup_passthrough(host: ActionHost) -> None:
    assert Runner(host).run(plan_passthrough(host, host.snapshot(), IDLE)).ok


# action kind → (set-up run before the property, the plan under test)
ACTIONS: dict[str, tuple[Callable[[ActionHost], None] | None, Callable[[ActionHost], Plan]]] = {
    "passthrough": (None, lambda h: plan_passthrough(h, h.snapshot(), IDLE, vm=VM, persist=True)),
    "release": (_setup_passthrough, lambda h: plan_release(h, h.snapshot(), IDLE)),
    "pin": (None, lambda h: plan_pin(h, h.snapshot(), "train-b")),
    "mig": (None, lambda h: plan_mig(h, h.snapshot(), IDLE, "3g.40gb,2g.20gb,1g.10gb*2")),
    "vgpu-mdev": (None, lambda h: plan_vgpu_create(h, h.snapshot(), MDEV_GPU, "H100XM-10C", vm=VM, uuid=UUID)),
    "vgpu-vf": (None, lambda h: plan_vgpu_create(h, h.snapshot(), SRIOV_GPU, "NVIDIA H100XM-1-10C", vm=VM)),
    "vgpu-remove": (None, lambda h: plan_vgpu_remove(h, h.snapshot(), "0000:3a:00.5")),
    "undo": (_setup_passthrough, lambda h: plan_undo(h)),
}
_HOSTS: dict[str, tuple[ActionHost, dict, dict, int]] = {}


def _prepared(kind: str, base: Path) -> tuple[ActionHost, dict, dict, int]:
    """A demo host for `kind`, its state before and after a clean run of the plan, the plan's length."""
    if kind not in _HOSTS:
        host = ActionHost.from_seams(demo_host(base / kind))
        setup, make = ACTIONS[kind]
        if setup is not None:
            setup(host)
        before = host_state(host)
        plan = make(host)
        assert plan.ok and plan.steps, plan.refusal
        res = Runner(host).run(plan)
        assert res.status == DONE, res.message
        after = host_state(host)
        _restore(host, res.record_id)
        assert host_state(host) == before
        _HOSTS[kind] = (host, before, after, len(plan.steps))
    return _HOSTS[kind]


def _restore(host: ActionHost, rid: str) -> None:
    os.environ.pop(FAIL_ENV, None)
    res = Runner(host).run(plan_undo(host, rid))
    assert res.status == DONE, res.message


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    _HOSTS.clear()
    return tmp_path_factory.mktemp("faults")


@pytest.mark.parametrize("kind", list(ACTIONS))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(point=st.data())
def test_any_fault_point_leaves_the_host_before_or_as_planned(kind, base, point):
    host, before, after, n = _prepared(kind, base)
    index = point.draw(st.integers(min_value=1, max_value=n + 1), label="step")  # n + 1: no fault
    phase = point.draw(st.sampled_from(["apply", "verify"]), label="phase")
    how = point.draw(st.sampled_from(["index", "kind"]), label="by")
    plan = ACTIONS[kind][1](host)
    target = str(index) if how == "index" or index > n else plan.steps[index - 1].op["kind"]
    os.environ[FAIL_ENV] = f"{target}:{phase}"
    try:
        res = Runner(host).run(plan)
    finally:
        os.environ.pop(FAIL_ENV, None)
    rec = host.audit.find(res.record_id).to_json()
    now = host_state(host)
    if res.status == DONE:
        _restore(host, res.record_id)  # first, so one failed example does not spoil the next ones
    if index > n:
        assert res.status == DONE and rec["result"] == APPLIED and now == after
    else:
        assert res.status == FAILED_RESULT, res.message
        assert rec["result"] == FAILED and "injected" in rec["failed"]["error"], rec
        assert now == before, sorted(k for k in now.keys() | before.keys() if now.get(k) != before.get(k))
    assert host_state(host) == before
    assert not (host.state_dir / "nodeconsole.lock").exists()
