"""A real libvirtd with two tiny running QEMU guests (rv1, rv2: 2 vCPUs, 128 MiB) for the session.

Started with the recipe in ../shared/recipes/real-libvirtd (up.sh/down.sh, run from there, nothing
copied): a private daemon in its own mount namespace, reached through its own socket. Needs root and
the packages libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils libvirt-clients bc.
Without them the tests skip and say why; with env CI set they fail instead (CI must run them).
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import end_of_run_note

NEEDED = ("/usr/sbin/libvirtd", "/usr/bin/qemu-system-x86_64", "/usr/bin/virsh", "/usr/bin/virt-admin",
          "/usr/bin/unshare", "/usr/bin/bc")
PACKAGES = "libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils libvirt-clients bc"
REPORT = "real libvirtd"  # the heading of the daemon's timings in the summary at the end of the run


@dataclass(frozen=True)
class RealLibvirtd:
    uri: str  # qemu:///system?socket=... of the private daemon
    rv: Path  # the recipe's work directory

    @property
    def admin_uri(self) -> str:
        return f"libvirtd:///system?socket={self.rv}/run/sock/libvirt-admin-sock"

    def daemon_pid(self) -> int:
        return int((self.rv / "run" / "libvirtd.pid").read_text().strip())

    def qemu_pid(self, name: str) -> int:
        """PID of a running guest's QEMU, from libvirt's pid file (the namespace's /run overlay)."""
        pidfile = self.rv / "ns" / "state" / "run.up" / "libvirt" / "qemu" / f"{name}.pid"
        return int(pidfile.read_text().strip())


def _unavailable(reason: str) -> None:
    msg = f"real libvirtd tests need {reason}"
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI must run them)")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def real_libvirtd(shared_dir: Path, pytestconfig: pytest.Config) -> Iterator[RealLibvirtd]:
    """Session-wide; with `-n N` all its tests run in one worker (tests/conftest.py groups them)."""
    recipe = shared_dir / "recipes" / "real-libvirtd"
    if not (recipe / "up.sh").exists():
        _unavailable(f"the recipe {recipe}/up.sh")
    if os.geteuid() != 0:
        _unavailable("root (the recipe starts libvirtd in a private mount namespace)")
    missing = [b for b in NEEDED if not os.access(b, os.X_OK)]
    if missing:
        _unavailable(f"{', '.join(missing)} (apt-get install {PACKAGES})")

    rv = Path(tempfile.mkdtemp(prefix="nc-rv-"))
    if len(f"{rv}/run/sock/libvirt-admin-sock") >= 108:  # the kernel's limit on a unix socket path
        shutil.rmtree(rv)
        _unavailable(f"a shorter temporary directory than {rv} (set TMPDIR to a short path)")
    # Two private daemons would both name their guests' cgroups machine/qemu-1-rv1...: one at a time.
    lock = open(Path(tempfile.gettempdir()) / "nodeconsole-real-libvirtd.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    env = {**os.environ, "RV": str(rv)}
    try:
        t0 = time.monotonic()
        up = subprocess.run(["bash", str(recipe / "up.sh")], env=env, capture_output=True, text=True,
                            timeout=180)
        first = " ".join(up.stdout.split("\n")[:1])
        end_of_run_note(pytestconfig, REPORT, f"up.sh ({time.monotonic() - t0:.1f}s): {first}")
        m = re.search(r"LIBVIRT_DEFAULT_URI='([^']+)'", up.stdout)
        if up.returncode != 0 or not m:
            pytest.fail(f"up.sh failed (rc {up.returncode}):\n{up.stdout}\n{up.stderr}\n"
                        f"{_tail(rv / 'logs' / 'libvirtd.log')}")
        yield RealLibvirtd(uri=m.group(1), rv=rv)
    finally:
        t0 = time.monotonic()
        down = subprocess.run(["bash", str(recipe / "down.sh")], env=env, capture_output=True, text=True,
                              timeout=120)
        last = (down.stdout.strip().splitlines() or [""])[-1]
        end_of_run_note(pytestconfig, REPORT, f"down.sh ({time.monotonic() - t0:.1f}s): {last}")
        if down.returncode != 0 or down.stderr.strip():
            end_of_run_note(pytestconfig, REPORT, f"down.sh rc {down.returncode}: {down.stderr.strip()}")
        shutil.rmtree(rv, ignore_errors=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""

