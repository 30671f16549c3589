"""Variables of sh files sourced one after another, as the shell sees them, and the safe edit of one:
the core of reading and changing /etc/default/grub (+ grub.d/*.cfg) without running a shell.

`source_all(sources)` follows the files in order (console/shell_cmds.py finds the commands that surely
run): each variable ends with a known value and the assignment that gave it (the last unconditional
one, in whichever file), or with the reason its value cannot be known without running the shell: set
inside a conditional, a compound command or a function, for one command only (`X=… cmd`), by command
substitution or another expansion, from a variable whose value is unknown, by `read`/`eval`/`.`, made
read-only, unset, or a file the lexer cannot follow. Variables never assigned expand to "" when their
name starts with GRUB_ (nothing sets those before grub-mkconfig sources the files), else they are
unknown.

`edit(sources, {name: value})` rewrites the value of each counting assignment whose value changes as
one double-quoted word (`"`, `\\`, `$` and backquote escaped), keeping every other byte of every file
(what follows on the same line, `;X=1` or `# comment`, included); a variable never assigned gets a new
line at the end of the first file. It refuses (ShellEditError, one clear line) a variable whose value is
unknown, or one expanded after its counting assignment (the edit would change what that line gives).
Files are bytes; text is decoded as Latin-1, one character per byte, so untouched bytes stay exact.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeconsole.console.shell_cmds import Command, parse
from nodeconsole.console.shell_lex import Lit, Opaque, Part, ShellSyntaxError, Var, Word

_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SOURCING = frozenset((".", "source", "eval"))
_SETTERS = frozenset(("read", "declare", "typeset", "local", "mapfile", "readarray", "printf", "let", "getopts"))


class ShellEditError(ValueError):
    """An edit that cannot be made safely (the message says why, in one line)."""


@dataclass(frozen=True)
class Source:
    name: str  # how messages name the file ("/etc/default/grub")
    data: bytes


@dataclass(frozen=True)
class Assignment:
    source: int  # index in the sources
    name: str
    start: int  # the word's offsets in the file (Latin-1: bytes)
    value_start: int  # after `=`; -1 when the raw text does not start with `NAME=` (a continuation inside)
    end: int
    line: int


@dataclass
class Sourced:
    """The variables after sourcing every file (see the module doc)."""
    sources: list[Source]
    values: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)  # name → why its value is not known
    counting: dict[str, Assignment] = field(default_factory=dict)
    uses: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # (source, offset) of each $NAME
    tainted: dict[str, str] = field(default_factory=dict)  # unknown for good (functions, readonly)
    everything: str | None = None  # why no variable can be known (a file `.`/`eval`s or cannot be read)

    def value(self, name: str) -> str | None:
        """The variable's value ("" when never set and GRUB_*), None when it cannot be known."""
        if self.why(name):
            return None
        if name in self.values:
            return self.values[name]
        return "" if name.startswith("GRUB_") else None

    def why(self, name: str) -> str:
        """Why the variable's value cannot be known ("" when it can)."""
        reason = self.everything or self.tainted.get(name) or self.unknown.get(name)
        if reason:
            return reason
        if name not in self.values and not name.startswith("GRUB_"):
            return f"{name} is never set in these files"
        return ""

    def where(self, a: Assignment | tuple[int, int]) -> str:
        if isinstance(a, Assignment):
            return f"{self.sources[a.source].name} line {a.line}"
        src, offset = a
        line = self.sources[src].data.count(b"\n", 0, offset) + 1
        return f"{self.sources[src].name} line {line}"


def _assignment(w: Word, src: int, text: str) -> tuple[Assignment, bool, list[Part]] | None:
    """(assignment, append, value parts) when the word is `NAME=…` / `NAME+=…`."""
    first = w.parts[0] if w.parts else None
    if not isinstance(first, Lit) or first.quoted:
        return None
    m = _ASSIGN.match(first.text)
    if not m:
        return None
    rest: list[Part] = [Lit(first.text[m.end():], False)] if m.end() < len(first.text) else []
    raw_ok = text.startswith(m.group(), w.start)
    a = Assignment(src, m.group(1), w.start, w.start + m.end() if raw_ok else -1, w.end, w.line)
    return a, bool(m.group(2)), rest + w.parts[1:]


def _tilde(parts: list[Part]) -> bool:
    for k, p in enumerate(parts):
        if isinstance(p, Lit) and not p.quoted and ("~" in p.text and (
                (k == 0 and p.text.startswith("~")) or ":~" in p.text)):
            return True
    return False


class _Run:
    def __init__(self, state: Sourced) -> None:
        self.s = state

    def expand(self, parts: list[Part]) -> tuple[str | None, str]:
        if _tilde(parts):
            return None, "a ~ (home directory) expansion"
        out = []
        for p in parts:
            if isinstance(p, Lit):
                out.append(p.text)
            elif isinstance(p, Var):
                v = self.s.value(p.name)
                if v is None:
                    return None, f"it uses ${p.name}, whose value is not known ({self.s.why(p.name)})"
                out.append(v)
            else:
                return None, f"it is set by {p.why}"
        return "".join(out), ""

    def assign(self, a: Assignment, append: bool, parts: list[Part]) -> None:
        s = self.s
        value, why = self.expand(parts)
        if append:
            value, why = None, "`+=` is bash only (grub-mkconfig runs /bin/sh)"
        s.counting.pop(a.name, None)
        if value is None:
            s.unknown[a.name] = f"{a.name} cannot be edited safely: {why} ({s.where(a)})"
            s.values.pop(a.name, None)
            return
        s.unknown.pop(a.name, None)
        s.values[a.name] = value
        s.counting[a.name] = a

    def forget(self, name: str, why: str, cmd: Command, src: int, for_good: bool = False) -> None:
        where = self.s.where((src, cmd.start))
        msg = f"{name} cannot be edited safely: {why} ({where})"
        (self.s.tainted if for_good else self.s.unknown)[name] = msg
        self.s.values.pop(name, None)
        self.s.counting.pop(name, None)

    def command(self, cmd: Command, src: int, text: str) -> None:
        words = cmd.words
        k = 0
        assigns = []
        while k < len(words) and (found := _assignment(words[k], src, text)):
            assigns.append(found)
            k += 1
        rest = words[k:]
        name = rest[0].literal() if rest else None
        if not cmd.unconditional:
            why = "it is set inside a function" if cmd.in_function else \
                "it is set inside a conditional or compound command"
            for a, _app, _p in assigns + [x for w in rest[1:] if (x := _assignment(w, src, text))]:
                self.forget(a.name, why, cmd, src, cmd.in_function)
        elif not rest:
            for a, app, parts in assigns:
                self.assign(a, app, parts)
            return
        elif name in ("export", "readonly") and not assigns:
            for w in rest[1:]:
                x = _assignment(w, src, text)
                if x:
                    self.assign(*x)
                if name == "readonly":
                    n = x[0].name if x else w.literal() or ""
                    self.forget(n, "it is made read-only", cmd, src, True)
            return
        elif name == "unset" and not assigns:
            for w in rest[1:]:
                if (n := w.literal() or "") and not n.startswith("-"):
                    self.forget(n, "it is unset", cmd, src)
            return
        else:
            for a, _app, _p in assigns:
                self.forget(a.name, "it is set for one command only", cmd, src)
        self.effects(cmd, name, rest, src)

    def effects(self, cmd: Command, name: str | None, rest: list[Word], src: int) -> None:
        """What a command other than an assignment may do to the variables."""
        if not rest:
            return
        if name is None or name in _SOURCING:
            what = "a command named by an expansion" if name is None else f"`{name}`"
            self.s.everything = f"the variables cannot be known: {what} at {self.s.where((src, cmd.start))}"
        elif name in _SETTERS or name in ("export", "readonly"):
            text = self.s.sources[src].data.decode("latin-1")
            for w in rest[1:]:
                for m in _IDENT.finditer(text, w.start, w.end):
                    self.forget(m.group(), f"`{name}` may set it", cmd, src)


def _uses(state: Sourced, src: int, words: list[Word]) -> None:
    for w in words:
        for p in w.parts:
            names = [p.name] if isinstance(p, Var) else \
                [m.group() for m in _IDENT.finditer(p.body)] if isinstance(p, Opaque) else []
            for n in names:
                state.uses.setdefault(n, []).append((src, w.start))


def source_all(sources: list[Source]) -> Sourced:
    """Every variable after sourcing `sources` in order (see the module doc)."""
    state = Sourced(list(sources))
    run = _Run(state)
    for src, source in enumerate(sources):
        text = source.data.decode("latin-1")
        try:
            cmds, words = parse(text)
        except ShellSyntaxError as e:
            state.everything = f"{source.name} cannot be read as sh: {e}"
            return state
        _uses(state, src, words)
        for cmd in cmds:
            run.command(cmd, src, text)
    return state


def quote(value: str) -> str:
    """`value` as one double-quoted sh word that gives exactly `value`."""
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in value) + '"'


def _check_edit(s: Sourced, name: str) -> Assignment | None:
    why = s.why(name)
    if why:
        raise ShellEditError(why if why.startswith(name) else f"{name} cannot be edited safely: {why}")
    a = s.counting.get(name)
    if a is not None and a.value_start < 0:
        raise ShellEditError(f"{name} cannot be edited safely: a line continuation inside its name ({s.where(a)})")
    after = (a.source, a.end) if a else (0, len(s.sources[0].data))
    for use in s.uses.get(name, []):
        inside = a is not None and use[0] == a.source and a.start <= use[1] < a.end
        if use >= after and not inside:
            raise ShellEditError(f"{name} cannot be edited safely: ${name} is used after the line that sets it "
                                 f"({s.where(use)})")
    return a


def edit(sources: list[Source], new: dict[str, str]) -> list[bytes]:
    """The files with each variable of `new` given its value (see the module doc)."""
    s = source_all(sources)
    texts = [src.data.decode("latin-1") for src in sources]
    cuts: list[list[tuple[int, int, str]]] = [[] for _ in sources]
    appended = []
    for name, value in new.items():
        if s.value(name) == value:
            continue
        a = _check_edit(s, name)
        if a is None:
            appended.append(f"{name}={quote(value)}\n")
        else:
            cuts[a.source].append((a.value_start, a.end, quote(value)))
    if appended:
        head = texts[0]
        if head.endswith("\\") and not head.endswith("\\\\"):
            raise ShellEditError(f"{sources[0].name} ends with a backslash: add the assignment by hand")
        cuts[0].append((len(head), len(head), ("" if not head or head.endswith("\n") else "\n") + "".join(appended)))
    out = []
    for text, edits in zip(texts, cuts):
        for start, end, repl in sorted(edits, reverse=True):
            text = text[:start] + repl + text[end:]
        out.append(text.encode("latin-1"))
    check = source_all([Source(src.name, data) for src, data in zip(sources, out)])
    wrong = [n for n, v in new.items() if check.value(n) != v]
    if wrong:
        raise ShellEditError(f"editing {', '.join(wrong)} would not give the intended value: edit it by hand")
    return out
