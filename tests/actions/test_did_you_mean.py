"""Mistyped VM and GPU names get the closest known names ("unknown VM trian-a (did you mean train-a?)"),
from every request the session resolves, with the exit status unchanged: 2 for a bad request, 1 for a
refusal. Also the MIG off wording. In-process CLI on one demo shared by the module (nothing changes)."""
from __future__ import annotations

import io
import sys

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.session import ActionSession, Passthrough, Pin, RequestError, VgpuCreate
from nodeconsole.console.argtypes import close_names, did_you_mean
from nodeconsole.console.seams import demo_host
from tests.actions.test_passthrough import changed, tree_state


def _run(monkeypatch, capsys, argv: list[str]) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    rc = main(argv + ["--demo"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_close_names():
    vms = ["build-1", "train-a", "train-b", "train-c", "web-1", "web-2"]
    assert close_names("trian-a", vms) == ["train-a"]
    assert close_names("web1", vms) == ["web-1"]
    assert close_names("0000:9c:00.0", ["0000:18:00.0", "0000:9a:00.0", "0000:9b:00.0"]) == \
        ["0000:9a:00.0", "0000:9b:00.0"]  # equally close: both
    assert close_names("nothing-alike", vms) == []
    assert close_names("9", [str(i) for i in range(8)]) == []
    # more equally close names than the limit: none stands out
    assert close_names("0000:zz:00.0", [f"0000:{b:02x}:00.0" for b in range(0x18, 0x20)]) == []
    assert did_you_mean("trian-a", vms) == " (did you mean train-a?)"
    assert did_you_mean("x", vms) == ""
    # a known name with control characters is shown escaped, never as control
    assert did_you_mean("evil", ["evi\x1b]0;l\x07"]) == " (did you mean evi\\x1b]0;l\\x07?)"


@pytest.mark.parametrize("argv,fragment", [
    (["pin", "trian-a"], "unknown VM trian-a (did you mean train-a?); known VMs: build-1, "),
    (["passthrough", "4", "--vm", "web1"], "unknown VM web1 (did you mean web-1?)"),
    (["vgpu", "create", "3", "nvidia-1103", "--vm", "trian-c"], "unknown VM trian-c (did you mean train-c?)"),
    (["release", "9a:00.1"], "0000:9a:00.1 is not an NVIDIA GPU (Audio device "),
    (["release", "9a:00.1"], "(did you mean 0000:9a:00.0?)"),
    (["mig", "GPU-0000", "--off"], "is not a GPU"),
])
def test_typos_get_the_closest_names_and_exit_2(state_ro, monkeypatch, capsys, argv, fragment):
    before = tree_state(state_ro, skip=())
    rc, out, err = _run(monkeypatch, capsys, argv)
    assert rc == 2 and out == "" and err.startswith("nodeconsole: error: ") and err.count("\n") == 1
    assert fragment in err, err
    assert changed(before, tree_state(state_ro, skip=())) == set()


def test_nothing_close_no_suggestion(state_ro, monkeypatch, capsys):
    rc, _out, err = _run(monkeypatch, capsys, ["mig", "100", "--off"])  # far from every index 0-9
    assert rc == 2 and "no GPU with index 100; this host's GPUs: 0 (0000:18:00.0)" in err
    assert "did you mean" not in err
    rc, _out, err = _run(monkeypatch, capsys, ["pin", "zzzzzz"])
    assert rc == 2 and "unknown VM zzzzzz; known VMs:" in err


def test_session_requests_say_it_without_control_characters(state_ro):
    session = ActionSession.from_seams(demo_host(state_ro))
    for request in (Pin(vm="trian-a\x1b[2J"), Passthrough(gpu="4", vm="trian-a\x1b[2J"),
                    VgpuCreate(gpu="3", type="nvidia-1103", vm="trian-a\x1b[2J")):
        with pytest.raises(RequestError) as e:
            session.plan(request)
        assert str(e.value).startswith("unknown VM trian-a\\x1b[2J (did you mean train-a?)"), str(e.value)
        assert "\x1b" not in str(e.value)


def test_refusals_still_exit_1(state_ro, monkeypatch, capsys):
    rc, out, _err = _run(monkeypatch, capsys, ["release", "5"])
    assert rc == 1 and "no running VM uses the GPU: VM train-b is running with it" in out


def test_mig_off_precondition_says_what_it_checks(state_ro, monkeypatch, capsys):
    rc, out, _err = _run(monkeypatch, capsys, ["mig", "2", "--off"])  # mig-infer-a's vGPU lives on GI 1
    assert rc == 1
    assert ("[FAILED] MIG can be turned off: GI 1 (3g.40gb, slices 0-3) is in use by VM mig-infer-a (vGPU): "
            "removing every instance would destroy it") in out
    assert "fix: free the instances in the way" in out and "the layout fits" not in out
    rc, out, _err = _run(monkeypatch, capsys, ["mig", "0", "--off"])
    assert rc == 0 and "[ok] MIG can be turned off: no GPU instances" in out
    rc, out, _err = _run(monkeypatch, capsys, ["mig", "2", "none"])  # a layout request keeps its wording
    assert rc == 1 and "[FAILED] the layout fits: " in out and "removing every instance would destroy it" in out
