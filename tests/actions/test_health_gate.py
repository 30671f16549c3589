"""The GPU health verdict as every action's precondition (actions/health_gate.py): after `demo inject aer
GPU fatal` passthrough, MIG and vGPU on that GPU are refused naming the AER event and change nothing;
`--allow-unhealthy` goes through and the audit record says so; the NCCL pick passes the GPU over and
`nccl check --gpus` naming it is refused."""
from __future__ import annotations

import json

from nodeconsole.actions.cli import main

GPU = "0000:9a:00.0"  # GPU 4: the demo's idle host GPU; train-c (shut off) has it in its config


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _driver(state, address: str) -> str:
    import os

    link = state / "root/sys/bus/pci/devices" / address / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else ""


def test_unhealthy_gpu_is_refused_then_allowed_and_recorded(state, capsys):
    assert _run(capsys, "demo", "inject", "aer", GPU, "fatal", "--demo")[0] == 0
    xml = (state / "libvirt.xml").read_bytes()
    rc, out, err = _run(capsys, "passthrough", GPU, "--vm", "train-c", "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] GPU healthy" in out and "uncorrectable AER error (fatal)" in out
    assert "Refused: nothing will be changed." in out
    assert _driver(state, GPU) == "nvidia" and (state / "libvirt.xml").read_bytes() == xml
    assert _run(capsys, "log", "--json", "--demo")[1].strip() == ""
    # no abbreviations: --allow is not taken for --allow-unhealthy (nor --allow-far-nic)
    rc, _, err = _run(capsys, "passthrough", GPU, "--vm", "train-c", "--demo", "--allow", "--apply", "--yes")
    assert rc == 2 and "--allow" in err and _driver(state, GPU) == "nvidia"
    rc, out, err = _run(capsys, "passthrough", GPU, "--vm", "train-c", "--demo", "--allow-unhealthy", "--apply", "--yes")
    assert rc == 0, err
    assert "unhealthy, going ahead as --allow-unhealthy asks" in out and _driver(state, GPU) == "vfio-pci"
    record = json.loads(_run(capsys, "log", "--json", "--demo")[1].splitlines()[-1])
    assert record["request"]["allow_unhealthy"] is True
    assert record["request"]["health"]["state"] == "unhealthy"
    assert "uncorrectable AER error (fatal)" in record["request"]["health"]["reasons"][0]


def test_mig_and_vgpu_on_an_unhealthy_gpu_are_refused(state, capsys):
    assert _run(capsys, "demo", "inject", "xid", GPU, "48", "--demo")[0] == 0
    rc, out, _ = _run(capsys, "mig", GPU, "1g.10gb", "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] GPU healthy" in out and "Xid 48" in out
    rc, _, err = _run(capsys, "mig", GPU, "--off", "--allow-unhealthy", "--demo")
    assert rc == 2 and "--allow-unhealthy goes with a LAYOUT" in err
    # a vGPU on the vGPU host GPU (GPU 3), after a fatal Xid on it
    assert _run(capsys, "demo", "inject", "xid", "0000:3b:00.0", "79", "--demo")[0] == 0
    rc, out, _ = _run(capsys, "vgpu", "create", "0000:3b:00.0", "nvidia-1103", "--demo", "--apply", "--yes")
    assert rc == 1 and "[FAILED] GPU healthy" in out and "Xid 79" in out
    rc, out, err = _run(capsys, "vgpu", "create", "0000:3b:00.0", "nvidia-1103", "--demo", "--allow-unhealthy")
    assert rc == 0 and "unhealthy, going ahead" in out, err
    # release is how a sick GPU is recovered: never gated
    rc, out, _ = _run(capsys, "release", GPU, "--demo")
    assert "GPU healthy" not in out


def test_nccl_passes_over_an_unhealthy_gpu_and_refuses_it_named(state, capsys):
    rc, out, _ = _run(capsys, "nccl", "check", "--demo", "--json")
    # the idle, healthy ones: this GPU and the H100 PCIe pair
    assert [g["address"] for g in json.loads(out)["gpus"]] == [GPU, "0000:da:00.0", "0000:db:00.0"]
    assert _run(capsys, "demo", "inject", "aer", GPU, "fatal", "--demo")[0] == 0
    rc, out, _ = _run(capsys, "nccl", "check", "--demo", "--json")
    data = json.loads(out)
    assert GPU not in [g["address"] for g in data["gpus"]]
    (skip,) = [s for s in data["skipped"] if s["address"] == GPU]
    assert skip["state"] == "unhealthy" and "uncorrectable AER error (fatal)" in skip["unhealthy"][0]
    rc, out, _ = _run(capsys, "nccl", "check", "--demo", "--gpus", "4,0")
    assert rc == 1 and f"✖ [error] GPU 4 ({GPU}) is unhealthy: uncorrectable AER error (fatal)" in out
    rc, out, _ = _run(capsys, "nccl", "check", "--demo", "--gpus", "4,0", "--allow-unhealthy")
    assert f"▲ [warning] GPU 4 ({GPU}) is unhealthy" in out
