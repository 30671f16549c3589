"""The audit log: one JSON object per line, appended, never rewritten.

A change writes a record when it starts (result "in-progress") and again when it ends; lines with the
same id are merged, later lines winning, so a crash still leaves the plan and its undo data behind.
Each record carries the inverse operations of its steps (`undo`, in the order to apply them): enough to
rebuild the undo plan without the snapshot the change was planned from.

A change with steps that take effect only at the next boot also carries `needs_reboot: true` and the
`boot_id` (/proc/sys/kernel/random/boot_id) of the boot it was applied in; a doctor fix carries the check
ids it fixes (`fixes`). While the host's boot_id is still that one, the change is pending a reboot.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import pwd
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeconsole.actions.safe_files import AUDIT_DIR_MODE, ensure_dir, open_file, read_bytes
from nodeconsole.console.outfile import fsync_dir
from nodeconsole.console.state_dir import AUDIT_NAME, DEFAULT_STATE  # noqa: F401  (importers find them here)

if TYPE_CHECKING:
    from nodeconsole.console.seams import Seams

# A change starts only with this much free space on the audit log's filesystem: room for its final
# record, and for the records of the undo that may follow (one record is a few KiB).
MIN_FREE_BYTES = 1 << 20

# results
IN_PROGRESS = "in-progress"
APPLIED = "applied"
FAILED = "failed"  # a step failed; every completed step was undone
FAILED_PARTIAL = "failed, undo incomplete"  # a step failed and undoing left something in place
INTERRUPTED = "interrupted"  # SIGINT/SIGTERM during the run; every completed step was undone
INTERRUPTED_PARTIAL = "interrupted, undo incomplete"
UNDOABLE = (APPLIED, FAILED_PARTIAL, INTERRUPTED_PARTIAL, IN_PROGRESS)  # results that may leave changes


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


# The fields a record may have and their JSON types; a field of another type is dropped (and reported),
# so a damaged or hand-edited log never reaches the code that reads it with a wrong shape.
_STR_FIELDS = ("when", "action", "title", "host", "undo_command", "result", "finished", "boot_id")
_DICT_FIELDS = ("who", "request", "failed", "interrupted")
_LIST_FIELDS = {"steps": dict, "undo": dict, "undone": str, "undo_failed": str, "notes": str, "fixes": str}
_BOOL_FIELDS = ("needs_reboot",)


def _clean(obj: dict[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
    """A copy of one line's object with every field of the wrong type dropped and reported. A broken
    `undo` list is kept as `undo_invalid` (the reason), so undo refuses instead of doing less."""
    out = dict(obj)
    for key in _STR_FIELDS:
        if key in out and not isinstance(out[key], str):
            problems.append(f"{where}: field {key!r} is not a string; ignored")
            del out[key]
    if "undoes" in out and not (out["undoes"] is None or isinstance(out["undoes"], str)):
        problems.append(f"{where}: field 'undoes' is not a string; ignored")
        del out["undoes"]
    for key in _BOOL_FIELDS:
        if key in out and not isinstance(out[key], bool):
            problems.append(f"{where}: field {key!r} is not true or false; ignored")
            del out[key]
    for key in _DICT_FIELDS:
        if key in out and not (out[key] is None or isinstance(out[key], dict)):
            problems.append(f"{where}: field {key!r} is not an object; ignored")
            del out[key]
    for key, kind in _LIST_FIELDS.items():
        value = out.get(key)
        if key in out and not (value is None or isinstance(value, list) and all(isinstance(v, kind) for v in value)):
            why = f"field {key!r} is not a list of {'objects' if kind is dict else 'strings'}"
            problems.append(f"{where}: {why}; ignored")
            del out[key]
            if key == "undo":
                out["undo_invalid"] = f"{where}: {why}"
    out.pop("undone_by", None)  # computed by records(), never trusted from the file
    return out


class AuditLog:
    """Append and read the JSON-lines audit log at `path`. Reading never fails on the content: a line
    that is not UTF-8, not JSON, not an object or too deeply nested is skipped and described in
    `problems` ("line N: why"), and the rest is read."""

    def __init__(self, path: Path, dir_mode: int = AUDIT_DIR_MODE) -> None:
        self.path = Path(path)
        self.dir_mode = dir_mode
        self.problems: list[str] = []

    def append(self, record: dict[str, Any], min_free: int = 0) -> None:
        """Append one line, whole, and flush it to disk (an audit line that a crash loses is no audit);
        OSError, with the file as it was, when it cannot be. `min_free`: refuse (ENOSPC) unless the
        log's filesystem has that many bytes free. The file is never reached through a symbolic link;
        it is created with mode 0640."""
        ensure_dir(self.path.parent, self.dir_mode)
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        if min_free:
            free = free_bytes(self.path.parent)
            if free < min_free:
                raise OSError(errno.ENOSPC, f"its filesystem has {free // 1024} KiB free, less than the "
                                            f"{min_free // 1024} KiB a change needs for its records")
        created = not os.path.lexists(self.path)
        fd = open_file(self.path, os.O_RDWR | os.O_APPEND, 0o640, create=True)  # read: its last byte
        try:
            _append_whole(fd, line)
        finally:
            os.close(fd)
        if created:  # the new file's name must survive a crash too
            with contextlib.suppress(OSError):  # the line itself is synced: the entry is best effort
                fsync_dir(self.path.parent)

    def _lines(self) -> Iterator[dict[str, Any]]:
        self.problems = []
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            return
        for n, raw in enumerate(data.split(b"\n"), 1):
            obj = self._parse(n, raw)
            if obj is not None:
                yield _clean(obj, f"line {n}", self.problems)

    def _parse(self, n: int, raw: bytes) -> dict[str, Any] | None:
        raw = raw.strip()
        if not raw:
            return None
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            why = "not UTF-8"
        except RecursionError:
            why = "nested too deeply"
        except ValueError:
            why = "not JSON (a torn line after a crash?)"
        else:
            if not isinstance(obj, dict):
                why = "not a JSON object"
            elif not isinstance(obj.get("id"), str) or not obj["id"]:
                why = "no record id"
            else:
                return obj
        self.problems.append(f"line {n}: {why}; skipped")
        return None

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
            if (r.get("undo") or r.get("undo_invalid")) and r.get("result") in UNDOABLE:
                return r
        return None

    def older_undoable(self, record_id: str) -> dict[str, Any] | None:
        """The next undoable change older than `record_id` (what to try when that one is blocked)."""
        records = self.records()
        ids = [r["id"] for r in records]
        if record_id not in ids:
            return None
        for r in reversed(records[:ids.index(record_id)]):
            if r.get("undoes") or r.get("undone_by"):
                continue
            if r.get("undo") and r.get("result") in UNDOABLE:
                return r
        return None


def free_bytes(path: Path) -> int:
    """Bytes this process may still write on the filesystem holding `path` (root may use the blocks
    reserved for it, others may not). A seam for tests."""
    st = os.statvfs(path)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


def write_some(fd: int, data: bytes) -> int:
    """One os.write (a seam for tests: a full filesystem writes less than asked, or raises ENOSPC)."""
    return os.write(fd, data)


def _append_whole(fd: int, line: bytes) -> None:
    """Write `line` at the end of the file and fsync it, continuing short writes. On any failure the
    file is truncated back to its old length (no torn line is left) and the error raised. A torn last
    line from an earlier crash gets a newline first, so this line stays a line of its own."""
    start = os.lseek(fd, 0, os.SEEK_END)
    if start and os.pread(fd, 1, start - 1) != b"\n":
        line = b"\n" + line
    try:
        done = 0
        while done < len(line):
            n = write_some(fd, line[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, "the audit log took no more bytes (is its filesystem full?)")
            done += n
        os.fsync(fd)
    except BaseException:
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError:
            pass
        raise


def host_audit(seams: Seams) -> AuditLog:
    """The audit log of the host behind `seams`, for reading it without preparing to change the host
    (which opens libvirt and imports every action)."""
    return AuditLog(seams.audit_dir / AUDIT_NAME, seams.state_mode)
