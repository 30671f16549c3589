"""`nodeconsole gpu drain` / `gpu undrain` on the demo host (actions/drain.py): the drain is refused by
passthrough (also with --allow-unhealthy), MIG, vGPU, NIC pairing and the NCCL pick, naming who, when and
why; it survives `demo reboot`; undrain or undo lifts it; `log` lists both; bad reasons change nothing."""
from __future__ import annotations

import json
import os
import stat

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.drains import DRAINS_FILE

GPU = "0000:9a:00.0"  # GPU 4: the demo's idle host GPU; train-c (shut off) has it in its config
REASON = "RMA ticket 42"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _driver(state, address: str) -> str:
    link = state / "root/sys/bus/pci/devices" / address / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else ""


def _drain(capsys, gpu: str = GPU, reason: str = REASON) -> None:
    rc, out, err = _run(capsys, "gpu", "drain", gpu, "--reason", reason, "--demo", "--apply", "--yes")
    assert rc == 0, out + err


def _records(capsys) -> list[dict]:
    return [json.loads(line) for line in _run(capsys, "log", "--json", "--demo")[1].splitlines()]


def test_drain_refuses_passthrough_survives_reboot_and_undrain_lifts_it(state, capsys):
    rc, out, _ = _run(capsys, "gpu", "drain", GPU, "--reason", REASON, "--demo")
    assert rc == 0 and "Nothing was changed" in out and "does not stop or evict the VM" in out
    assert not (state / "root" / DRAINS_FILE).exists()
    _drain(capsys)
    st = os.lstat(state / "root" / DRAINS_FILE)
    assert stat.S_IMODE(st.st_mode) == 0o644 and stat.S_ISREG(st.st_mode)
    xml = (state / "libvirt.xml").read_bytes()
    for extra in ((), ("--allow-unhealthy",)):
        rc, out, _ = _run(capsys, "passthrough", GPU, "--vm", "train-c", "--demo", "--apply", "--yes", *extra)
        assert rc == 1 and "[FAILED] GPU not drained" in out and REASON in out and "drained by " in out
        assert "gpu undrain" in out and _driver(state, GPU) == "nvidia"
    assert (state / "libvirt.xml").read_bytes() == xml

    assert _run(capsys, "demo", "reboot", "--demo")[0] == 0
    snap = json.loads(_run(capsys, "snapshot", "--demo", "--json")[1])
    (g,) = [g for g in snap["gpus"] if g["address"] == GPU]
    assert g["drain"]["reason"] == REASON and g["drain"]["when"].endswith("Z") and g["drain"]["who"]
    assert all(x["drain"] is None for x in snap["gpus"] if x["address"] != GPU)

    rc, out, err = _run(capsys, "gpu", "undrain", GPU, "--demo", "--apply", "--yes")
    assert rc == 0, err
    rc, out, _ = _run(capsys, "passthrough", GPU, "--vm", "train-c", "--demo")
    assert rc == 0 and "GPU not drained" not in out and "Refused" not in out
    assert [r["action"] for r in _records(capsys)] == ["gpu drain", "gpu undrain"]
    assert all(r["result"] == "applied" for r in _records(capsys))
    rc, out, _ = _run(capsys, "log", "--demo")
    assert "gpu drain" in out and "gpu undrain" in out
    rc, out, _ = _run(capsys, "gpu", "undrain", GPU, "--demo", "--apply", "--yes")
    assert rc == 0 and "Nothing to do" in out


def test_undo_of_a_drain_lifts_it_and_keeps_other_drains(state, capsys):
    _drain(capsys, "0000:18:00.0", "first")
    _drain(capsys)
    rc, out, err = _run(capsys, "undo", "--demo", "--apply", "--yes")
    assert rc == 0, err
    entries = json.loads((state / "root" / DRAINS_FILE).read_text())["drains"]
    assert list(entries) == ["0000:18:00.0"]  # the GPU's own mark is gone, the other stays
    rc, out, _ = _run(capsys, "passthrough", GPU, "--demo")
    assert rc == 0 and "Refused" not in out
    rc, out, err = _run(capsys, "undo", "--demo", "--apply", "--yes")
    assert rc == 0, err
    assert not (state / "root" / DRAINS_FILE).exists()  # back to no file at all


@pytest.mark.parametrize("reason", ["", "   ", "line one\nline two", "bell\x07", "x" * 201, "\u202eevil"])
def test_bad_reasons_exit_2_and_change_nothing(state, capsys, reason):
    rc, out, err = _run(capsys, "gpu", "drain", GPU, "--reason", reason, "--demo", "--apply", "--yes")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "reason" in err
    assert "Traceback" not in err and "\x07" not in err and "\n" not in err.strip()
    assert not (state / "root" / DRAINS_FILE).exists() and _records(capsys) == []


def test_missing_reason_and_unknown_gpu_exit_2(state, capsys):
    rc, out, err = _run(capsys, "gpu", "drain", GPU, "--demo", "--apply", "--yes")
    assert rc == 2 and "--reason" in err and out == ""
    rc, _, err = _run(capsys, "gpu", "drain", "0000:9a:00.7", "--reason", REASON, "--demo", "--apply", "--yes")
    assert rc == 2 and "0000:9a:00.7" in err and not (state / "root" / DRAINS_FILE).exists()


def test_drain_refused_twice_and_reason_kept_as_given(state, capsys):
    reason = "ticket «42» — fan; temp 91 °C"
    _drain(capsys, reason=reason)
    entries = json.loads((state / "root" / DRAINS_FILE).read_text(encoding="utf-8"))["drains"]
    assert entries[GPU]["reason"] == reason
    rc, out, _ = _run(capsys, "gpu", "drain", GPU, "--reason", "again", "--demo", "--apply", "--yes")
    assert rc == 1 and "already drained" in out and _records(capsys)[-1]["request"]["reason"] == reason


def test_mig_vgpu_and_nic_pairing_refuse_a_drained_gpu(state, capsys):
    _drain(capsys)
    rc, out, _ = _run(capsys, "mig", GPU, "1g.10gb", "--demo", "--apply", "--yes", "--allow-unhealthy")
    assert rc == 1 and "[FAILED] GPU not drained" in out and REASON in out
    _drain(capsys, "0000:3b:00.0", "vgpu host: bad fan")
    rc, out, _ = _run(capsys, "vgpu", "create", "0000:3b:00.0", "nvidia-1103", "--demo", "--allow-unhealthy")
    assert rc == 1 and "bad fan" in out
    rc, out, _ = _run(capsys, "passthrough", GPU, "--vm", "train-c", "--with-nic", "--demo")
    assert rc == 1 and "[FAILED] GPU not drained" in out
    # train-a holds GPU 1: drained (allowed: it marks, it does not evict), then a NIC VF for train-a is refused
    rc, out, err = _run(capsys, "gpu", "drain", "0000:19:00.0", "--reason", "Xid 79", "--demo", "--apply", "--yes")
    assert rc == 0 and "VM train-a holds this GPU" in out, err
    rc, out, _ = _run(capsys, "nic", "passthrough", "0000:1a:00.4", "--vm", "train-a", "--demo")  # a free VF
    assert rc == 1 and "VM train-a holds GPU 1 (0000:19:00.0), drained by" in out and "Xid 79" in out
    # release is how a GPU is recovered: never refused for a drain
    rc, out, _ = _run(capsys, "release", "0000:19:00.0", "--demo")
    assert "GPU not drained" not in out


def test_nccl_pick_skips_a_drained_gpu_and_refuses_it_named(state, capsys):
    rc, out, _ = _run(capsys, "nccl", "check", "--demo", "--json")
    assert [g["address"] for g in json.loads(out)["gpus"]] == [GPU, "0000:da:00.0", "0000:db:00.0"]
    _drain(capsys)
    data = json.loads(_run(capsys, "nccl", "check", "--demo", "--json")[1])
    assert GPU not in [g["address"] for g in data["gpus"]]
    (skip,) = [s for s in data["skipped"] if s["address"] == GPU]
    assert skip["state"] == "drained" and REASON in skip["drained"]
    for extra in ((), ("--allow-unhealthy",)):
        rc, out, _ = _run(capsys, "nccl", "check", "--demo", "--gpus", "4,0", *extra)
        assert rc == 1 and f"✖ [error] GPU 4 ({GPU}) is drained by " in out and REASON in out


def test_the_exporter_serves_the_drain(state, tmp_path, capsys):
    from prometheus_client.parser import text_string_to_metric_families

    from nodeconsole.console.drain_metrics import LABELS
    from nodeconsole.console.exporter import GPU_LABELS

    assert LABELS == GPU_LABELS
    _drain(capsys)
    prom = tmp_path / "nodeconsole.prom"
    assert main(["exporter", "--demo", "--textfile", str(prom)]) == 0
    drained = {s.labels["address"]: s.value for f in text_string_to_metric_families(prom.read_text())
               for s in f.samples if s.name == "nodeconsole_gpu_drained"}
    assert drained[GPU] == 1 and len(drained) == 10 and sum(drained.values()) == 1


def test_a_hand_edited_reason_is_shown_with_visible_escapes(state, capsys):
    path = state / "root" / DRAINS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "drains": {GPU: {
        "reason": "\x1b]0;pwned\x07", "who": {"user": "eve\x1b[2J"}, "when": "2026-12-02T09:15:03Z"}}}))
    rc, out, err = _run(capsys, "passthrough", GPU, "--demo")
    assert rc == 1 and "\\x1b]0;pwned\\x07" in out and "eve\\x1b[2J" in out
    assert "\x1b" not in out + err and "\x07" not in out + err
    snap = json.loads(_run(capsys, "snapshot", "--demo", "--json")[1])
    assert [g["drain"]["reason"] for g in snap["gpus"] if g["drain"]] == ["\x1b]0;pwned\x07"]  # kept as stored
