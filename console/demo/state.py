"""Where the demo host lives between runs. Generated on first use and then reused, so what actions change
(drivers, mdevs, VMs) persists until `nodeconsole demo reset`. A stamp records the layout version and a
digest of the demo spec: a demo made by an older release is regenerated instead of misread. The host
file (demo-host.json) remembers whether the demo is the bare variant and how often it was rebooted, so
a reboot (`reboot_demo`) and a regeneration bring up the same variant. The demo generates only into a
directory that is its own (console/demo/owner.py): anything else raises ForeignStateDir."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from nodeconsole.console.demo.host import LIBVIRT, NVML, ROOT, STATE_FILE_MODE, GeneratedHost
from nodeconsole.console.demo.owner import ForeignStateDir, check_ours, claim
from nodeconsole.console.outfile import write_atomic
from nodeconsole.console.root import Root

if TYPE_CHECKING:
    from nodeconsole.console.demo.boot import BootReport
    from nodeconsole.console.demo.spec import HostSpec

LAYOUT_VERSION = 1  # bump when the generated layout changes in a way the spec digest cannot see
STAMP = "demo-stamp.json"
HOST_FILE = "demo-host.json"  # {"bare": bool, "boot_count": int[, "proxmox": true]}
LOCK = ".demo.lock"
GENERATED = (ROOT, ROOT + ".partial", ROOT + ".old", LIBVIRT, NVML, LIBVIRT + ".partial", NVML + ".partial",
             STAMP, HOST_FILE)


def demo_state_dir(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """The demo's directory: the argument, else $NODECONSOLE_STATE_DIR, else
    $XDG_STATE_HOME/nodeconsole/demo, else ~/.local/state/nodeconsole/demo."""
    if state_dir is not None:
        return Path(state_dir)
    env = os.environ.get("NODECONSOLE_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "nodeconsole" / "demo"


# The generator's sources: the stamp digests them instead of building the demo spec, so finding an
# existing demo host at start-up imports none of the generator (~60 ms). Any change to how the demo
# is described or written regenerates it.
_SOURCES = ("presets.py", "spec.py", "builders.py", "generator.py", "gen_cpu.py", "gen_pci.py",
            "gen_libvirt.py", "gen_nvml.py", "gen_config.py", "gen_kernel.py", "gen_etc.py", "boot.py",
            "sysfs_ops.py", "fstree.py", "sim_vgpu.py", "host.py")


def _stamp() -> dict:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return {"layout_version": LAYOUT_VERSION, "spec": h.hexdigest()[:16]}


def is_current(state_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when the directory holds a complete demo host of this release's layout."""
    d = demo_state_dir(state_dir)
    try:
        stamp = json.loads((d / STAMP).read_text())
    except (OSError, ValueError):
        return False
    host = GeneratedHost.at(d)
    return (stamp == _stamp() and host.root.is_dir() and host.libvirt_xml.is_file()
            and host.nvml_state.is_file())


DIR_MODE = 0o700  # the demo's state directory (and any parent made for it): private


def _make_dir(d: Path) -> None:
    """Create `d` and missing parents with mode 0700 exactly (whatever the umask); refuse a link."""
    missing = []
    p = d
    while not os.path.lexists(p) and p.parent != p:
        missing.append(p)
        p = p.parent
    for sub in reversed(missing):
        try:
            os.mkdir(sub, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(sub, DIR_MODE)
    if os.path.islink(d) or not d.is_dir():
        raise OSError(errno.ENOTDIR, f"refusing the demo state directory {d}: not a directory (a link?)", str(d))


@contextmanager
def _locked(d: Path):
    """One process generates at a time (two consoles started together must not interleave). The lock
    file is never truncated and never reached through a symbolic link (O_NOFOLLOW)."""
    _make_dir(d)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(d / LOCK, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"refusing {d / LOCK}: it is a symbolic link", str(d / LOCK)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"refusing {d / LOCK}: not a regular file", str(d / LOCK))
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _owned(d: Path):
    """Locked, in a directory that is the demo's: checked before anything is created in it (not even
    the lock file) and again under the lock. ForeignStateDir otherwise."""
    check_ours(d, STAMP, ignore=(LOCK,))  # a lock file alone: a run stopped before its marker
    with _locked(d):
        check_ours(d, STAMP, ignore=(LOCK,))
        yield


def ensure_demo(state_dir: str | os.PathLike[str] | None = None) -> GeneratedHost:
    """The demo host, generated if missing, incomplete or from an older layout (as the variant it was:
    bare or not); otherwise reused as is."""
    d = demo_state_dir(state_dir)
    if os.path.islink(d):
        raise ForeignStateDir(f"refusing the demo state directory {d}: it is a symbolic link")
    if is_current(d):
        return GeneratedHost.at(d)
    with _owned(d):
        _recover(d)
        if is_current(d):  # generated by another process while we waited
            return GeneratedHost.at(d)
        return _regenerate(d, bool(_host_file(d).get("bare")), bool(_host_file(d).get("proxmox")))


def reset_demo(state_dir: str | os.PathLike[str] | None = None, bare: bool = False,
               proxmox: bool = False) -> GeneratedHost:
    """Throw the demo host's state away and generate it afresh: the demo preset, or with `bare` the same
    hardware freshly installed (console/demo/boot.py's bare_spec); with `proxmox` as a Proxmox VE host
    (console/demo/gen_proxmox.py)."""
    d = demo_state_dir(state_dir)
    with _owned(d):
        return _regenerate(d, bare, proxmox)


def reboot_demo(state_dir: str | os.PathLike[str] | None = None) -> tuple[GeneratedHost, BootReport]:
    """Reboot the demo host: the next boot's host is generated from the preset (bare or not) and what its
    disk says (console/demo/boot.py); the disk (/etc, /boot, /usr …) and the VM definitions are kept
    byte for byte, and so is the rest of the state directory (audit log)."""
    from nodeconsole.console.demo.boot import boot_report, boot_spec, read_boot_config
    from nodeconsole.console.demo.generator import generate

    d = demo_state_dir(state_dir)
    with _owned(d):
        _recover(d)
        if not is_current(d):
            _regenerate(d, bool(_host_file(d).get("bare")), bool(_host_file(d).get("proxmox")))
        info = _host_file(d)
        host = GeneratedHost.at(d)
        try:
            nvml = json.loads(host.nvml_state.read_text())
        except (OSError, ValueError):
            nvml = None  # the GPUs' saved MIG modes are lost with it: the preset's come back
        count = info["boot_count"] + 1 if isinstance(info.get("boot_count"), int) else 1
        boot = read_boot_config(Root(host.root), nvml)
        proxmox = bool(info.get("proxmox"))
        spec = boot_spec(_base_spec(bool(info.get("bare")), proxmox), boot, count)
        generate(spec, d, keep_disk=True)
        if proxmox:  # its VMs that ran run again (their configs are on the disk, kept)
            from nodeconsole.console.demo.gen_proxmox import write_proxmox

            write_proxmox(spec, host.root, configs=False)
        _save_host_file(d, {"bare": bool(info.get("bare")), "boot_count": count,
                            **({"proxmox": True} if proxmox else {})})
        return host, boot_report(spec, boot, Root(host.root))


def _base_spec(bare: bool, proxmox: bool = False) -> HostSpec:
    from nodeconsole.console.demo.boot import bare_spec
    from nodeconsole.console.demo.gen_proxmox import proxmox_spec
    from nodeconsole.console.demo.presets import demo_spec

    spec = bare_spec(demo_spec()) if bare else demo_spec()
    return proxmox_spec(spec) if proxmox else spec


def _host_file(d: Path) -> dict:
    try:
        data = json.loads((d / HOST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_host_file(d: Path, data: dict) -> None:
    write_atomic(d / HOST_FILE, (json.dumps(data) + "\n").encode("utf-8"), STATE_FILE_MODE)


def _recover(d: Path) -> None:
    """A generation cut short between moving the old root aside and putting the new one in place leaves
    root.old alone: put it back."""
    root, old = d / ROOT, d / (ROOT + ".old")
    if not os.path.lexists(root) and old.is_dir() and not old.is_symlink():
        os.rename(old, root)


def _regenerate(d: Path, bare: bool = False, proxmox: bool = False) -> GeneratedHost:
    from nodeconsole.console.demo.generator import generate
    from nodeconsole.console.demo.sysfs_ops import remove_tree

    claim(d)  # before the first generated file: a generation cut short is still ours to redo
    # Only what the generator wrote is removed: the directory may be shared with other files (logs).
    for name in GENERATED:
        remove_tree(d / name)
    spec = _base_spec(bare, proxmox)
    host = generate(spec, d)
    if proxmox:
        from nodeconsole.console.demo.gen_proxmox import write_proxmox

        write_proxmox(spec, host.root)
    _save_host_file(d, {"bare": bare, "boot_count": 0, **({"proxmox": True} if proxmox else {})})
    # last: a generation cut short leaves no stamp and is redone
    write_atomic(d / STAMP, (json.dumps(_stamp()) + "\n").encode("utf-8"), STATE_FILE_MODE)
    return host
