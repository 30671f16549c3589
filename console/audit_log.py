"""Reading the audit log (the writer is actions/audit.py): one JSON object per line; lines with the same
id are merged, later lines winning. Each line is parsed and validated once: a line that is not UTF-8,
not JSON, not an object, too deeply nested or without an id is skipped and described in `problems`
("line N: why"); a field of the wrong type is dropped and described. A merged record is an
`AuditRecord`, read through attributes.

`Status` is the one vocabulary of change results: the runner's result of a run and the audit record's
`result` field (their values are the strings the log has always held).
"""
from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeconsole.console.outfile import UnsafePath
from nodeconsole.console.state_dir import AUDIT_NAME, DEFAULT_STATE  # noqa: F401 (the reader's names)

if TYPE_CHECKING:
    from nodeconsole.console.seams import Seams



class Status(StrEnum):
    """A change's result: of a run (actions/runner.py RunResult.status) and in its audit record."""
    IN_PROGRESS = "in-progress"  # the record written before the first step; final record not written yet
    APPLIED = "applied"
    FAILED = "failed"  # a step failed; every completed step was undone
    FAILED_PARTIAL = "failed, undo incomplete"  # a step failed and undoing left something in place
    INTERRUPTED = "interrupted"  # SIGINT/SIGTERM during the run; every completed step was undone
    INTERRUPTED_PARTIAL = "interrupted, undo incomplete"
    NOTHING = "nothing to do"  # runs only: the host already is as asked
    REFUSED = "refused"  # runs only: nothing was tried
    CANCELLED = "cancelled"  # runs only: the confirmation said no


# results that may leave changes behind
UNDOABLE = (Status.APPLIED, Status.FAILED_PARTIAL, Status.INTERRUPTED_PARTIAL, Status.IN_PROGRESS)

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


def _status(value: str | None) -> Status | str | None:
    """A known result as its Status (equal to its string), anything else as written."""
    try:
        return Status(value) if value is not None else None
    except ValueError:
        return value


@dataclass(frozen=True)
class AuditRecord:
    """One change as the log has it (its lines merged). Absent fields are None (lists: empty).
    `fields` is the merged object itself, what `log --json` prints."""
    id: str
    fields: Mapping[str, Any] = field(repr=False, compare=False)
    when: str | None = None
    action: str | None = None
    title: str | None = None
    host: str | None = None
    undo_command: str | None = None
    result: Status | str | None = None
    finished: str | None = None
    boot_id: str | None = None
    undoes: str | None = None
    undone_by: str | None = None  # the undo record that took this change back (computed, not read)
    undo_invalid: str | None = None  # why the `undo` list was dropped (undo then refuses)
    needs_reboot: bool | None = None
    who: dict[str, Any] | None = None
    request: dict[str, Any] | None = None
    failed: dict[str, Any] | None = None
    interrupted: dict[str, Any] | None = None
    steps: tuple[dict[str, Any], ...] = ()
    undo: tuple[dict[str, Any], ...] = ()
    undone: tuple[str, ...] = ()
    undo_failed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()

    @classmethod
    def from_fields(cls, obj: Mapping[str, Any]) -> AuditRecord:
        """A record of an object whose fields are already validated (a merged, cleaned line)."""
        kwargs: dict[str, Any] = {k: tuple(obj.get(k) or ()) for k in _LIST_FIELDS}
        kwargs.update((k, obj.get(k)) for k in (*_STR_FIELDS, *_DICT_FIELDS, *_BOOL_FIELDS, "undoes", "undone_by",
                                                "undo_invalid"))
        kwargs["result"] = _status(obj.get("result"))
        return cls(id=obj["id"], fields=obj, **kwargs)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> AuditRecord:
        """A record of one object as a log line would hold it (validated; a problem raises ValueError)."""
        problems: list[str] = []
        clean = _clean(dict(obj), "record", problems)
        if problems or not isinstance(clean.get("id"), str) or not clean["id"]:
            raise ValueError("; ".join(problems) or "no record id")
        if obj.get("undone_by") is not None:
            clean["undone_by"] = obj["undone_by"]
        return cls.from_fields(clean)

    @property
    def user(self) -> str | None:
        """The login user who made the change (the record's who.user)."""
        user = (self.who or {}).get("user")
        return user if isinstance(user, str) else None

    def to_json(self) -> dict[str, Any]:
        """The record as the log's merged object (with `undone_by` when an undo took it back)."""
        return dict(self.fields)


class AuditReader:
    """Read the JSON-lines audit log at `path`. Reading never fails on the content (see the module);
    it fails (OSError) only when the file cannot be read, or is a symbolic link."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.problems: list[str] = []

    def read_bytes(self) -> bytes:
        """The log's bytes, read without following a link (FileNotFoundError when absent)."""
        return read_nofollow(self.path)

    def _lines(self) -> Iterator[dict[str, Any]]:
        self.problems = []
        try:
            data = self.read_bytes()
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

    def records(self) -> list[AuditRecord]:
        """All records, oldest first, lines of one id merged (later fields win)."""
        merged: dict[str, dict[str, Any]] = {}
        for obj in self._lines():
            merged.setdefault(obj["id"], {}).update(obj)
        out = list(merged.values())
        for rid, by in undone_by(out).items():
            merged[rid]["undone_by"] = by
        return [AuditRecord.from_fields(r) for r in out]

    def find(self, record_id: str) -> AuditRecord | None:
        return next((r for r in self.records() if r.id == record_id), None)

    def latest_undoable(self) -> AuditRecord | None:
        """The newest change that left something to undo and is not undone yet. Undo records are
        skipped, so repeated `undo` walks back through history instead of redoing."""
        for r in reversed(self.records()):
            if r.undoes or r.undone_by:
                continue
            if (r.undo or r.undo_invalid) and r.result in UNDOABLE:
                return r
        return None

    def older_undoable(self, record_id: str) -> AuditRecord | None:
        """The next undoable change older than `record_id` (what to try when that one is blocked)."""
        records = self.records()
        ids = [r.id for r in records]
        if record_id not in ids:
            return None
        for r in reversed(records[:ids.index(record_id)]):
            if r.undoes or r.undone_by:
                continue
            if r.undo and r.result in UNDOABLE:
                return r
        return None


def undone_by(records: list[dict[str, Any]]) -> dict[str, str]:
    """Which applied undo record took each change back (in log order): an undo of an undo (a redo)
    puts the original change back in effect, undoable again."""
    by_id = {r["id"]: r for r in records}
    out: dict[str, str] = {}
    for r in records:
        target = r.get("undoes")
        if not target or r.get("result") != Status.APPLIED:
            continue
        out[target] = r["id"]
        original = by_id.get(target, {}).get("undoes")
        if original:
            out.pop(original, None)
    return out


def read_nofollow(path: Path) -> bytes:
    """A file's bytes, never through a symbolic link nor from anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(errno.ELOOP, f"refusing {path}: it is a symbolic link", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(errno.ELOOP, f"refusing {path}: it is not a regular file", str(path))
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def host_audit(seams: Seams) -> AuditReader:
    """The audit log of the host behind `seams`, for reading it without preparing to change the host."""
    return AuditReader(seams.audit_dir / AUDIT_NAME)
