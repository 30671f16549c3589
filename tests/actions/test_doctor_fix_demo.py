"""The doctor's fixes end to end on the demo host: a bare demo (`demo reset --bare`), every failing check
that has a plannable fix fixed in one plan, one `demo reboot`, and every check passes or warns for a
reason no plan can fix (hardware); then undo puts every file the fixes edited back byte for byte."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeconsole.actions.progress import DONE
from nodeconsole.actions.session import ActionSession, DoctorFix, Undo
from nodeconsole.console.collector import Collector
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.model import DoctorReport
from nodeconsole.console.doctor.run import run_doctor
from nodeconsole.console.seams import demo_host, reboot_demo, reset_demo

HARDWARE = {"acs", "pcie-link"}  # the demo's honest hardware warnings: a switch without ACS, a x8 link


def _doctor(state: Path) -> tuple[DoctorReport, ActionSession]:
    seams = demo_host(state)
    collector = Collector(seams)
    try:
        snap = collector.collect()
    finally:
        collector.close()
    session = ActionSession.from_seams(seams)
    return run_doctor(snap, seams.root, "mixed", session.host.audit.records()), session


def _disk(root: Path) -> dict[str, object]:
    """What survives a reboot and what the fixes edit: every file and link under /etc and /boot."""
    out: dict[str, object] = {}
    for top in ("etc", "boot"):
        for d, dirs, files in os.walk(root / top):
            for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
                p = os.path.join(d, n)
                out[os.path.relpath(p, root)] = ("link", os.readlink(p)) if os.path.islink(p) else Path(p).read_bytes()
    return out


def test_bare_demo_fixed_in_one_plan_and_one_reboot_then_undone(tmp_path, monkeypatch):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    state = reset_demo(bare=True)
    root = state / "root"
    bare = _disk(root)
    report, session = _doctor(state)
    status = {c.id: c.status for c in report.checks}
    assert status["iommu"] == "fail" and status["vfio-modules"] == "fail" and status["nouveau"] == "fail"
    assert status["nvidia-driver"] == "warn"  # persistence off
    ids = tuple(c.id for c in report.checks if c.status in ("warn", "fail") and c.fix and c.fix.plannable)
    assert {"iommu", "iommu-pt", "vfio-modules", "nouveau", "nvidia-driver", "host-cores", "vhost-net"} <= set(ids)
    assert status["vhost-net"] == "warn" and not (root / facts.DEV_VHOST_NET).exists()

    plan = session.plan(DoctorFix(ids))
    kinds = [op["kind"] for op in plan.ops()]
    assert kinds.count("boot_cmdline") == 1 and kinds.count("config_file") >= 1
    persistence = [op for op in plan.ops() if op["kind"] == "nvml_persistence"]
    gpus_on_nvidia = [g.address for g in session.host.snapshot().gpus if g.nvml_index is not None]
    assert len(persistence) == 1 and persistence[0]["modes"] == dict.fromkeys(gpus_on_nvidia, 1)  # ONE step
    assert len(gpus_on_nvidia) > 2
    assert {"kind": "module", "name": "vhost_net", "device": facts.DEV_VHOST_NET} in plan.ops()
    assert plan.needs_reboot and any("reboot once" in n for n in plan.notes)
    result = session.apply(plan)
    assert result.status == DONE, result.message
    record = session.host.audit.find(result.record_id).to_json()
    assert record["needs_reboot"] is True and record["fixes"] == list(ids)
    assert record["boot_id"] == (root / facts.BOOT_ID).read_text().strip()

    pending, _ = _doctor(state)
    assert all(pending.check(i).pending.startswith("pending reboot") for i in ids)

    reboot_demo()
    after, session = _doctor(state)
    for c in after.checks:
        assert c.status in ("pass", "skip") or (c.status == "warn" and c.id in HARDWARE), (c.id, c.status, c.finding)
    assert all(after.check(i).status == "pass" and after.check(i).pending.startswith("took effect") for i in ids)
    hypervisor = {c.id: c.status for c in after.checks if c.group == "hypervisor"}
    assert hypervisor == {"libvirtd": "pass", "vhost-net": "pass", "tun": "pass", "cgroups": "pass",
                          "secure-guest": "skip"}  # the demo's CPU offers no secure guests

    undo = session.plan(Undo(result.record_id))
    assert undo.needs_reboot and session.apply(undo).status == DONE
    assert _disk(root) == bare  # every edited file, and grub.cfg and the persistenced link, as they were
    undone, _ = _doctor(state)
    assert undone.check("nvidia-driver").status == "warn"  # persistence mode off again (through NVML)


def test_persistence_mode_of_several_gpus_is_one_step_whose_inverse_is_each_ones_mode(tmp_path, monkeypatch):
    from nodeconsole.actions.plan import StepError, build_step

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    state = reset_demo(bare=True)  # persistence off on every GPU
    session = ActionSession.from_seams(demo_host(state))
    host = session.host
    gpus = [g.address for g in host.snapshot().gpus if g.nvml_index is not None][:3]
    first = build_step(host, {"kind": "nvml_persistence", "gpu": gpus[0], "mode": 1})  # the one-GPU form
    first.apply()
    assert first.verify() is None and first.inverse == {"kind": "nvml_persistence", "modes": {gpus[0]: 0}}
    step = build_step(host, {"kind": "nvml_persistence", "gpus": gpus, "mode": 1})
    assert step.op["modes"] == {gpus[1]: 1, gpus[2]: 1}  # the first is on already
    assert step.inverse == {"kind": "nvml_persistence", "modes": {gpus[1]: 0, gpus[2]: 0}}
    step.apply()
    assert step.verify() is None and build_step(host, {"kind": "nvml_persistence", "gpus": gpus, "mode": 1}) is None
    back = build_step(host, step.inverse)
    back.apply()
    assert back.verify() is None
    assert build_step(host, {"kind": "nvml_persistence", "modes": {gpus[0]: 1, gpus[1]: 0, gpus[2]: 0}}) is None
    with pytest.raises(StepError):
        build_step(host, {"kind": "nvml_persistence", "gpus": gpus, "mode": 2})
