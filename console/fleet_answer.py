"""Reading one Prometheus instant-query answer: bounded, shape-checked, reduced to what the report uses.

The answer is untrusted data (whoever runs or fronts the Prometheus server writes it). It is read as at
most `MAX_ANSWER` bytes, parsed by the json module (linear in the input; nesting deeper than the
interpreter's recursion limit is refused, not a traceback), and checked against the one shape an
instant vector query has: `{"status": "success", "data": {"resultType": "vector", "result": [{"metric":
{label: "text", …}, "value": [time, "number"]}, …]}}`. Anything else is an `AnswerError` (one line).
Only the labels the fleet report reads are kept, so a large answer does not stay large in memory.
"""
from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nodeconsole.console.hosttext import clip, visible

MAX_ANSWER = 16 * 1024 * 1024  # bytes of one answer; a fleet of ~50,000 GPUs fits
# the labels fleet_report reads; the others are dropped as each answer is read
LABELS = frozenset({"instance", "hostname", "driver", "kernel", "libvirt", "owner", "address", "index",
                    "model", "scope", "state", "xid", "severity", "profile", "vm", "check", "status",
                    "source", "reason"})
Series = dict[str, Any]


class FleetError(Exception):
    """Prometheus could not be asked or did not answer: one line for the user."""


class AnswerError(FleetError):
    """Prometheus (or what answers in its place) sent something that is not an instant vector: bad
    input, one line, exit 2."""


def _detail(text: object) -> str:
    return clip(visible(text), 200)


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: parsing an answer makes only acyclic containers, and the
    collector's passes over hundreds of thousands of new dicts make a large answer's cost grow faster
    than its size (an 8 MiB answer of small series: 4.7 s with it, 0.9 s without)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_answer(body: bytes, query: str) -> list[Series]:
    """The series of one answer as [{"metric": {label: str}, "value": [time, "number"]}]; AnswerError
    when it is too large, not JSON, too deeply nested or not an instant vector."""
    if len(body) > MAX_ANSWER:
        raise AnswerError(f"the answer to {query!r} is larger than {MAX_ANSWER // (1024 * 1024)} MiB")
    with _no_gc():
        return _read(body, query)


def _read(body: bytes, query: str) -> list[Series]:
    try:
        doc = json.loads(body)
    except RecursionError:
        raise AnswerError(f"the answer to {query!r} is nested too deeply to be a Prometheus answer") from None
    except ValueError:  # also UnicodeDecodeError and an over-long integer
        raise AnswerError(f"the answer to {query!r} is not JSON (not a Prometheus API?)") from None
    if not isinstance(doc, dict):
        raise AnswerError(f"the answer to {query!r} is not a JSON object")
    if doc.get("status") != "success":
        raise FleetError(f"Prometheus query {query!r} failed: {_detail(doc.get('error', 'no status'))}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise AnswerError(f"the answer to {query!r} is not an instant vector (data.result)")
    return [_series(s, query, i) for i, s in enumerate(data["result"])]


def _series(s: object, query: str, i: int) -> Series:
    where = f"the answer to {query!r}, series {i}"
    if not isinstance(s, dict):
        raise AnswerError(f"{where}: not an object")
    metric, value = s.get("metric"), s.get("value")
    if not isinstance(metric, dict):
        raise AnswerError(f"{where}: no label set (metric)")
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        raise AnswerError(f"{where}: no [time, \"number\"] value")
    labels = {}
    for k, v in metric.items():
        if not isinstance(v, str):
            raise AnswerError(f"{where}: the label {_detail(k)!r} is not text")
        if k in LABELS:
            labels[k] = v
    return {"metric": labels, "value": [value[0], value[1]]}
