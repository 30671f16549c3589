"""vGPU on the demo host: the simulated kernel reacts to mdev create/remove and to VF current_vgpu_type
writes as Linux does, VM configs live in the libvirt test-driver node file.

0000:3b:00.0 runs time-sliced vGPU (mdev, 2 × H100XM-10C given to VMs); 0000:3a:00.0 runs MIG-backed
SR-IOV vGPU (VFs .4 and .5 hold vGPUs, .6 and .7 are free; one free GPU instance, the 1g.10gb)."""
from __future__ import annotations

import pytest

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import RequestError, needs_typed_confirmation
from nodeconsole.actions.progress import DONE, REFUSED
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.actions.vgpu import mig_profile_of, offers, plan_vgpu_create, plan_vgpu_remove
from nodeconsole.console.libvirt_xml import parse_domain
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import changed, tree_state

MDEV_GPU, SRIOV_GPU = "0000:3b:00.0", "0000:3a:00.0"
VM = "build-1"  # shut off, no devices
RUNNING_MDEV = "1fee3a89-1593-5e51-98fc-2a65bb89c734"  # vgpu-desk-1, running


@pytest.fixture
def demo(tmp_path) -> ActionHost:
    return ActionHost.from_seams(demo_host(tmp_path / "demo"))


def _hostdevs(host: ActionHost, vm: str):
    return parse_domain(host.domains.xml(vm)).hostdevs


def _offer(host: ActionHost, gpu: str, type_id: str):
    snap = host.snapshot()
    return next(o for o in offers(snap, snap.gpu(gpu)) if o.type_id == type_id)


def test_mig_backed_type_names_map_to_profiles():
    assert mig_profile_of("NVIDIA H100XM-3-40C") == "3g.40gb"
    assert mig_profile_of("NVIDIA H100XM-1-10C") == "1g.10gb"
    assert mig_profile_of("NVIDIA H100XM-10C") is None


def test_mdev_create_attach_remove_round_trip(demo):
    before = tree_state(demo.state_dir)
    assert _offer(demo, MDEV_GPU, "nvidia-1103").available == 6
    plan = plan_vgpu_create(demo, demo.snapshot(), MDEV_GPU, "H100XM-10C", vm=VM)
    assert plan.ok and [s.op["kind"] for s in plan.steps] == ["mdev", "vm_mdev"]
    uuid = plan.request["uuid"]
    assert Runner(demo).run(plan).status == DONE
    assert demo.root.link_name(f"sys/bus/mdev/devices/{uuid}/mdev_type") == "nvidia-1103"
    assert [h.uuid for h in _hostdevs(demo, VM) if h.type == "mdev"] == [uuid]
    snap = demo.snapshot()
    inst = next(i for i in snap.gpu(MDEV_GPU).vgpu.instances if i.uuid == uuid)
    assert inst.vm == VM and inst.type_name == "NVIDIA H100XM-10C"
    assert _offer(demo, MDEV_GPU, "nvidia-1103").available == 5
    assert plan_vgpu_create(demo, demo.snapshot(), MDEV_GPU, "nvidia-1103", vm=VM, uuid=uuid).empty

    remove = plan_vgpu_remove(demo, demo.snapshot(), uuid.upper())
    assert [s.op["kind"] for s in remove.steps] == ["vm_mdev", "mdev"]
    assert needs_typed_confirmation(remove) == uuid  # a VM's config holds it
    assert Runner(demo).run(remove).status == DONE
    assert not demo.root.exists(f"sys/bus/mdev/devices/{uuid}")
    assert not [h for h in _hostdevs(demo, VM) if h.type == "mdev"]
    assert _offer(demo, MDEV_GPU, "nvidia-1103").available == 6
    assert changed(before, tree_state(demo.state_dir)) == set()  # sysfs and the node file, byte for byte


def test_no_instance_available_is_refused_and_changes_nothing(demo):
    before = tree_state(demo.state_dir)
    plan = plan_vgpu_create(demo, demo.snapshot(), MDEV_GPU, "nvidia-1100", vm=VM)
    assert not plan.ok and "no instance available: time-sliced vGPU runs one type per GPU: " \
                            "2 × NVIDIA H100XM-10C exist" in plan.refusal
    plan = plan_vgpu_create(demo, demo.snapshot(), SRIOV_GPU, "1113")
    assert "no free 3g.40gb GPU instance (the GPU has 1; VFs holding 3g.40gb vGPUs: 0000:3a:00.4)" in plan.refusal
    assert Runner(demo).run(plan).status == REFUSED
    assert changed(before, tree_state(demo.state_dir)) == set()


def test_filling_the_gpu_then_one_more_is_refused(demo):
    made = []
    for _ in range(6):
        plan = plan_vgpu_create(demo, demo.snapshot(), MDEV_GPU, "nvidia-1103")
        assert Runner(demo).run(plan).status == DONE
        made.append(plan.request["uuid"])
    plan = plan_vgpu_create(demo, demo.snapshot(), MDEV_GPU, "nvidia-1103")
    assert not plan.ok and "no instance available" in plan.refusal
    assert len({i.uuid for i in demo.snapshot().gpu(MDEV_GPU).vgpu.instances}) == 8
    assert Runner(demo).run(plan_vgpu_remove(demo, demo.snapshot(), made[0])).status == DONE
    assert plan_vgpu_create(demo, demo.snapshot(), MDEV_GPU, "nvidia-1103").ok


def test_sriov_vf_create_attach_remove_and_undo(demo):
    plan = plan_vgpu_create(demo, demo.snapshot(), SRIOV_GPU, "NVIDIA H100XM-1-10C", vm=VM)
    assert plan.ok, plan.refusal
    assert [s.op["kind"] for s in plan.steps] == ["vf_vgpu", "vm_hostdev"]
    vf = plan.request["vf"]
    assert vf == "0000:3a:00.6" and "managed='no'" in plan.steps[1].detail
    assert Runner(demo).run(plan).status == DONE
    assert demo.root.read(f"sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1110"
    assert any(h.type == "pci" and h.address == vf and not h.managed for h in _hostdevs(demo, VM))
    # the GPU's only free 1g.10gb instance is taken now
    again = plan_vgpu_create(demo, demo.snapshot(), SRIOV_GPU, "1110")
    assert "no free 1g.10gb GPU instance" in again.refusal
    undo = plan_undo(demo)
    assert Runner(demo).run(undo).status == DONE
    assert demo.root.read(f"sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "0"
    assert not any(h.address == vf for h in _hostdevs(demo, VM))
    # a VF's vGPU held by a shut-off VM: removed from its config, then from the VF
    remove = plan_vgpu_remove(demo, demo.snapshot(), "0000:3a:00.5")
    assert [s.op["kind"] for s in remove.steps] == ["vm_hostdev", "vf_vgpu"]
    assert Runner(demo).run(remove).status == DONE
    assert demo.root.read("sys/bus/pci/devices/0000:3a:00.5/nvidia/current_vgpu_type") == "0"


def test_remove_refusals_and_bad_requests(demo):
    snap = demo.snapshot()
    plan = plan_vgpu_remove(demo, snap, RUNNING_MDEV)
    assert "VM vgpu-desk-1 is running with it" in plan.refusal
    with pytest.raises(RequestError, match="no vGPU"):
        plan_vgpu_remove(demo, snap, "00000000-0000-0000-0000-000000000000")
    with pytest.raises(RequestError, match="neither an mdev UUID nor a VF"):
        plan_vgpu_remove(demo, snap, "vm-1")
    with pytest.raises(RequestError, match="offers no vGPU type 'A100-4C'; it offers: nvidia-1100"):
        plan_vgpu_create(demo, snap, MDEV_GPU, "A100-4C")
    with pytest.raises(RequestError, match="no VM named 'nope'"):
        plan_vgpu_create(demo, snap, MDEV_GPU, "nvidia-1103", vm="nope")
    with pytest.raises(RequestError, match="not a UUID"):
        plan_vgpu_create(demo, snap, MDEV_GPU, "nvidia-1103", uuid="1234")
    plan = plan_vgpu_create(demo, snap, "0000:9a:00.0", "nvidia-1103")
    assert "no mdev types and no SR-IOV VF" in plan.refusal
