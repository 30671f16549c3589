"""Who a reboot hits (console/reboot_impact.py): `reboot-impact`, the Overview's "reboot node" advice
and the plans that take effect at the next boot name the running VMs and the GPUs they hold."""
from __future__ import annotations

import json

from nodeconsole.actions.cli import main

RUNNING = ["db-1", "legacy-app", "mig-infer-a", "net-fw", "train-a", "train-b", "vgpu-desk-1", "vgpu-desk-2",
           "web-1", "web-2"]


def test_reboot_impact_lists_the_running_vms_and_their_gpus(state, capsys):
    assert main(["reboot-impact", "--demo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["libvirt"] == "ok" and [v["vm"] for v in data["vms"]] == RUNNING
    gpus = {v["vm"]: v["gpus"] for v in data["vms"]}
    assert gpus["train-a"] == ["0000:19:00.0"] and gpus["mig-infer-a"] == ["0000:3a:00.0"] and gpus["web-1"] == []
    assert main(["reboot-impact", "--demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("a reboot stops 10 VMs:") and "train-b  running  GPU 5 0000:9b:00.0" in out


def test_reboot_advice_and_reboot_plans_name_who_a_reboot_stops(state, capsys):
    from nodeconsole.console.doctor.facts import HOST_CORES_FILE

    assert main(["demo", "inject", "xid", "0000:bb:00.0", "79", "--demo"]) == 0  # the host's own GPU
    capsys.readouterr()
    assert main(["snapshot", "--demo", "--json"]) == 0
    (problem,) = [p for p in json.loads(capsys.readouterr().out)["problems"] if p["subject"] == "0000:bb:00.0"
                  and "Xid 79" in p["message"]]
    assert problem["fix"].startswith("reboot node") and "a reboot stops 10 running VMs: db-1" in problem["fix"]
    assert "train-a (GPU 1)" in problem["fix"]
    # a doctor fix that takes effect at the next boot names them too
    (state / "root" / HOST_CORES_FILE).unlink(missing_ok=True)
    assert main(["doctor", "--fix", "host-cores", "--demo"]) == 0
    out = capsys.readouterr().out
    assert "takes effect at the next reboot: a reboot stops 10 running VMs:" in out
