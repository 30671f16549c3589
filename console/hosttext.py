"""Host-supplied text is data: never terminal control, never markup.

Hostnames, GPU names, driver versions, VM names, device and driver names, audit titles and plan text
come from the host (or from whoever named a VM) and may hold escape sequences (`ESC ] 0 ; … BEL`
retitles the terminal, `ESC [ 2 J` clears it, a lone C1 `0x9b` is a CSI on some terminals) or be
thousands of characters long.

The snapshot keeps every value exactly as the host reported it: a VM's name is how libvirt finds it,
and `snapshot --json` carries the full value (JSON escapes the control characters). Everything that
*shows* host text goes through this module instead:

- `visible(text)`: control characters (C0, DEL, C1), line/paragraph separators and bidi overrides
  become visible escapes (`\\x1b`, `\\x07`, `\\u202e`), so `ESC ] 0 ; pwned BEL` reads
  `\\x1b]0;pwned\\x07`. Idempotent: its output holds no control character.
- `clip(text, limit)`: the display-length cap (`…` marks a cut); `show(text)` is both, for a
  table cell or a one-line label.
- `VisibleWriter`: a stream wrapper the CLI puts around stdout/stderr, so nothing it prints (a
  snapshot summary, a plan, the audit log) can reach the terminal as control bytes.

The Textual screens render the results as plain `rich.text.Text`, never as markup.
"""
from __future__ import annotations

import re
from typing import Any, TextIO

CELL_MAX = 32  # a table cell or a short label
LINE_MAX = 200  # a title or one value on a line of its own

# C0 controls, DEL, C1 controls, zero-width/bidi marks and overrides, line and paragraph separators
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_ELLIPSIS = "…"


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, keep: str = "") -> str:
    """`text` with every control character shown as a visible escape; characters in `keep` (e.g.
    "\\n" for a multi-line body) stay as they are."""
    s = text if isinstance(text, str) else ("" if text is None else str(text))
    if _UNSAFE.search(s) is None:
        return s
    if keep:
        return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), s)
    return _UNSAFE.sub(lambda m: _escape(m.group()), s)


def clip(text: str, limit: int = CELL_MAX) -> str:
    """At most `limit` characters; a longer text is cut and ends with `…`."""
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:max(0, limit - 1)] + _ELLIPSIS


def show(text: object, limit: int = CELL_MAX) -> str:
    """A host value for one line of display: visible escapes, then capped at `limit` characters."""
    return clip(visible(text), limit)


def lines(text: object, limit: int = 0) -> str:
    """A multi-line host text (a details body, a plan): newlines kept, everything else visible; each
    line capped at `limit` characters when limit > 0."""
    s = visible(text, keep="\n")
    if limit <= 0:
        return s
    return "\n".join(clip(line, limit) for line in s.split("\n"))


class VisibleWriter:
    """Wraps a text stream: whatever is written has its control characters made visible (newline and
    tab kept). Every other attribute (flush, fileno, isatty, encoding, …) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text, keep="\n\t"))
        return len(text)

    def writelines(self, parts: Any) -> None:
        for p in parts:
            self.write(p)

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
