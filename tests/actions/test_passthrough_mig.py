"""A GPU in MIG mode handed to a VM: the passthrough turns MIG off first (the MIG action's own steps:
each GPU instance with its compute instances destroyed, then MIG mode off), so the guest gets the whole
GPU; undoing it gives the GPU back to nvidia, turns MIG mode on and re-creates the layout at the same
placements. An instance in use (a process in it, a VM's MIG-backed vGPU) is a refusal that names the
instance and who holds it. Demo: GPU 4 (0000:9a:00.0) is idle with MIG off; train-c (shut off) names it
in its config; 0000:3a:00.0's GI 1 carries mig-infer-a's vGPU."""
from __future__ import annotations

import json

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig import plan_mig
from nodeconsole.actions.passthrough import plan_passthrough
from nodeconsole.actions.passthrough_mig import TITLE
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import changed, tree_state

GPU = "0000:9a:00.0"
LAYOUT = "3g.40gb,2g.20gb,1g.10gb*2"


@pytest.fixture
def host(tmp_path) -> ActionHost:
    h = ActionHost.from_seams(demo_host(tmp_path / "demo"))
    plan = plan_mig(h, h.snapshot(), GPU, LAYOUT)
    assert Runner(h).run(plan).status == DONE
    return h


def _layout(host: ActionHost) -> list[tuple[str, int, int, tuple[str, ...]]]:
    g = host.snapshot().gpu(GPU)
    return sorted((i.profile, i.start, i.size, i.compute_instances) for i in g.mig.instances)


def _nvml_mig(host: ActionHost) -> dict:
    state = json.loads((host.state_dir / "nvml.json").read_text())
    return next(g for g in state["gpus"] if g["address"] == GPU)["mig"]


def test_passthrough_turns_mig_off_first_and_undo_puts_the_layout_back(host):
    before = _layout(host)
    assert len(before) == 4 and host.snapshot().gpu(GPU).mig.mode == "enabled"
    plan = plan_passthrough(host, host.snapshot(), GPU, vm="train-c")
    assert plan.ok, plan.refusal
    assert any(c.title == TITLE and c.ok for c in plan.checks)
    kinds = [s.op["kind"] for s in plan.steps]
    assert kinds == ["mig_gi"] * 4 + ["mig_mode", "pci_driver", "pci_driver"]
    assert any(n.startswith(f"{GPU} is in MIG mode (") and "turns MIG mode off" in n for n in plan.notes)
    assert Runner(host).run(plan).status == DONE
    mig = _nvml_mig(host)
    assert (mig["current"], mig["pending"], mig["instances"]) == (0, 0, [])  # the guest gets a whole GPU
    assert host.snapshot().gpu(GPU).driver == "vfio-pci"

    undo = plan_undo(host)
    assert undo.ok, undo.refusal  # MIG steps planned although NVML cannot see the GPU on vfio-pci yet
    assert [s.op["kind"] for s in undo.steps] == ["pci_driver", "pci_driver", "mig_mode"] + ["mig_gi"] * 4
    assert Runner(host).run(undo).status == DONE
    g = host.snapshot().gpu(GPU)
    assert g.driver == "nvidia" and g.mig.mode == "enabled"
    assert _layout(host) == before


def test_an_instance_in_use_is_a_refusal_naming_it_and_who_holds_it(host):
    path = host.state_dir / "nvml.json"
    state = json.loads(path.read_text())
    gpu = next(g for g in state["gpus"] if g["address"] == GPU)
    gi = next(i for i in gpu["mig"]["instances"] if i["start"] == 4)  # the 3g.40gb
    gpu["processes"] = [{"pid": 7777, "name": "trainer", "used_mib": 1024, "gi_id": gi["gi_id"], "ci_id": 0}]
    path.write_text(json.dumps(state))
    before = tree_state(host.state_dir)
    plan = plan_passthrough(host, host.snapshot(), GPU, vm="train-c")
    assert not plan.ok
    mine = [c for c in plan.checks if c.title == TITLE]
    assert mine and not mine[0].ok
    assert f"GI {gi['gi_id']} (3g.40gb, slices 4-7)" in mine[0].reason and "7777" in mine[0].reason
    assert Runner(host).run(plan).status != DONE
    assert changed(before, tree_state(host.state_dir)) == set()


def test_a_mig_backed_vgpu_of_a_vm_is_named(host):
    plan = plan_passthrough(host, host.snapshot(), "0000:3a:00.0")
    (mine,) = [c for c in plan.checks if c.title == TITLE and not c.ok][:1]
    assert "in use by VM mig-infer-a (vGPU)" in mine.reason


def test_a_gpu_without_mig_gets_no_mig_steps(tmp_path):
    h = ActionHost.from_seams(demo_host(tmp_path / "demo"))
    plan = plan_passthrough(h, h.snapshot(), GPU, vm="train-c")
    assert plan.ok and not any(c.title == TITLE for c in plan.checks)
    assert not any(s.op["kind"].startswith("mig_") for s in plan.steps)
