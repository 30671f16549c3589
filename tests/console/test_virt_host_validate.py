"""The doctor against libvirt's own `virt-host-validate qemu` on this machine (`/`): every line it prints
maps to a doctor check, and the doctor's verdict agrees (PASS → pass; FAIL → fail; WARN/NOTE → warn, skip
or fail). virt-host-validate comes with libvirt-clients (scripts/setup.sh installs it); the test is
skipped only where it is not installed.

This test reads the machine it runs on on purpose: both tools judge the same host. What the host is
(GPUs, KVM, libvirtd up or down) decides which lines appear, never whether they agree."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.doctor.model import GPU_CHECKS, NO_GPU

LINE = re.compile(r"^\s*QEMU: Checking (?P<what>.+?)\s*: (?P<verdict>PASS|WARN|FAIL|NOTE)(?: \((?P<hint>.*)\))?\s*$")
CGROUP = re.compile(r"^for cgroup '(cpu|cpuacct|cpuset|memory|devices|blkio)' controller support$")
# Each line virt-host-validate prints for QEMU → the doctor check that judges the same thing
LINES = {
    "for hardware virtualization": "kvm",
    "if device /dev/kvm exists": "kvm",
    "if device /dev/kvm is accessible": "kvm",
    "for PowerPC KVM module loaded": "kvm",
    "if device /dev/vhost-net exists": "vhost-net",
    "if device /dev/net/tun exists": "tun",
    "for device assignment IOMMU support": "iommu",
    "if IOMMU is enabled by kernel": "iommu",
    "for secure guest support": "secure-guest",
}
AGREES = {"PASS": ("pass",), "FAIL": ("fail",), "WARN": ("warn", "skip", "fail"), "NOTE": ("warn", "skip", "fail")}


def check_of(what: str) -> str:
    """The doctor check of one virt-host-validate line; AssertionError for a line the mapping lacks."""
    if CGROUP.match(what):
        return "cgroups"
    assert what in LINES, f"virt-host-validate checks {what!r}: no doctor check is mapped to it"
    return LINES[what]


def validate() -> list[tuple[str, str, str]]:
    """(what, verdict, hint) of every line `virt-host-validate qemu` prints (it exits 1 when one fails)."""
    tool = shutil.which("virt-host-validate")
    if tool is None:
        pytest.skip("virt-host-validate is not installed (apt install libvirt-clients; scripts/setup.sh --test "
                    "installs it)")
    out = subprocess.run([tool, "qemu"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, LC_ALL="C", LANG="C"), check=False)
    rows = []
    for line in out.stdout.splitlines():
        m = LINE.match(line)
        assert m or not line.strip(), f"unparsed line of virt-host-validate: {line!r}"
        if m:
            rows.append((m["what"], m["verdict"], m["hint"] or ""))
    assert rows, f"virt-host-validate printed nothing to compare: {out.stdout!r} {out.stderr!r}"
    return rows


def doctor_here() -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["doctor", "--json"])
    assert rc in (0, 1), err.getvalue()
    return json.loads(out.getvalue())


def _caller_only(what: str, hint: str, check: dict) -> bool:
    """Lines that judge the user running virt-host-validate rather than libvirt's daemon: /dev/kvm's
    access (QEMU runs as libvirt's own user, which the doctor's kvm check is about) and, on cgroup v2, the
    devices controller (a BPF query that needs the privileges libvirtd has). They may fail or warn for an
    unprivileged caller while the doctor passes — only then, and only for the reason they name."""
    if os.geteuid() == 0:
        return False
    if what == "if device /dev/kvm is accessible":
        return not os.access("/dev/kvm", os.R_OK | os.W_OK) and "/dev/kvm present" in check["finding"]
    return what == "for cgroup 'devices' controller support" and "devices (v2: BPF)" in check["finding"]


def test_every_line_of_virt_host_validate_has_the_doctors_verdict():
    rows = validate()
    checks = {c["id"]: c for c in doctor_here()["checks"]}
    disagree = []
    for what, verdict, hint in rows:
        c = checks[check_of(what)]
        if c["status"] not in AGREES[verdict] and not _caller_only(what, hint, c):
            disagree.append(f"{what}: virt-host-validate {verdict} ({hint}); doctor {c['id']} {c['status']} "
                            f"({c['finding']})")
    assert not disagree, "\n".join(disagree)


def test_the_mapping_covers_what_virt_host_validate_checks_for_qemu():
    """The lines of libvirt's QEMU validator (tools/virt-host-validate-qemu.c and -common.c) each map."""
    for what in ("for hardware virtualization", "if device /dev/kvm exists", "if device /dev/kvm is accessible",
                 "if device /dev/vhost-net exists", "if device /dev/net/tun exists",
                 "for device assignment IOMMU support", "if IOMMU is enabled by kernel", "for secure guest support",
                 *(f"for cgroup '{c}' controller support" for c in ("cpu", "cpuacct", "cpuset", "memory", "devices",
                                                                     "blkio"))):
        assert check_of(what) in {"kvm", "vhost-net", "tun", "cgroups", "iommu", "secure-guest"}
    with pytest.raises(AssertionError):
        check_of("for something new")


def _nvidia_gpus() -> list[str]:
    base = Path("/sys/bus/pci/devices")
    out = []
    for dev in base.iterdir() if base.is_dir() else ():
        with contextlib.suppress(OSError):
            if (dev / "vendor").read_text().strip() == "0x10de" and (dev / "class").read_text().startswith("0x03"):
                out.append(dev.name)
    return out


def test_gpu_checks_here_and_libvirtd_when_unreachable():
    """No NVIDIA GPU: no GPU check fails, warns or proposes a fix (each is "not applicable"); with GPUs
    they all apply. libvirtd unreachable: the libvirtd check fails with the command that starts it."""
    d = doctor_here()
    checks = {c["id"]: c for c in d["checks"]}
    for cid in GPU_CHECKS:
        c = checks[cid]
        if not _nvidia_gpus():
            assert (c["status"], c["finding"], c["applies"], c["fix"]) == ("skip", NO_GPU, False, None), c
        else:
            assert c["applies_why"] != NO_GPU, c
    libvirtd = checks["libvirtd"]
    if "libvirt: unavailable: " in " ".join(d["notes"]) and not Path("/usr/bin/pmxcfs").exists():
        assert libvirtd["status"] == "fail" and libvirtd["finding"].startswith("libvirt does not answer")
        assert any(cmd.startswith(("systemctl enable --now", "usermod -aG libvirt")) for cmd in libvirtd["fix"]["commands"])
    else:
        assert libvirtd["status"] == "pass", libvirtd
