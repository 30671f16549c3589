"""The audit log: one JSON object per line, appended, never rewritten.

A change writes a record when it starts (result "in-progress") and again when it ends; lines with the
same id are merged, later lines winning, so a crash still leaves the plan and its undo data behind.
Each record carries the inverse operations of its steps (`undo`, in the order to apply them): enough to
rebuild the undo plan without the snapshot the change was planned from.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import pwd
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

AUDIT_NAME = "audit.jsonl"

# results
IN_PROGRESS = "in-progress"
APPLIED = "applied"
FAILED = "failed"  # a step failed; every completed step was undone
FAILED_PARTIAL = "failed, undo incomplete"  # a step failed and undoing left something in place


def new_id() -> str:
    """Sortable, short and unique enough for one host: UTC time plus 4 random hex digits."""
    now = _dt.datetime.now(_dt.UTC)
    return now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def who() -> dict[str, Any]:
    """Who is making the change: login user (the sudo caller when run through sudo), uid, tty, ssh."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    tty = None
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.isatty():
                tty = os.ttyname(stream.fileno())
                break
        except (OSError, ValueError, AttributeError):
            continue
    ssh = os.environ.get("SSH_CLIENT") or os.environ.get("SSH_CONNECTION")
    out: dict[str, Any] = {"user": user, "uid": uid, "tty": tty, "ssh_client": ssh.split()[0] if ssh else None}
    if os.environ.get("SUDO_USER"):
        out["sudo_user"] = os.environ["SUDO_USER"]
    return out


class AuditLog:
    """Append and read the JSON-lines audit log at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> None:
        """Append one line and flush it to disk (an audit line that a crash loses is no audit)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def _lines(self) -> Iterator[dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line after a crash: skip it, keep the rest readable
            if isinstance(obj, dict) and isinstance(obj.get("id"), str):
                yield obj

    def records(self) -> list[dict[str, Any]]:
        """All records, oldest first, lines of one id merged (later fields win)."""
        merged: dict[str, dict[str, Any]] = {}
        for obj in self._lines():
            merged.setdefault(obj["id"], {}).update(obj)
        out = list(merged.values())
        by_id = {r["id"]: r for r in out}
        undone_by: dict[str, str] = {}
        for r in out:  # in log order
            target = r.get("undoes")
            if not target or r.get("result") != APPLIED:
                continue
            undone_by[target] = r["id"]
            # undoing an undo (a redo) puts the original change back in effect: undoable again
            original = by_id.get(target, {}).get("undoes")
            if original:
                undone_by.pop(original, None)
        for r in out:
            if r["id"] in undone_by:
                r["undone_by"] = undone_by[r["id"]]
        return out

    def find(self, record_id: str) -> dict[str, Any] | None:
        for r in self.records():
            if r["id"] == record_id:
                return r
        return None

    def latest_undoable(self) -> dict[str, Any] | None:
        """The newest change that left something to undo and is not undone yet. Undo records are
        skipped, so repeated `undo` walks back through history instead of redoing."""
        for r in reversed(self.records()):
            if r.get("undoes") or r.get("undone_by"):
                continue
            if r.get("undo") and r.get("result") in (APPLIED, FAILED_PARTIAL, IN_PROGRESS):
                return r
        return None
