"""JSON members of a capture (manifest.json, nvml.json, doctor.json) parsed with a depth limit: a
deeply nested document is refused in one line (ArchiveError), never a RecursionError later."""
from __future__ import annotations

import json
from typing import Any

from nodeconsole.console.capture import limits
from nodeconsole.console.capture.tarscan import ArchiveError


def depth(value: Any) -> int:
    """How deep lists and objects nest in `value` (a scalar: 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > limits.MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def load_json(data: bytes | str, what: str) -> Any:
    """`data` parsed; ArchiveError (one line) when it is not JSON or nests deeper than MAX_JSON_DEPTH."""
    too_deep = ArchiveError(f"{what} nests deeper than {limits.MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(data)
    except RecursionError:
        raise too_deep from None
    except ValueError as e:
        raise ArchiveError(f"{what} is not JSON ({e})") from None
    if depth(value) > limits.MAX_JSON_DEPTH:
        raise too_deep
    return value
