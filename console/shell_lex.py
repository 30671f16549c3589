"""A POSIX sh lexer for configuration files that are sourced (/etc/default/grub and its grub.d snippets):
words with their quoting resolved, operators, comments dropped. Enough of the shell to find assignments
and what they give, never to run anything.

Text is a `str` decoded from bytes as Latin-1 (one character per byte), so every offset is a byte offset
and an edit re-encodes to exactly the bytes it did not touch.

A word is a list of parts: `Lit(text, quoted)` (quote removal and backslashes done, line continuations
dropped), `Var(name)` for `$NAME` / `${NAME}`, and `Opaque(why, body)` for what only running the shell
could tell (command substitution, `${X:-…}`, special parameters, `$'…'`). Scanning is linear: runs of
ordinary characters are taken by single-quantifier regexes, quotes and substitutions by `str.find` and
one forward scan each.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

_PLAIN = re.compile(r"[^ \t\n\"'\\$`;&|()<>]+")
_DQ_PLAIN = re.compile(r'[^"\\$`]+')
_DQ_ESCAPES = re.compile(r"(?:\\[\s\S])+")
_DQ_UNESCAPE = re.compile(r'\\(\n)|\\([$`"\\])')  # `\` newline: nothing; `\$`: `$`; other `\x` stay
_DQ_ESCAPABLE = frozenset('$`"\\\n')
_ESCAPES = re.compile(r"(?:\\[^\n])+")
_SQ_RUN = re.compile(r"(?:'[^']*')+")
_BLANKS = re.compile(r"[ \t]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]+")
# Longest first: the first that matches at a position is the operator
_OPS = ("&&", "||", ";;&", ";;", ";&", "|&", "&>>", "&>", "<<<", "<<-", "<<", "<&", "<>", ">>", ">&", ">|",
        "&", "|", ";", "(", ")", "<", ">", "\n")
_OPS_BY_CHAR = {c: tuple(o for o in _OPS if o[0] == c) for c in {o[0] for o in _OPS}}
REDIRECTS = frozenset(("&>>", "&>", "<<<", "<&", "<>", ">>", ">&", ">|", "<", ">"))


class ShellSyntaxError(ValueError):
    """The text is not something the lexer can follow (unterminated quote, here-document…)."""


@dataclass(frozen=True, slots=True)
class Lit:
    text: str
    quoted: bool


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Opaque:
    why: str
    body: str = ""


Part = Lit | Var | Opaque


@dataclass(slots=True)
class Word:
    start: int
    end: int
    line: int
    parts: list[Part] = field(default_factory=list)

    def literal(self) -> str | None:
        """The word's text when it holds no expansion, else None."""
        if all(isinstance(p, Lit) for p in self.parts):
            return "".join(p.text for p in self.parts if isinstance(p, Lit))
        return None

    def plain(self) -> str | None:
        """The word's text when it is one unquoted literal (reserved words, names), else None."""
        if len(self.parts) == 1 and isinstance(self.parts[0], Lit) and not self.parts[0].quoted:
            return self.parts[0].text
        return None


@dataclass(frozen=True, slots=True)
class Op:
    text: str
    start: int
    line: int


Token = Word | Op


def _add_lit(parts: list[Part], text: str, quoted: bool) -> None:
    if text:
        parts.append(Lit(text, quoted))


def _merged(parts: list[Part]) -> list[Part]:
    """Adjacent literals of the same quoting as one (joined once: linear)."""
    out: list[Part] = []
    run: list[str] = []
    quoted = False
    for p in parts:
        if isinstance(p, Lit) and run and p.quoted == quoted:
            run.append(p.text)
            continue
        if run:
            out.append(Lit("".join(run), quoted))
            run = []
        if isinstance(p, Lit):
            run, quoted = [p.text], p.quoted
        else:
            out.append(p)
    if run:
        out.append(Lit("".join(run), quoted))
    return out


def _skip_parens(text: str, i: int) -> int:
    """The index after the `)` closing the `(` just before `i` (quotes and nesting followed)."""
    depth = 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                break
            i = j + 1
            continue
        if c == '"':
            i = _skip_dquote(text, i + 1)
            continue
        if c == "`":
            i = _skip_backtick(text, i + 1)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellSyntaxError("unterminated $( … )")


def _skip_dquote(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "`":
            i = _skip_backtick(text, i + 1)
        elif text.startswith("$(", i):
            i = _skip_parens(text, i + 2)
        else:
            i += 1
    raise ShellSyntaxError("unterminated double quote")


def _skip_backtick(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "`":
            return i + 1
        else:
            i += 1
    raise ShellSyntaxError("unterminated backquote")


def _skip_braces(text: str, i: int) -> int:
    """The index after the `}` closing `${` (i is after the brace)."""
    depth = 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"':
            i = _skip_dquote(text, i + 1)
            continue
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellSyntaxError("unterminated ${ … }")


def _dollar(text: str, i: int, parts: list[Part], in_dquote: bool) -> int:
    """One `$…` at `i`: appends its part, returns the index after it."""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if text.startswith("$((", i):
        end = _skip_parens(text, i + 2)
        parts.append(Opaque("arithmetic expansion", text[i:end]))
        return end
    if nxt == "(":
        end = _skip_parens(text, i + 2)
        parts.append(Opaque("command substitution", text[i:end]))
        return end
    if nxt == "{":
        m = _NAME.match(text, i + 2)
        if m and text.startswith("}", m.end()):
            parts.append(Var(m.group()))
            return m.end() + 1
        end = _skip_braces(text, i + 2)
        parts.append(Opaque("a ${…} expansion with an operator", text[i:end]))
        return end
    m = _NAME.match(text, i + 1)
    if m:
        parts.append(Var(m.group()))
        return m.end()
    if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
        parts.append(Opaque("a special parameter", text[i:i + 2]))
        return i + 2
    if nxt in ("'", '"') and not in_dquote:
        parts.append(Opaque("bash-only $'…' or $\"…\" quoting"))
        return i + 1  # the quotes that follow are read as ordinary quotes (the word stays opaque)
    _add_lit(parts, "$", in_dquote)
    return i + 1


def _dquote(text: str, i: int, parts: list[Part]) -> int:
    """The inside of a double-quoted string starting at `i` (after the quote)."""
    n = len(text)
    while True:
        if i >= n:
            raise ShellSyntaxError("unterminated double quote")
        m = _DQ_PLAIN.match(text, i)
        if m:
            _add_lit(parts, m.group(), True)
            i = m.end()
            continue
        m = _DQ_ESCAPES.match(text, i)
        if m:  # a run of `\x` pairs: when every x is one a backslash escapes, the x's (C speed)
            run = m.group()
            plain = run[1::2]
            escapable = _DQ_ESCAPABLE.issuperset(plain)
            _add_lit(parts, plain.replace("\n", "") if escapable else _DQ_UNESCAPE.sub(r"\2", run), True)
            i = m.end()
            continue
        c = text[i]
        if c == '"':
            return i + 1
        if c == "\\":  # at the very end of the text
            raise ShellSyntaxError("unterminated double quote")
        if c == "$":
            i = _dollar(text, i, parts, True)
        else:  # backquote
            end = _skip_backtick(text, i + 1)
            parts.append(Opaque("command substitution", text[i:end]))
            i = end


def _word(text: str, i: int, line: int) -> tuple[Word, int]:
    word = Word(i, i, line)
    parts = word.parts
    n = len(text)
    while i < n:
        m = _PLAIN.match(text, i)
        if m:
            _add_lit(parts, m.group(), False)
            i = m.end()
            continue
        c = text[i]
        if c == "'":
            q = _SQ_RUN.match(text, i)
            if q is None:
                raise ShellSyntaxError(f"line {line}: unterminated single quote")
            _add_lit(parts, q.group().replace("'", ""), True)  # 'a''b': the quotes out, nothing else
            i = q.end()
        elif c == '"':
            i = _dquote(text, i + 1, parts)
        elif c == "\\":
            e = _ESCAPES.match(text, i)
            if e:
                _add_lit(parts, e.group()[1::2], True)  # `\x` pairs: the x's
                i = e.end()
            elif i + 1 >= n:
                _add_lit(parts, "\\", False)
                i += 1
            else:  # a line continuation
                i += 2
        elif c == "$":
            i = _dollar(text, i, parts, False)
        elif c == "`":
            end = _skip_backtick(text, i + 1)
            parts.append(Opaque("command substitution", text[i:end]))
            i = end
        else:
            break
    word.end = i
    word.parts = _merged(parts)
    return word, i


def tokens(text: str) -> list[Token]:
    """The words and operators of `text` (comments dropped). ShellSyntaxError for what cannot be
    followed: unterminated quotes or substitutions, here-documents."""
    return list(iter_tokens(text))


def iter_tokens(text: str) -> Iterator[Token]:
    """tokens(), one at a time (a parser stops at the first error without lexing the rest)."""
    i, n, line = 0, len(text), 1
    at_start = True  # a `#` here starts a comment
    while i < n:
        m = _BLANKS.match(text, i)
        if m:
            i, at_start = m.end(), True
            continue
        if text.startswith("\\\n", i):
            i, line = i + 2, line + 1
            continue
        c = text[i]
        if c == "#" and at_start:
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        op = next((o for o in _OPS_BY_CHAR.get(c, ()) if text.startswith(o, i)), None)
        if op is not None:
            if op in ("<<", "<<-"):
                raise ShellSyntaxError(f"line {line}: a here-document")
            yield Op(op, i, line)
            i += len(op)
            line += op == "\n"
            at_start = True
            continue
        d = _DIGITS.match(text, i)
        if d and text.startswith(("<", ">"), d.end()):
            i = d.end()  # a redirection's file descriptor number
            continue
        word, end = _word(text, i, line)
        line += text.count("\n", i, end)
        yield word
        i, at_start = end, False
