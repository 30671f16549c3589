"""The guest-agent seam (console/sources/guest_agent.py) against a real libvirtd: its guests have no
agent channel, so every read is refused with the reason libvirt gives, classified — never an error."""
from __future__ import annotations

import time

import pytest

from nodeconsole.console.sources.guest_agent import GuestLogUnavailable, LibvirtGuestAgent

pytestmark = pytest.mark.real_libvirtd


def test_a_running_guest_without_an_agent_channel(real_libvirtd, capfd):
    agent = LibvirtGuestAgent(real_libvirtd.uri, timeout_s=3.0)
    t0 = time.monotonic()
    with pytest.raises(GuestLogUnavailable) as e:
        agent.guest_kernel_log("rv1")  # running (the recipe's guests have no org.qemu.guest_agent.0 channel)
    assert e.value.reason == "no guest agent (none configured for the VM)"
    with pytest.raises(GuestLogUnavailable) as e:
        agent.guest_kernel_log("no-such-guest")
    assert e.value.reason == "no such VM"
    assert time.monotonic() - t0 < 3.0
    assert capfd.readouterr().err == ""
