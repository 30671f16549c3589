"""The GPU resets the audit log records: `gpu reset` changes applied (actions/reset.py), each GPU's latest
finish time (wall clock). The collector hands them to the health verdict (console/health.py): events
logged before a GPU's last reset no longer count against it.

Read only when the log changed (its size and modification time), so a poll costs one stat. A log that
cannot be read gives what was read before (a reset stays known); a record without a readable time or
GPU is passed over.
"""
from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING

from nodeconsole.console.audit_log import Status

if TYPE_CHECKING:
    from nodeconsole.console.audit_log import AuditReader, AuditRecord

RESET_ACTION = "gpu reset"


def _when(text: str | None) -> float | None:
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()


def reset_of(record: AuditRecord) -> tuple[str, float] | None:
    """(GPU address, finish time) of an applied `gpu reset` record; None for any other record."""
    if record.action != RESET_ACTION or record.result != Status.APPLIED:
        return None
    gpu = (record.request or {}).get("gpu")
    when = _when(record.finished)
    if not isinstance(gpu, str) or when is None:
        return None
    return gpu, when


class ResetReader:
    """Each GPU's latest recorded reset, re-read when the audit log changes."""

    def __init__(self, reader: AuditReader) -> None:
        self.reader = reader
        self._sig: tuple[int, int] | None = None
        self.resets: dict[str, float] = {}

    def read(self) -> dict[str, float]:
        try:
            st = os.stat(self.reader.path)
        except OSError:
            return self.resets
        sig = (st.st_size, st.st_mtime_ns)
        if sig == self._sig:
            return self.resets
        try:
            records = self.reader.records()
        except OSError:
            return self.resets
        out: dict[str, float] = {}
        for r in records:
            hit = reset_of(r)
            if hit is not None and hit[1] > out.get(hit[0], float("-inf")):
                out[hit[0]] = hit[1]
        self._sig, self.resets = sig, out
        return out
