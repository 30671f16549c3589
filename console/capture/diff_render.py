"""The diff in words (`nodeconsole diff`'s text, the TUI's diff modal): each change described on a line
(a file's changed lines below it), grouped under its topic's heading. Host text stays text.
"""
from __future__ import annotations

from typing import Any

from nodeconsole.console.capture.diff_model import TOPICS, Change, Diff


def _bytes(kib: Any) -> str:
    if not isinstance(kib, int):
        return _value(kib)
    for unit, n in (("TiB", 1 << 30), ("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= n:
            value = kib / n
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{kib} KiB"


def _value(v: Any) -> str:
    if v is None or v == [] or v == {} or v == "":
        return "(none)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k} {_value(x)}" for k, x in v.items())
    return str(v)


def _list_delta(before: list[Any], after: list[Any]) -> str:
    added = [x for x in after if x not in before]
    removed = [x for x in before if x not in after]
    if not added and not removed:
        return f"{_value(before)} → {_value(after)}"
    return ", ".join([f"+{_value(x)}" for x in added] + [f"-{_value(x)}" for x in removed])


def _dict_delta(before: dict[str, Any], after: dict[str, Any]) -> str:
    parts = []
    for k in list(before) + [k for k in after if k not in before]:
        x, y = before.get(k), after.get(k)
        if x != y:
            parts.append(f"+{k}:{_value(y)}" if x is None else f"-{k}:{_value(x)}" if y is None
                         else f"{k}:{_value(x)}→{_value(y)}")
    return ", ".join(parts)


def _text_lines(before: str, after: str, limit: int = 12) -> list[str]:
    import difflib

    out = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
           if not line.startswith(("---", "+++", "@@"))]
    return out[:limit] + ([f"… {len(out) - limit} more lines"] if len(out) > limit else [])


def describe(c: Change) -> list[str]:
    """A change in words: the first line, and any lines below it (a file's changed lines)."""
    b, a = c.before, c.after
    if c.topic == "files":
        if c.what == "content":
            return [f"{c.subject}: changed", *_text_lines(b or "", a or "")]
        return [f"{c.subject}: {c.what}", *_text_lines(b or "", a or "")] if c.what == "added" else [
            f"{c.subject}: {c.what}"]
    if c.topic == "audit":
        info = a or {}
        extra = ", ".join(str(x) for x in (info.get("result"), info.get("who"), info.get("when")) if x)
        return [f"{c.subject} {c.what}: {_value(info.get('title'))}" + (f" ({extra})" if extra else "")]
    if c.topic == "events":
        info = a or {}
        vms = info.get("vms") or []
        return [f"{c.subject} {c.what} at {_value(info.get('time'))}: {_value(info.get('text'))}"
                + (f" (VM {', '.join(vms)})" if vms else "")]
    if c.what in ("added", "removed"):
        return [f"{c.subject}: {c.what}" + (f" ({_value(a if c.what == 'added' else b)})"
                                             if (a if c.what == "added" else b) is not None else "")]
    if c.what == "command line" and isinstance(b, str) and isinstance(a, str):
        return [f"{c.subject}: {_list_delta(b.split(), a.split())}"]
    if isinstance(b, dict) and isinstance(a, dict):
        return [f"{c.subject} {c.what}: {_dict_delta(b, a)}"]
    if isinstance(b, list) and isinstance(a, list):
        return [f"{c.subject} {c.what}: {_list_delta(b, a)}"]
    if c.what.startswith(("memory", "current memory")):
        text = f"{_bytes(b)} → {_bytes(a)}"
    elif c.what.startswith("huge pages") and c.topic == "vms":
        text = f"{_bytes(b) if b else _value(b)} → {_bytes(a) if a else _value(a)}"
    else:
        text = f"{_value(b)} → {_value(a)}"
    return [f"{c.subject} {c.what}: {text}" + (f" — {c.note}" if c.note else "")]


def render(diff: Diff) -> list[tuple[str, str]]:
    """The readable list as (style, line) pairs: style "heading", "note", "change", "detail" or ""
    (plain). Host text stays text: callers print it as such (never as markup)."""
    out: list[tuple[str, str]] = [("", f"A: {diff.a.title}"), ("", f"B: {diff.b.title}")]
    out += [("note", f"note: {n}") for n in diff.notes]
    if not diff.changes:
        out.append(("", "no changes"))
        return out
    index = diff.gpu_index
    out.append(("", f"{len(diff.changes)} change{'s' if len(diff.changes) != 1 else ''}"))
    topic = None
    for c in diff.changes:
        if c.topic != topic:
            topic = c.topic
            out.append(("heading", TOPICS[topic]))
        lines = describe(c)
        first = lines[0]
        if c.topic in ("gpus", "mig", "vgpu", "health") and c.subject in index:
            first = first.replace(c.subject, f"GPU {index[c.subject]} {c.subject}", 1)
        out.append(("change", f"  {first}"))
        out += [("detail", f"      {line}") for line in lines[1:]]
    return out


def text(diff: Diff) -> str:
    return "\n".join(line for _style, line in render(diff)) + "\n"
