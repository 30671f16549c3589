"""What changed between two captures (`nodeconsole diff A B`), or between a capture and the host now (the
host captured in memory first, so both sides are read the same way).

Each side is a capture opened as a replay: one snapshot (`Collector(replay_host(path)).collect()`) and
the archive's other members: the VMs' inactive definitions, /proc/cmdline, /sys/module, the /etc and
/boot files read, the kernel log's GPU events, the audit log, the doctor's report and the manifest's
versions. The comparison is a list of `Change`s {topic, subject, what, before, after}, grouped by
topic in TOPICS order. Values that move with time (utilization, temperatures, power, memory used, load,
a VM's CPU use) are never compared; health counters count only when they grew; events and audit
records count when B has them and A does not.

This module reads the sides and is the entry point (its names are the diff's API); the records are in
diff_model.py, a VM's facts in vm_facts.py, the comparison in diff_compare.py, the words in
diff_render.py.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.capture import AUDIT, DOCTOR, INACTIVE_DIR, limits
from nodeconsole.console.capture.archive import ArchiveError
from nodeconsole.console.capture.boundedjson import load_json
from nodeconsole.console.capture.diff_compare import compare
from nodeconsole.console.capture.diff_model import TOPICS, Change, Diff, DiffError, Side
from nodeconsole.console.capture.diff_render import describe, render, text
from nodeconsole.console.capture.vm_facts import domain_facts

__all__ = ["TOPICS", "Change", "Diff", "DiffError", "Side", "capture_now", "compare", "describe", "diff_files",
           "domain_facts", "live_side", "load_side", "render", "text"]

# Configuration trees compared file by file (what the capture read of them: the doctor's and the
# plans' files, the boot loader's).
CONFIG_DIRS = ("etc", "boot")
MAX_CONFIG_FILES = 5000
MAX_FILE_TEXT = 256 << 10
MAX_AUDIT_READ = limits.MAX_MEMBER_BYTES  # what a replay opens


# -- reading a side ---------------------------------------------------------------------------------

def load_side(path: str | os.PathLike[str], label: str | None = None) -> Side:
    """Open the capture at `path` and read what the diff compares. DiffError when it is not a capture."""
    from nodeconsole.console.capture.replay import open_replay
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.root import Root
    from nodeconsole.console.seams import replay_host
    from nodeconsole.console.usage import UsageError

    name = label or str(path)
    try:
        opened = open_replay(path)
        seams = replay_host(path)  # the same extraction, opened once per process
    except ArchiveError as e:
        raise DiffError(f"{name}: {_one_line(str(e))}") from None
    except UsageError as e:  # replay_host's names --replay: say it for this file instead
        raise DiffError(f"{name}: {_one_line(str(e).partition(': ')[2] or str(e))}") from None
    collector = Collector(seams)
    try:
        snap = collector.collect()
    finally:
        collector.close()
    top = Root(opened.dir)
    root = seams.root
    side = Side(label=name, manifest=dict(opened.manifest), snapshot=snap.to_dict())
    side.vm_config = _vm_configs(top)
    cmdline = root.read("proc/cmdline")
    side.cmdline = cmdline.strip() if cmdline is not None else None
    side.modules = set(root.listdir("sys/module")) if root.isdir("sys/module") else None
    side.files = _config_files(root)
    side.events = _events(root, snap)
    side.audit = _audit(opened.dir / AUDIT) if opened.has_audit else []
    doctor = top.read_bytes(DOCTOR)
    if doctor is not None:
        try:
            value = load_json(doctor, DOCTOR)
            side.doctor = value if isinstance(value, dict) else None
        except ArchiveError:
            side.doctor = None
    return side


def _one_line(reason: str) -> str:
    """A reason on one line: a multi-line one (tarfile's tries of each compression) without its details."""
    return reason if "\n" not in reason else reason.split(" (")[0].splitlines()[0]


def capture_now(seams: Any) -> bytes:
    """A capture of the host behind `seams` now, in memory (as `nodeconsole capture` takes it)."""
    from nodeconsole.console.audit_log import AUDIT_NAME, AuditReader
    from nodeconsole.console.capture.replay import PLAN_PROGRAMS
    from nodeconsole.console.capture.take import take_capture

    log = AuditReader(seams.audit_dir / AUDIT_NAME)  # the host's audit log, where its seams keep it
    try:
        with open(log.path, "rb") as f:  # the console's own audit log, as `capture` reads it
            audit: bytes | None = f.read(MAX_AUDIT_READ + 1)
        records = log.records()
    except OSError:
        audit, records = None, []
    if audit is not None and len(audit) > MAX_AUDIT_READ:
        audit = None
    commands = seams.writes.commands(seams.root)
    programs = {name: commands.which(name) for name in PLAN_PROGRAMS}
    return take_capture(seams, changes=records, audit=audit, programs=programs).data


def live_side(seams: Any) -> Side:
    """The host behind `seams` now: captured in memory, read like a capture, and the extraction removed."""
    from nodeconsole.console.capture.replay import open_replay
    from nodeconsole.console.capture.scratch import discard

    data = capture_now(seams)
    fd, tmp = tempfile.mkstemp(prefix="nodeconsole-diff-", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        side = load_side(tmp, label="live")
        # everything is read: drop the extraction (a later open of the same name extracts afresh)
        discard(open_replay(tmp).dir)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return side


def _vm_configs(top: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(top.listdir(INACTIVE_DIR)):
        if not name.endswith(".xml"):
            continue
        data = top.read_bytes(f"{INACTIVE_DIR}/{name}")
        if data is None:
            continue
        try:
            vm_name, facts = domain_facts(data.decode("utf-8", "replace"))
        except ValueError:
            continue
        out[vm_name] = facts
    return out


def _config_files(root: Any) -> dict[str, str]:
    """Every regular file below CONFIG_DIRS in the capture (what was read of them), as text."""
    out: dict[str, str] = {}
    stack = [d for d in CONFIG_DIRS if root.isdir(d)]
    while stack and len(out) < MAX_CONFIG_FILES:
        rel = stack.pop()
        for name in sorted(root.listdir(rel)):
            path = f"{rel}/{name}"
            if root.readlink(path) is not None:
                continue  # a link: its target is compared where it lies
            if root.isdir(path):
                stack.append(path)
                continue
            data = root.read_bytes(path, limit=MAX_FILE_TEXT)
            if data is not None:
                out["/" + path] = data.decode("utf-8", "replace")
    return out


def _events(root: Any, snap: Any) -> list[dict[str, Any]]:
    from nodeconsole.console.events import tie_to_vms
    from nodeconsole.console.sources.kernel_log import KernelLog, read_host

    try:
        events = list(read_host(root, False, KernelLog()))
    except OSError:
        return []
    return [e.to_dict() for e in tie_to_vms(events, snap)]


def _audit(path: Path) -> list[AuditRecord]:
    from nodeconsole.console.audit_log import AuditReader

    try:
        return AuditReader(path).records()
    except OSError:
        return []


def diff_files(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> Diff:
    return compare(load_side(a), load_side(b))

