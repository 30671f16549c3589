"""The one editor of libvirt domain XML: every change to a domain definition goes through here.

Strategy: a real parser (expat) records where each element and attribute lies in the document's bytes;
an edit splices text only at those spans (an attribute value, one element, one line), so everything it
does not touch -- comments, attribute order and quoting, unknown elements, whitespace -- stays byte for
byte. The document is parsed again after every splice (a broken result raises ValueError before
anyone writes it). New elements take the layout of their neighbours: a line of their own with the
siblings' indentation in a multi-line parent, inline otherwise, the document's quote character.

A removed element takes its line with it when it had the line to itself, and an added one gets a line
of its own at the place libvirt writes it, so an edit followed by its inverse gives back the same bytes.
"""
from __future__ import annotations

import re
import xml.parsers.expat as expat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

# An element to create: (tag, attributes in order, children).
Spec = tuple[str, Sequence[tuple[str, str]], Sequence["Spec"]]

_HEAD = re.compile(rb"""<[^'">]*(?:(?:'[^']*'|"[^"]*")[^'">]*)*>""")
_ATTR = re.compile(rb"""(\s+)([^\s=/>]+)\s*=\s*(['"])(.*?)\3""", re.S)

# The order libvirt writes children in (a new element goes after the last one that precedes it).
DOMAIN_ORDER = ("name", "uuid", "genid", "title", "description", "metadata", "maxMemory", "memory",
                "currentMemory", "blkiotune", "memtune", "memoryBacking", "vcpu", "vcpus", "iothreads",
                "iothreadids", "defaultiothread", "cputune", "numatune", "resource", "sysinfo", "bootloader",
                "bootloader_args", "os", "idmap", "features", "cpu", "clock", "on_poweroff", "on_reboot",
                "on_crash", "on_lockfailure", "pm", "perf", "devices", "seclabel", "keywrap", "launchSecurity")
CPUTUNE_ORDER = ("shares", "period", "quota", "global_period", "global_quota", "emulator_period",
                 "emulator_quota", "iothread_period", "iothread_quota", "vcpupin", "emulatorpin", "iothreadpin",
                 "vcpusched", "iothreadsched", "emulatorsched", "cachetune", "memorytune")
NUMATUNE_ORDER = ("memory", "memnode")


@dataclass(eq=False)
class El:
    """One element and where it lies: [start, head_end) its start tag, [close, end) its end tag."""
    tag: str
    attrs: dict[str, str]
    start: int
    head_end: int
    close: int = 0
    end: int = 0
    parent: El | None = None
    children: list[El] = field(default_factory=list)

    def kids(self, tag: str) -> list[El]:
        return [c for c in self.children if c.tag == tag]

    def kid(self, tag: str) -> El | None:
        found = self.kids(tag)
        return found[0] if found else None


def scan(data: bytes) -> El:
    """The element tree of a document with the byte positions of every element. ValueError when it is
    not well formed."""
    parser = expat.ParserCreate()
    stack: list[El] = []
    top: list[El] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        pos = parser.CurrentByteIndex
        m = _HEAD.match(data, pos)
        if m is None:  # cannot happen for a tag expat accepted
            raise ValueError(f"cannot locate the <{tag}> tag at byte {pos}")
        el = El(tag, attrs, pos, m.end(), parent=stack[-1] if stack else None)
        (stack[-1].children if stack else top).append(el)
        stack.append(el)

    def end(_tag: str) -> None:
        el = stack.pop()
        if data[el.head_end - 2:el.head_end] == b"/>":
            el.close = el.end = el.head_end
        else:
            el.close = parser.CurrentByteIndex
            m = _HEAD.match(data, el.close)
            el.end = m.end() if m else len(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise ValueError(f"domain XML is not well formed: {e}") from None
    return top[0]


class Doc:
    """A domain definition being edited: its bytes and their element tree, parsed again on every change."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.root = scan(self.data)
        if self.root.tag != "domain":
            raise ValueError(f"not a domain XML (root element is <{self.root.tag}>)")
        self.nl = b"\r\n" if b"\r\n" in self.data else b"\n"
        first = _ATTR.search(self.data, self.root.start, self.root.head_end)
        self.quote = first.group(3) if first else b"'"

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")

    def _splice(self, start: int, end: int, new: bytes) -> None:
        data = self.data[:start] + new + self.data[end:]
        self.root = scan(data)  # a splice that breaks the document raises here, before anything keeps it
        self.data = data

    # -- layout ---------------------------------------------------------------------------------------

    def _line_start(self, pos: int) -> int:
        return self.data.rfind(b"\n", 0, pos) + 1

    def _indent(self, pos: int) -> bytes | None:
        """The whitespace before `pos` on its line; None when something else is before it."""
        lead = self.data[self._line_start(pos):pos]
        return lead if not lead.strip() else None

    def _line_after(self, pos: int) -> int | None:
        """The start of the next line when only whitespace follows `pos` on its line, else None."""
        nl = self.data.find(b"\n", pos)
        if nl < 0 or self.data[pos:nl].strip():
            return None
        return nl + 1

    def _own_line(self, el: El) -> bool:
        return self._indent(el.start) is not None and self._line_after(el.end) is not None

    def _multiline(self, parent: El) -> bool:
        return parent.close > parent.head_end and b"\n" in self.data[parent.head_end:parent.close] \
            and self._indent(parent.close) is not None

    def _unit(self) -> bytes:
        """The document's indentation step, from the first element whose children sit on lines of their own."""
        def walk(el: El) -> bytes | None:
            outer = self._indent(el.start)
            for c in el.children:
                inner = self._indent(c.start)
                if outer is not None and inner is not None and el is not self.root \
                        and len(inner) > len(outer) and inner.startswith(outer):
                    return inner[len(outer):]
            for c in el.children:
                if (found := walk(c)) is not None:
                    return found
            return None
        return walk(self.root) or b"  "

    def _child_indent(self, parent: El) -> bytes:
        for c in parent.children:
            if (ind := self._indent(c.start)) is not None and self._own_line(c):
                return ind
        return (self._indent(parent.start) or b"") + self._unit()

    def render(self, spec: Spec, indent: bytes | None) -> bytes:
        """`spec` as text; with an indent, children on lines of their own (the first line unindented)."""
        tag, attrs, children = spec
        head = b"<" + tag.encode() + b"".join(self._attr_text(k, v) for k, v in attrs)
        if not children:
            return head + b"/>"
        if indent is None:
            return head + b">" + b"".join(self.render(c, None) for c in children) + b"</" + tag.encode() + b">"
        inner = indent + self._unit()
        body = b"".join(self.nl + inner + self.render(c, inner) for c in children)
        return head + b">" + body + self.nl + indent + b"</" + tag.encode() + b">"

    def _attr_text(self, name: str, value: str) -> bytes:
        q = self.quote.decode()
        return f" {name}={q}{escape(value, {q: '&apos;' if q == chr(39) else '&quot;'})}{q}".encode()

    # -- edits ----------------------------------------------------------------------------------------

    def insert(self, parent: El, what: Spec | bytes, after: El | None = None, before: El | None = None) -> None:
        """Put `what` (a spec, or an element's exact text) into `parent`: after `after`, else before
        `before`, else last."""
        if parent.close == parent.head_end:  # <devices/>: open it up, inline
            text = what if isinstance(what, bytes) else self.render(what, None)
            head = self.data[parent.start:parent.head_end - 2].rstrip()
            self._splice(parent.start, parent.end, head + b">" + text + b"</" + parent.tag.encode() + b">")
            return
        lines = self._multiline(parent)
        ind = self._child_indent(parent) if lines else None
        text = what if isinstance(what, bytes) else self.render(what, ind)
        if after is not None:
            at = self._line_after(after.end) if lines and self._own_line(after) else None
            if at is None:
                self._splice(after.end, after.end, text)
                return
        elif before is not None:
            at = self._line_start(before.start) if lines and self._own_line(before) else None
            if at is None:
                self._splice(before.start, before.start, text)
                return
        elif lines:
            at = self._line_start(parent.close)
        else:
            self._splice(parent.close, parent.close, text)
            return
        self._splice(at, at, (ind or b"") + text + self.nl)

    def insert_ordered(self, parent: El, spec: Spec, order: Sequence[str],
                       key: Callable[[El], int] = lambda _e: 0, sub: int = 0) -> None:
        """Insert where libvirt writes it: after the last sibling that comes before it in `order` (then
        by `key`), else before the first that comes after it, else last."""
        rank = order.index(spec[0])
        mine = (rank, sub)
        known = [(c, (order.index(c.tag), key(c) if c.tag == spec[0] else 0))
                 for c in parent.children if c.tag in order]
        earlier = [c for c, k in known if k < mine]
        later = [c for c, k in known if k > mine]
        self.insert(parent, spec, after=earlier[-1] if earlier else None,
                    before=later[0] if later and not earlier else None)

    def remove(self, el: El) -> None:
        """Remove an element, with its line when it had the line to itself."""
        after = self._line_after(el.end)
        if self._indent(el.start) is not None and after is not None:
            self._splice(self._line_start(el.start), after, b"")
        else:
            self._splice(el.start, el.end, b"")

    def _attr_spans(self, el: El) -> dict[str, re.Match[bytes]]:
        out = {}
        for m in _ATTR.finditer(self.data, el.start + 1 + len(el.tag), el.head_end):
            out[m.group(2).decode()] = m
        return out

    def set_attr(self, el: El, name: str, value: str, before: Sequence[str] = ()) -> None:
        """Set one attribute: its value replaced in place (quoting kept), or added before the first
        attribute named in `before` (the order libvirt writes them in), else after the others."""
        m = self._attr_spans(el).get(name)
        if m is not None:
            q = m.group(3).decode()
            new = escape(value, {q: "&apos;" if q == "'" else "&quot;"}).encode()
            if el.attrs.get(name) != value:
                self._splice(m.start(4), m.end(4), new)
            return
        spans = list(self._attr_spans(el).values())
        later = [m for m in spans if m.group(2).decode() in before]
        at = later[0].start() if later else spans[-1].end() if spans else el.start + 1 + len(el.tag)
        self._splice(at, at, self._attr_text(name, value))

    def set_text(self, el: El, text: str) -> None:
        """Replace the character content of an element that has no child elements."""
        new = escape(text).encode()
        if el.close == el.head_end:  # <vcpu/>: open it up
            head = self.data[el.start:el.head_end - 2].rstrip()
            self._splice(el.start, el.end, head + b">" + new + b"</" + el.tag.encode() + b">")
        elif self.data[el.head_end:el.close] != new:
            self._splice(el.head_end, el.close, new)

    def del_attr(self, el: El, name: str) -> None:
        m = self._attr_spans(el).get(name)
        if m is not None:
            self._splice(m.start(), m.end(), b"")

    def ensure(self, tag: str, first: Spec) -> El | None:
        """The domain's child `tag`, created holding `first` when absent (None: it was created, with it)."""
        el = self.root.kid(tag)
        if el is None:
            self.insert_ordered(self.root, (tag, (), (first,)), DOMAIN_ORDER)
        return el

    def drop_if_empty(self, tag: str) -> None:
        """Remove the domain's child `tag` when nothing is left in it (no children, attributes or text)."""
        el = self.root.kid(tag)
        if el is not None and not el.children and not el.attrs and \
                not self.data[el.head_end:el.close].strip():
            self.remove(el)


def find_path(root: El, path: str) -> list[El]:
    """Elements below `root` along a slash-separated path of tags."""
    found = [root]
    for tag in path.split("/"):
        found = [c for el in found for c in el.kids(tag)]
    return found
