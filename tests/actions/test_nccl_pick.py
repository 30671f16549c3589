"""Which GPUs the NCCL check takes: by default the idle, healthy GPUs the host drives (the demo's GPU 0
runs python3/torchrun, GPU 7 runs ollama on a link at x8 of x16 with rows to remap: both skipped, with
their reasons), named ones as given with preflight warnings. And `nccl check --vm`: the check inside a
VM over ssh or the guest agent, as argv lists, refused on the demo host."""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import shlex
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.nccl.guest import (
    LINE_BUFFERED,
    AgentRun,
    agent_exec_argv,
    domifaddr_argv,
    guest_command,
    parse_domifaddr,
    plan_guest_check,
    ssh_argv,
    validate_destination,
)
from nodeconsole.actions.nccl.pick import Thresholds, auto_pick, condition, selection_findings, skip_findings
from nodeconsole.actions.nccl.snapshot_topology import local_plan, snapshot_preflight
from nodeconsole.console.collector import Collector
from nodeconsole.console.health import judge
from nodeconsole.console.model import GpuProcess, HostSnapshot, PciLink
from nodeconsole.console.seams import demo_host
from tests.actions.test_nccl_cli import synthetic_output


@pytest.fixture(scope="module")
def demo(_shared: Path) -> tuple[HostSnapshot, object]:
    seams = demo_host(_shared)
    return Collector(seams).collect(), seams


@pytest.fixture()
def clean_env(state_ro: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for k in list(os.environ):
        if k.startswith("NCCL_") or k == "NODECONSOLE_ALL_REDUCE_PERF":
            monkeypatch.delenv(k)
    return state_ro


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# -- the automatic pick ------------------------------------------------------------------------------------
def test_default_pick_skips_busy_unhealthy_and_guest_gpus_saying_why(demo) -> None:
    snap, seams = demo
    pick = auto_pick(snap)
    assert pick.automatic and pick.indices == (4, 8, 9)  # the idle SXM5 and the idle H100 PCIe pair
    why = {c.gpu.index: c for c in pick.skipped}
    assert sorted(why) == [0, 1, 2, 3, 5, 6, 7]
    # the processes and the memory they hold (the demo's: 30208 + 41984 and 12288 MiB)
    assert why[0].busy == ("2 processes (python3, torchrun) using 72192 MiB",) and not why[0].unhealthy
    assert why[7].busy == ("1 process (ollama) using 12288 MiB",)
    # GPU 7's verdict (console/health.py) is degraded: lifetime ECC, a pending remap, a narrow link
    assert snap.gpus[7].health.state == "degraded" and not why[7].unhealthy
    assert why[7].degraded == snap.gpus[7].health.reasons and "PCIe link x8 of x16" in why[7].degraded
    assert why[1].unusable == "on vfio-pci (VM train-a)" and why[5].unusable == "on vfio-pci (VM train-b)"
    assert why[2].unusable.startswith("MIG enabled") and why[3].unusable.startswith("serves vGPUs")
    assert why[6].unusable == "bound to no driver"
    # one finding per skipped GPU, about that GPU, and a warning that one GPU measures no link
    plan = local_plan(snap, None, seams.root)
    report = snapshot_preflight(snap, seams.root, {}, plan)
    skipped = [f for f in report.findings if f.code == "nccl.gpu_skipped"]
    assert sorted(f.subject for f in skipped) == sorted(snap.gpus[i].address for i in why)
    by_subject = {f.subject: f for f in skipped}
    g0, g7 = snap.gpus[0], snap.gpus[7]
    assert by_subject[g0.address].message.startswith(f"GPU 0 ({g0.address}) skipped: busy: 2 processes")
    assert "degraded: " in by_subject[g7.address].message and "PCIe link x8 of x16" in by_subject[g7.address].message
    assert "--vm train-a" in by_subject[snap.gpus[1].address].fix
    assert not [f for f in report.findings if f.code in ("nccl.gpu_busy", "nccl.gpu_unhealthy", "nccl.one_gpu")]
    # without the pair, GPU 4 is picked alone: a warning that one GPU measures no link
    alone = dataclasses.replace(snap, gpus=tuple(g for g in snap.gpus if g.index not in (8, 9)))
    pick = auto_pick(alone)
    assert pick.indices == (4,)
    report = snapshot_preflight(alone, seams.root, {}, local_plan(alone, None, seams.root))
    assert [f.code for f in report.findings if f.severity == "warning"][:1] == ["nccl.one_gpu"]


def test_busy_and_unhealthy_rules(demo) -> None:
    snap, _ = demo
    idle = snap.gpus[4]
    assert condition(idle).ok and condition(idle).state == "idle"
    cases = {
        "utilization 40 %": dataclasses.replace(idle, utilization_gpu=40),
        "memory 60 % used (48000 of 80000 MiB)": dataclasses.replace(idle, memory_used_mib=48000,
                                                                    memory_total_mib=80000),
        "1 process (Xorg) using 10 MiB": dataclasses.replace(idle, processes=(GpuProcess(1, "Xorg", 10, "graphics"),)),
        # with processes, they are the evidence (the load figures change with every reading)
        "4 processes (a, b, c, …)": dataclasses.replace(idle, utilization_gpu=90, processes=tuple(
            GpuProcess(i, n, None) for i, n in enumerate("abcd"))),
    }
    for reason, g in cases.items():
        c = condition(g)
        assert c.busy == (reason,) and c.state == "busy" and not c.ok
    assert condition(dataclasses.replace(idle, utilization_gpu=10, memory_used_mib=40000,
                                         memory_total_mib=80000)).ok  # at the thresholds: not busy
    assert condition(dataclasses.replace(idle, utilization_gpu="N/A")).ok  # unsupported is not busy
    assert condition(dataclasses.replace(idle, utilization_gpu=40), Thresholds(utilization_pct=50)).ok
    def judged(**changes):  # the GPU as the collector hands it on: with its verdict
        g = dataclasses.replace(idle, **changes)
        return dataclasses.replace(g, health=judge(g, ()))

    sick = {
        "NVML: GPU is lost": judged(nvml_error="GPU is lost"),
        "2 uncorrectable ECC errors since the driver loaded": judged(ecc_volatile_uncorrected=2),
        "row remapping failed": judged(remapped_rows_failure=1),
    }
    for reason, g in sick.items():
        c = condition(g)
        assert c.unhealthy == (reason,) and c.state == "unhealthy" and not c.busy
    # the pick reads the verdict, not the metrics: an unjudged copy is as healthy as its verdict says
    assert condition(dataclasses.replace(idle, remapped_rows_failure=1)).ok
    narrow = condition(judged(link=PciLink("16.0 GT/s PCIe", 4, "32.0 GT/s PCIe", 16)))
    assert narrow.degraded == ("PCIe link x4 of x16",) and narrow.state == "degraded" and not narrow.ok
    # a pick over a snapshot where the idle GPUs turned unhealthy: nothing left, said as such
    gone = dataclasses.replace(snap, gpus=tuple(
        dataclasses.replace(g, health=judge(dataclasses.replace(g, remapped_rows_failure=1), ()))
        if g.index in (4, 8, 9) else g for g in snap.gpus))
    pick = auto_pick(gone)
    assert pick.gpus == () and not [f for f in skip_findings(pick) if f.code == "nccl.one_gpu"]


def test_named_gpus_are_taken_as_given_with_warnings(demo) -> None:
    snap, _ = demo
    found = selection_findings([snap.gpus[0], snap.gpus[4], snap.gpus[7]])
    assert [(f.code, f.subject) for f in found] == [
        ("nccl.gpu_busy", snap.gpus[0].address), ("nccl.gpu_busy", snap.gpus[7].address),
        ("nccl.gpu_degraded", snap.gpus[7].address)]
    assert all(f.severity == "warning" for f in found)
    assert found[2].message == f"GPU 7 ({snap.gpus[7].address}) is degraded: {'; '.join(snap.gpus[7].health.reasons)}"
    # an unhealthy GPU named is refused (an error), unless --allow-unhealthy
    g4 = snap.gpus[4]
    sick = dataclasses.replace(g4, health=judge(dataclasses.replace(g4, remapped_rows_failure=1), ()))
    (f,) = selection_findings([sick])
    assert (f.code, f.severity) == ("nccl.gpu_unhealthy", "error") and "row remapping failed" in f.message
    (f,) = selection_findings([sick], allow_unhealthy=True)
    assert (f.code, f.severity) == ("nccl.gpu_unhealthy", "warning")


def test_cli_default_pick_and_named_gpus(clean_env: Path, demo, capsys) -> None:
    snap, _ = demo
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--json")
    data = json.loads(out)
    assert [g["index"] for g in data["gpus"]] == [4, 8, 9] and data["automatic"] is True
    assert {s["index"]: s["state"] for s in data["skipped"]} == {0: "busy", 1: "unusable", 2: "unusable",
                                                                 3: "unusable", 5: "unusable", 6: "unusable",
                                                                 7: "busy, degraded"}
    assert len([f for f in data["preflight"] if f["code"] == "nccl.gpu_skipped"]) == 7
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo")
    assert out.startswith(f"GPUs: 4 {snap.gpus[4].address} (NVIDIA H100 80GB HBM3, node 1), "
                          "8 0000:da:00.0 (NVIDIA H100 PCIe, node 1), 9 0000:db:00.0 ") and "(picked: idle and healthy" in out
    assert f"GPU 0 ({snap.gpus[0].address}) skipped: busy: 2 processes (python3, torchrun)" in out
    # --gpus 0,7: exactly those, and the preflight warns about both
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,7", "--json")
    data = json.loads(out)
    assert rc == 0, err
    assert [g["index"] for g in data["gpus"]] == [0, 7] and data["automatic"] is False and data["skipped"] == []
    warned = [(f["code"], f["subject"]) for f in data["preflight"] if f["severity"] == "warning"]
    assert ("nccl.gpu_busy", snap.gpus[0].address) in warned and ("nccl.gpu_busy", snap.gpus[7].address) in warned
    assert ("nccl.gpu_degraded", snap.gpus[7].address) in warned
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,7")
    assert "▲ [warning] GPU 0" in out and "is busy: 2 processes (python3, torchrun)" in out
    assert f"▲ [warning] GPU 7 ({snap.gpus[7].address}) is degraded: " in out and "PCIe link x8 of x16" in out


# -- the check inside a VM ---------------------------------------------------------------------------------
Answer = tuple[int, str, str]


class FakeRunner:
    """Answers virsh calls by the first needle found in the command line, in turn (the last answer
    repeats), and records every call."""

    def __init__(self, answers: dict[str, list[Answer]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def run(self, argv, timeout) -> Answer:
        self.calls.append(list(argv))
        text = " ".join(argv)
        for needle, queue in self.answers.items():
            if needle in text:
                return queue.pop(0) if len(queue) > 1 else queue[0]
        return 1, "", "error: unexpected call"


DOMIFADDR = """ Name       MAC address          Protocol     Address
-------------------------------------------------------------------------------
 vnet3      52:54:00:6b:3c:58    ipv6         fe80::5054:ff:fe6b:3c58/64
 vnet3      52:54:00:6b:3c:58    ipv4         192.168.122.45/24
"""


def test_ssh_argv_quotes_each_guest_word_for_the_remote_shell() -> None:
    guest = guest_command(2, "/opt/nccl-tests/all_reduce_perf", ["-b", "8", "-e", "1G", "-f", "2"])
    assert guest == ["env", "NCCL_DEBUG=INFO", "/opt/nccl-tests/all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2",
                     "-g", "2"]
    argv = ssh_argv("ubuntu@10.1.2.3", guest)
    assert argv[:7] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "--", "ubuntu@10.1.2.3"]
    # ssh joins its words with spaces for the guest's shell: that shell must get the argv back word for word
    assert shlex.split(" ".join(argv[7:])) == ["sh", "-c", LINE_BUFFERED, "nccl-check", *guest]
    with pytest.raises(ValueError):
        guest_command(1, "all_reduce_perf;reboot")
    with pytest.raises(ValueError):
        guest_command(0)
    for bad in ("-oProxyCommand=x", "a;b@host", "root@host;id", "u@$(id)", "u@", "u@-x", "@host"):
        with pytest.raises(ValueError):
            validate_destination(bad)
    assert validate_destination("admin@gpu-vm.example.com") and validate_destination("fe80::1")


def test_agent_argv_and_address_lookup() -> None:
    guest = guest_command(1)
    argv = agent_exec_argv("qemu:///system", "train-a", guest)
    assert argv[:6] == ["virsh", "-c", "qemu:///system", "qemu-agent-command", "--domain", "train-a"]
    request = json.loads(argv[6])
    assert request == {"execute": "guest-exec", "arguments": {"path": "/usr/bin/env", "arg": guest[1:],
                                                               "capture-output": True}}
    assert domifaddr_argv(None, "vm1", "agent") == ["virsh", "domifaddr", "--domain", "vm1", "--source", "agent"]
    assert parse_domifaddr(DOMIFADDR) == "192.168.122.45"
    assert parse_domifaddr(" vnet0  52:54:00:00:00:01  ipv6  fe80::1/64\n") is None


def test_plan_inside_a_running_vm_on_a_real_host(demo) -> None:
    snap, _ = demo
    runner = FakeRunner({"--source lease": [(0, DOMIFADDR, "")]})
    plan = plan_guest_check(snap, "train-a", uri="qemu:///system", runner=runner)
    assert runner.calls == [domifaddr_argv("qemu:///system", "train-a", "lease")]
    assert plan.refusal == "" and plan.ngpus == 1 and [g.index for g in plan.gpus] == [1]  # not its audio function
    assert plan.argv[6] == "192.168.122.45" and "lease" in plan.address_note
    # no lease, no agent answer: refused, with what to give
    runner = FakeRunner({"--source lease": [(0, " Name MAC address Protocol Address\n", "")],
                         "--source agent": [(1, "", "error: Guest agent is not responding")]})
    plan = plan_guest_check(snap, "train-a", uri="qemu:///system", runner=runner)
    assert "no address known for VM train-a" in plan.refusal and "--ssh USER@ADDR" in plan.refusal
    assert "Guest agent is not responding" in plan.refusal
    # a shut-off VM: refused without asking anyone
    plan = plan_guest_check(snap, "train-c", destination="root@10.0.0.9", runner=FakeRunner({}))
    assert plan.refusal.startswith("VM train-c is shut off")
    with pytest.raises(ValueError, match="did you mean train-a"):
        plan_guest_check(snap, "trian-a")
    with pytest.raises(ValueError, match="holds no GPU"):
        plan_guest_check(snap, "web-1")


def test_agent_run_collects_the_output_at_the_end(demo) -> None:
    text = synthetic_output(3.6, min_bytes=8, max_bytes=64)
    status = {"return": {"exited": True, "exitcode": 0, "out-data": base64.b64encode(text.encode()).decode()}}
    runner = FakeRunner({"guest-exec-status": [(0, '{"return": {"exited": false}}', ""),
                                               (0, json.dumps(status), "")],
                         '"guest-exec"': [(0, '{"return": {"pid": 4321}}', "")]})
    seen: list = []
    guest = guest_command(2, sweep=["-b", "8", "-e", "64", "-f", "2"])
    result = AgentRun(runner, "qemu:///system", "train-a", guest, poll=0, on_progress=seen.append).run()
    assert result.ok and result.exit_code == 0 and len(result.rows) == 4
    assert [p.done for p in seen] == [1, 2, 3, 4] and all(p.total == 4 for p in seen)
    assert json.loads(runner.calls[0][-1])["execute"] == "guest-exec"
    assert [json.loads(c[-1])["arguments"] for c in runner.calls[1:]] == [{"pid": 4321}, {"pid": 4321}]
    # a guest check that never ends: timed out, and killed in the guest
    clock = iter(range(0, 1000, 5))
    runner = FakeRunner({"guest-exec-status": [(0, '{"return": {"exited": false}}', "")],
                         '"guest-exec"': [(0, '{"return": {"pid": 77}}', "")]})
    result = AgentRun(runner, None, "train-a", guest, timeout=12, poll=0, clock=lambda: float(next(clock))).run()
    assert result.timed_out and result.exit_code is None
    kill = json.loads(runner.calls[-1][-1])
    assert kill["execute"] == "guest-exec" and kill["arguments"]["arg"] == ["kill", "-TERM", "77"]


def test_cli_vm_plans_and_the_demo_refuses_to_run(clean_env: Path, capsys) -> None:
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--vm", "train-a", "--ssh", "ubuntu@10.0.0.5",
                        "--binary", "/opt/nccl-tests/all_reduce_perf")
    assert rc == 0, err
    line = out[out.index("would run: "):].splitlines()[0][len("would run: "):]
    words = shlex.split(line)  # what this machine's shell hands to ssh
    assert words[:7] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "--", "ubuntu@10.0.0.5"]
    assert shlex.split(" ".join(words[7:]))[4:] == ["env", "NCCL_DEBUG=INFO", "/opt/nccl-tests/all_reduce_perf",
                                                    "-b", "8", "-e", "1G", "-f", "2", "-g", "1"]
    assert "cannot run from here: the demo host's VMs are simulated" in out
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--vm", "train-a", "--run", "--ssh", "ubuntu@10.0.0.5")
    assert rc == 2 and "running" not in out
    assert err.startswith("nodeconsole: error: --run: the demo host's VMs are simulated") and err.count("\n") == 1
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo", "--vm", "vgpu-desk-1", "--via", "agent", "--json")
    data = json.loads(out)
    assert rc == 0 and data["method"] == "agent" and data["argv"][data["argv"].index("--domain") + 1] == "vgpu-desk-1"
    assert json.loads(data["argv"][-1])["arguments"]["arg"][-2:] == ["-g", "1"] and data["refusal"]
    for argv, msg in ((["--vm", "trian-a"], "did you mean train-a"), (["--vm", "web-1"], "holds no GPU"),
                      (["--vm", "train-a", "--ssh", "a;b@x"], "not a user name"),
                      (["--vm", "train-a", "--via", "agent", "--ssh", "u@x"], "goes with the ssh method"),
                      (["--ssh", "u@x"], "--ssh goes with --vm"), (["--vm", "train-a", "--gpus", "1"], "exclusive")):
        rc, out, err = _cli(capsys, "nccl", "check", "--demo", *argv)
        assert rc == 2 and out == "" and msg in err and err.count("\n") == 1, (argv, err)
