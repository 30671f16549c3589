"""Recorded GPU resets (console/resets.py): only applied `gpu reset` records count, each GPU's latest;
the log is read again only when it changed; the demo's `nvidia-smi -r -i ADDR` resets the simulated GPU
as the driver does, and refuses while processes use it."""
from __future__ import annotations

import datetime as dt
import json

from nodeconsole.console.audit_log import AuditReader
from nodeconsole.console.demo.commands import DemoCommands
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.resets import ResetReader
from nodeconsole.console.root import Root


def _rec(rid: str, action: str, result: str, gpu: str, finished: str) -> dict:
    return {"id": rid, "action": action, "result": result, "request": {"gpu": gpu}, "finished": finished}


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def test_only_applied_gpu_resets_count_and_each_gpus_latest_wins(tmp_path):
    log = tmp_path / "audit.jsonl"
    t1, t2, t3 = "2026-12-02T10:00:00+00:00", "2026-12-02T11:00:00+00:00", "2026-12-02T12:00:00+00:00"
    lines = [_rec("a", "gpu reset", "applied", "0000:19:00.0", t1),
             _rec("b", "gpu reset", "applied", "0000:19:00.0", t2),
             _rec("c", "gpu reset", "failed", "0000:19:00.0", t3),
             _rec("d", "gpu drain", "applied", "0000:9a:00.0", t3),
             _rec("e", "gpu reset", "applied", "0000:9a:00.0", "not a time")]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    reader = ResetReader(AuditReader(log))
    assert reader.read() == {"0000:19:00.0": _epoch(t2)}
    with log.open("a") as f:
        f.write(json.dumps(_rec("f", "gpu reset", "applied", "0000:9a:00.0", t3)) + "\n")
    assert reader.read() == {"0000:19:00.0": _epoch(t2), "0000:9a:00.0": _epoch(t3)}
    log.unlink()  # a log that cannot be read keeps what was known
    assert reader.read() == {"0000:19:00.0": _epoch(t2), "0000:9a:00.0": _epoch(t3)}


def test_the_demos_nvidia_smi_resets_an_idle_gpu_and_refuses_a_busy_one(tmp_path):
    host = ensure_demo(tmp_path / "demo")
    cmds = DemoCommands(Root(host.root))
    state = json.loads(host.nvml_state.read_text())
    idle = next(g for g in state["gpus"] if g["address"] == "0000:9a:00.0")
    idle["ecc"]["volatile_corrected"] = 7
    host.nvml_state.write_text(json.dumps(state))
    assert cmds.which("nvidia-smi")
    rc, out = cmds.run(["nvidia-smi", "-r", "-i", "0000:9a:00.0"])
    assert rc == 0 and "successfully reset" in out
    after = next(g for g in json.loads(host.nvml_state.read_text())["gpus"] if g["address"] == "0000:9a:00.0")
    assert after["ecc"]["volatile_corrected"] == 0
    rc, out = cmds.run(["nvidia-smi", "-r", "-i", "0000:18:00.0"])
    assert rc != 0 and "in use" in out
    rc, out = cmds.run(["nvidia-smi", "-r", "-i", "0000:19:00.0"])  # on vfio-pci: the driver does not see it
    assert rc != 0 and "No devices were found" in out
    assert cmds.run(["nvidia-smi", "-q"])[0] == 2
