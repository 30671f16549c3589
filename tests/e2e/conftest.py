"""A real libvirtd with two tiny running QEMU guests (rv1, rv2: 2 vCPUs, 128 MiB) for the session.

Started with the recipe in ../shared/recipes/real-libvirtd (up.sh/down.sh, run from there, nothing
copied): a private daemon in its own mount namespace, reached through its own socket. Needs root and
the packages libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils libvirt-clients bc.
Without them the tests skip and say why; with env CI set they fail instead (CI must run them).

up.sh runs inside a mount namespace of its own that holds hugetlbfs mounts (2 MiB and 1 GiB pages,
where the kernel has them) under the work directory: the daemon's namespace is a copy of it, so libvirt
finds them (it looks once, at start) and hugepage-backed guests can start, while the host's mount table
is never touched. `shut_off_guest` is a small guest of a test's own (no host devices, not started) and
`hugepages_2m` reserves 2 MiB pages on node 0 for it while a test runs (given back after).
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
from dataclasses import dataclass, field
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
    hugetlbfs: dict[int, str] = field(default_factory=dict)  # page size KiB → "" (mounted) or why not

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
        up = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", _WITH_HUGETLBFS,
                             "up", str(recipe / "up.sh")], env={**env, "LIBMOUNT_UTAB": str(rv / "utab")},
                            capture_output=True, text=True, timeout=180)
        first = " ".join(up.stdout.split("\n")[:1])
        end_of_run_note(pytestconfig, REPORT, f"up.sh ({time.monotonic() - t0:.1f}s): {first}")
        m = re.search(r"LIBVIRT_DEFAULT_URI='([^']+)'", up.stdout)
        if up.returncode != 0 or not m:
            pytest.fail(f"up.sh failed (rc {up.returncode}):\n{up.stdout}\n{up.stderr}\n"
                        f"{_tail(rv / 'logs' / 'libvirtd.log')}")
        yield RealLibvirtd(uri=m.group(1), rv=rv, hugetlbfs=_hugetlbfs(rv))
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


# In the namespace up.sh runs in (and its daemon's namespace copies): hugetlbfs of each page size, each
# mount's outcome in $RV/hugetlbfs-SIZE.out ("" when mounted). Then up.sh itself.
_WITH_HUGETLBFS = """
for size in 2M 1G; do
  mkdir -p "$RV/hugetlbfs-$size"
  out="$RV/hugetlbfs-$size.out"
  if ! mount -t hugetlbfs -o pagesize=$size nodeconsole-hugetlbfs "$RV/hugetlbfs-$size" >"$out" 2>&1; then
    echo " (mount -t hugetlbfs -o pagesize=$size failed)" >>"$out"
  fi
done
exec bash "$1"
"""


def _hugetlbfs(rv: Path) -> dict[int, str]:
    out = {}
    for size, kib in (("2M", 2048), ("1G", 1 << 20)):
        try:
            out[kib] = (rv / f"hugetlbfs-{size}.out").read_text().strip().replace("\n", " ")
        except OSError as e:
            out[kib] = f"no outcome of the mount ({e})"
    return out


@dataclass(frozen=True)
class Guest:
    """A guest of a test's own on the real daemon: defined, shut off, no host devices."""
    name: str
    uri: str
    memory_kib: int
    vcpus: int


SMALL_GUEST = "nc-small"


@pytest.fixture
def shut_off_guest(real_libvirtd) -> Iterator[Guest]:
    """A copy of rv1's definition (2 vCPUs, 128 MiB, diskless, network boot) under a name and UUID of its
    own, defined and shut off; destroyed (if a test started it) and undefined afterwards."""
    import libvirt

    conn = libvirt.open(real_libvirtd.uri)
    try:
        xml = conn.lookupByName("rv1").XMLDesc(2)  # VIR_DOMAIN_XML_INACTIVE
        xml = re.sub(r"<uuid>[^<]*</uuid>", "", xml.replace("<name>rv1</name>", f"<name>{SMALL_GUEST}</name>"))
        conn.defineXML(xml)
        yield Guest(SMALL_GUEST, real_libvirtd.uri, memory_kib=128 * 1024, vcpus=2)
    finally:
        try:
            dom = conn.lookupByName(SMALL_GUEST)
            if dom.isActive():
                dom.destroy()
            dom.undefine()
        except libvirt.libvirtError as e:  # never defined (defineXML failed): nothing to remove
            if e.get_error_code() != 42:  # VIR_ERR_NO_DOMAIN
                raise
        finally:
            conn.close()


HUGEPAGES_2M = Path("/sys/devices/system/node/node0/hugepages/hugepages-2048kB")


@pytest.fixture
def hugepages_2m(real_libvirtd) -> Iterator[int]:
    """Enough free 2 MiB pages on node 0 for `shut_off_guest` (plus a few), reserved through sysfs for the
    test and the previous count written back after it (ask for it before the guest, so the guest is gone
    by then). Skips, saying why, when the daemon has no 2 MiB hugetlbfs or the kernel refuses the pages.
    Yields how many pages were free for the test."""
    why = real_libvirtd.hugetlbfs.get(2048, "not tried")
    if why:
        pytest.skip(f"the test daemon has no 2 MiB hugetlbfs: {why}")
    want = 128 * 1024 // 2048 + 8
    nr = HUGEPAGES_2M / "nr_hugepages"
    try:
        before = int(nr.read_text())
        free = int((HUGEPAGES_2M / "free_hugepages").read_text())
        nr.write_text(str(before + max(0, want - free)))
    except (OSError, ValueError) as e:
        pytest.skip(f"2 MiB hugepages on node 0 cannot be reserved here ({HUGEPAGES_2M}: {e})")
    try:
        free = int((HUGEPAGES_2M / "free_hugepages").read_text())
        if free < want:
            pytest.skip(f"the kernel reserved only {free} free 2 MiB pages on node 0 of the {want} asked")
        yield free
    finally:
        nr.write_text(str(before))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""

