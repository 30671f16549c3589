"""The doctor's libvirtd check against a real libvirtd: the connection says what it is (libvirt's version,
the QEMU driver and its version, the domain types its capabilities offer) and the check names it; the
same daemon gone, the check fails with the command that starts it."""
from __future__ import annotations

import pytest

from nodeconsole.console.doctor.run import run_doctor
from nodeconsole.console.model import Sources
from nodeconsole.console.root import Root
from nodeconsole.console.sources.libvirt_src import LibvirtSource
from nodeconsole.console.sources.types import SourceError
from tests.console.test_doctor import ready_snap

libvirt = pytest.importorskip("libvirt")

pytestmark = pytest.mark.real_libvirtd


def test_libvirtd_check_names_the_real_daemon(real_libvirtd, tmp_path):
    source = LibvirtSource(real_libvirtd.uri)
    try:
        source.poll()
        hv = source.hypervisor
    finally:
        source.close()
    assert hv is not None and hv.driver == "QEMU" and hv.version and hv.driver_version
    assert "qemu" in hv.domain_types and hv.arch  # TCG at least; kvm too where /dev/kvm works
    c = run_doctor(ready_snap(), Root(tmp_path), hypervisor=hv).check("libvirtd")
    assert c.status == "pass"
    assert c.finding.startswith(f"libvirt {hv.version} answers: QEMU {hv.driver_version}, domain types qemu")
    assert source.hypervisor is None  # a closed connection says nothing


def test_libvirtd_check_fails_when_the_daemon_is_not_there(tmp_path):
    source = LibvirtSource(f"qemu:///system?socket={tmp_path}/no-such-sock")
    with pytest.raises(SourceError) as e:
        source.poll()
    assert source.hypervisor is None
    snap = ready_snap(sources=Sources(libvirt=f"unavailable: {e.value}"))
    (tmp_path / "usr/lib/systemd/system").mkdir(parents=True)
    (tmp_path / "usr/lib/systemd/system/libvirtd.service").write_text("[Unit]\n")
    c = run_doctor(snap, Root(tmp_path)).check("libvirtd")
    assert c.status == "fail" and "no-such-sock" in c.finding
    assert c.fix.commands == ("systemctl enable --now libvirtd",)
