"""The console in a real terminal: tmux runs `nodeconsole --demo` at 80x24; keys switch through every
screen and the screen text is read back with capture-pane."""
from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.terminal import Term, need_tmux

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def term(tmp_path):
    tmux = need_tmux()
    socket = f"nc-test-{uuid.uuid4().hex[:8]}"
    t = Term(tmux, socket)
    env_cmd = (f"cd {REPO} && NODECONSOLE_STATE_DIR={tmp_path / 'demo'} TERM=xterm-256color "
               f"{sys.executable} -m nodeconsole.screens.launch --demo")
    t.run("new-session", "-d", "-x", "80", "-y", "24", env_cmd)
    yield t
    t.run("kill-server")


def test_demo_in_a_real_terminal(term):
    # 10 GPU rows at 80x24: the table scrolls, and its scrollbar leaves the owner "vfio→train…"
    text = term.wait_for("Overview", "0000:bb:00.0", "Problems", "vfio→train")
    assert "0000:18:00.0" in text and "GPUs (10) · 2 more" in text
    term.run("send-keys", "2")
    text = term.wait_for("GPU/NIC matrix")
    assert "PIX" in text and "SYS" in text
    term.run("send-keys", "3")
    text = term.wait_for("IOMMU on:", "NOT viable")
    term.run("send-keys", "4")
    text = term.wait_for("Address", "Procs", "enabled 3GI")
    term.run("send-keys", "5")
    text = term.wait_for("Pinned to", "train-b", "CROSS")
    term.run("send-keys", "?")
    term.wait_for("nodeconsole keys", "GPUs, VMs and the most")  # the help wraps its last column at 80
    term.run("send-keys", "Escape")
    # an Escape followed at once by q would read as alt+q: wait until the help is gone
    end = time.monotonic() + 10
    while "nodeconsole keys" in term.screen() and time.monotonic() < end:
        time.sleep(0.1)
    term.run("send-keys", "q")
    end = time.monotonic() + 10
    while term.alive() and time.monotonic() < end:
        time.sleep(0.1)
    assert not term.alive(), "q did not quit the console"
