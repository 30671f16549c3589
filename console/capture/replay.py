"""Opening a capture for replay: the archive checked and extracted into a private directory (mode 0700,
memory-backed where the system offers it, removed when the process ends, signals included: scratch.py),
its libvirt node file checked to read nothing outside it (node_refs.py), and what the console says
about it (`Replay`: whose host, captured when). The seams over the extracted capture are made in
console/seams.py (replay_host), which chooses the simulated NVML library that serves the captured state.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeconsole.console.capture import AUDIT, NODE_FILE, NVML_STATE, ROOT_DIR, limits
from nodeconsole.console.capture.archive import ArchiveError, extract_archive
from nodeconsole.console.capture.boundedjson import load_json
from nodeconsole.console.capture.node_refs import check_node_file
from nodeconsole.console.capture.scratch import discard, private_dir

READ_ONLY = "replay is read-only: a capture cannot be changed (plans are shown; changes need the live host)"
# Programs plans look for on a host (a plan without driverctl binds differently; a doctor fix needs the
# initramfs and boot-loader tools): a capture notes where the host had each, a replay answers from that.
PLAN_PROGRAMS = ("driverctl", "modprobe", "nvidia-smi", "update-initramfs", "dracut", "update-grub",
                 "grub-mkconfig", "grub2-mkconfig", "grubby", "proxmox-boot-tool", "systemctl", "sysctl")

_lock = threading.Lock()
_opened: dict[tuple[str, int, int], ReplayDir] = {}  # (path, size, mtime) → extracted once per process


@dataclass(frozen=True)
class Replay:
    """The capture a console runs on (Seams.replay)."""
    path: str
    hostname: str
    captured_at: str
    origin: str  # "live", "demo", "tree": what the capture was first taken from
    redacted: bool

    @property
    def banner(self) -> str:
        return f"replay of {self.hostname or '?'} captured at {self.captured_at or '?'} (read-only)"


@dataclass(frozen=True)
class ReplayDir:
    """An extracted capture."""
    dir: Path
    replay: Replay
    manifest: dict[str, Any]

    @property
    def root(self) -> Path:
        return self.dir / ROOT_DIR

    @property
    def node_file(self) -> Path | None:
        path = self.dir / NODE_FILE
        return path if path.is_file() else None

    @property
    def audit_dir(self) -> Path:
        """Where the captured audit log lies (as audit.jsonl), the replay's state directory."""
        return self.dir

    def nvml_state(self) -> dict[str, Any] | None:
        path = self.dir / NVML_STATE
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            state = load_json(f.read(limits.MAX_MEMBER_BYTES + 1), NVML_STATE)
        if not isinstance(state, dict) or not isinstance(state.get("gpus", []), list):
            raise ArchiveError(f"{NVML_STATE} is not an NVML state")
        return state

    @property
    def nvml_clock(self) -> float | None:
        value = self.manifest.get("nvml_clock")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def programs(self) -> dict[str, str | None]:
        value = self.manifest.get("programs")
        return {str(k): v if isinstance(v, str) else None for k, v in value.items()} if isinstance(value, dict) else {}

    @property
    def snapshot_sources(self) -> dict[str, str]:
        """The collector's status of each source at capture time ("ok" or "unavailable: reason")."""
        value = self.manifest.get("snapshot_sources")
        return {str(k): str(v) for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}

    @property
    def has_audit(self) -> bool:
        return (self.dir / AUDIT).is_file()


def open_replay(path: str | os.PathLike[str]) -> ReplayDir:
    """Check and extract the capture at `path` (once per process for the same file). ArchiveError
    says why it cannot be opened."""
    path = os.path.abspath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ArchiveError(e.strerror or str(e)) from None
    key = (path, st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _opened and _opened[key].dir.is_dir():
            return _opened[key]
        dest = private_dir()
        try:
            manifest = extract_archive(path, dest)
            (dest / ROOT_DIR).mkdir(exist_ok=True)
            check_node_file(dest)
        except BaseException:
            discard(dest)
            raise
        replay = Replay(path=path, hostname=str(manifest.get("hostname") or ""),
                        captured_at=str(manifest.get("captured_at") or ""),
                        origin=str(manifest.get("origin") or "live"), redacted=bool(manifest.get("redacted")))
        opened = ReplayDir(dest, replay, manifest)
        _opened[key] = opened
        return opened


class ReadOnlyKernel:
    """The kernel writer of a replay: every write refuses (the runner refuses first; this is the floor)."""

    def write(self, path: str, text: str) -> None:
        raise PermissionError(f"{READ_ONLY} (/{path.lstrip('/')})")


class CapturedPrograms:
    """The programs a replayed host had (where `which` found them at capture time); none is ever run."""

    def __init__(self, programs: Mapping[str, str | None]) -> None:
        self.programs = {str(k): str(v) for k, v in programs.items() if isinstance(v, str) and v}

    def which(self, name: str) -> str | None:
        return self.programs.get(name)

    def run(self, argv: list[str]) -> tuple[int, str]:
        return 126, f"{argv[0] if argv else ''}: {READ_ONLY}"


class ReplayWrites:
    """A replay's write seams (Seams.writes): a kernel that refuses and the captured programs."""

    def __init__(self, programs: Mapping[str, str | None]) -> None:
        self.programs = dict(programs)

    def kernel(self, root: object) -> ReadOnlyKernel:
        return ReadOnlyKernel()

    def commands(self, root: object) -> CapturedPrograms:
        return CapturedPrograms(self.programs)
