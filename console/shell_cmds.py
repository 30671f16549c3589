"""The simple commands of a sourced sh file, each with whether it surely runs in the sourcing shell.

Built on console/shell_lex.py's tokens. A command is "unconditional" when it stands at the top level of
the file, outside any compound command (`if`, `case`, loops, `{ }`, `( )`, function bodies), is not the
second part of `&&` / `||`, not part of a pipeline (whose parts run in subshells), not negated with `!`
and not run in the background (`&`). Only those can be trusted to set a variable for the next line.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nodeconsole.console.shell_lex import REDIRECTS, Op, ShellSyntaxError, Word, iter_tokens

_OPENERS = {"if": "fi", "while": "done", "until": "done", "for": "done", "select": "done", "case": "esac",
            "{": "}", "[[": "]]"}
_CLOSERS = frozenset(_OPENERS.values())
_KEEP = frozenset(("then", "else", "elif", "do", "time"))


@dataclass
class Command:
    """One simple command: its words (redirection targets left out), where it stands."""
    words: list[Word]
    unconditional: bool
    in_function: bool
    start: int


@dataclass
class _Frame:
    kind: str  # the word that closes it ("fi", "done", "esac", "}", "]]", ")")
    function: bool = False
    state: str = ""  # case: "head", "pattern", "body"; for: "head" until `do`


@dataclass
class _Parser:
    commands: list[Command] = field(default_factory=list)
    stack: list[_Frame] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    andor: list[Command] = field(default_factory=list)  # the commands of the and-or list so far
    linked: bool = False  # the next command follows && || | (or is negated)
    redirect: bool = False  # the next word is a redirection target
    function_next: bool = False  # the next compound command is a function body
    function_name: bool = False  # the next word is the name after `function`

    def end_command(self, pipe_after: bool = False) -> None:
        if not self.words:
            return
        free = not self.stack and not self.linked and not pipe_after
        cmd = Command(self.words, free, any(f.function for f in self.stack), self.words[0].start)
        self.commands.append(cmd)
        self.andor.append(cmd)
        self.words = []

    def push(self, kind: str, state: str = "") -> None:
        self.stack.append(_Frame(kind, self.function_next, state))
        self.function_next = False

    def pop(self, closer: str, line: int) -> None:
        if not self.stack or self.stack[-1].kind != closer:
            raise ShellSyntaxError(f"line {line}: unexpected {closer!r}")
        self.stack.pop()

    def word(self, w: Word) -> None:
        top = self.stack[-1] if self.stack else None
        plain = w.plain()
        if self.redirect:
            self.redirect = False
            return
        if top is not None and top.kind == "]]":
            if plain == "]]":
                self.stack.pop()
            return
        if top is not None and top.kind == "esac" and top.state in ("head", "pattern"):
            if top.state == "head" and plain == "in":
                top.state = "pattern"
            elif top.state == "pattern" and plain == "esac":
                self.stack.pop()
            return
        if top is not None and top.kind == "done" and top.state == "head":
            if plain == "do" and not self.words:
                top.state = ""
            return
        if self.function_name:
            self.function_name = False
            self.function_next = True
            return
        if self.words or plain is None:
            self.words.append(w)
            return
        self.reserved(plain, w)

    def reserved(self, plain: str, w: Word) -> None:
        if plain in _OPENERS:
            self.push(_OPENERS[plain], "head" if plain in ("case", "for", "select") else "")
        elif plain in _CLOSERS:
            self.pop(plain, w.line)
        elif plain == "!":
            self.linked = True
        elif plain == "function":
            self.function_name = True
        elif plain not in _KEEP:
            self.words.append(w)

    def op(self, o: Op) -> None:
        t = o.text
        top = self.stack[-1] if self.stack else None
        if top is not None and top.kind == "]]":
            return
        if t in REDIRECTS:
            self.redirect = True
            return
        if top is not None and top.kind == "esac" and top.state in ("head", "pattern"):
            if t == ")" and top.state == "pattern":
                top.state = "body"
            return
        if t == "(":
            if len(self.words) == 1 and self.words[0].plain() is not None:  # name() { … }
                self.words = []
                self.function_next = True
                self.push(")")
                self.stack[-1].state = "fname"
            elif not self.words:
                self.push(")")
            else:
                raise ShellSyntaxError(f"line {o.line}: unexpected '('")
            return
        if t == ")":
            self.end_command()
            fname = bool(self.stack) and self.stack[-1].state == "fname"
            self.pop(")", o.line)
            if fname:
                self.function_next = True
            return
        self.separator(t, top)

    def separator(self, t: str, top: _Frame | None) -> None:
        if t in ("|", "|&"):
            self.end_command(pipe_after=True)
            for c in self.andor[-1:]:
                c.unconditional = False
            self.linked = True
        elif t in ("&&", "||"):
            self.end_command()
            self.linked = True
        else:  # ; & newline ;; ;& ;;&
            if t in (";;", ";&", ";;&") and (top is None or top.kind != "esac"):
                raise ShellSyntaxError(f"unexpected {t!r} outside a case")
            self.end_command()
            if t == "&":
                for c in self.andor:
                    c.unconditional = False
            self.andor = []
            self.linked = False
            if t in (";;", ";&", ";;&") and top is not None and top.kind == "esac":
                top.state = "pattern"


# A boot loader's configuration holds a few dozen commands: a file of more is refused as soon as it
# passes this many (bounded time on a hostile file: a 1 MiB line of `;A=1` is refused in a fraction of
# a second instead of read in ~5 s).
MAX_COMMANDS = 10_000


def parse(text: str) -> tuple[list[Command], list[Word]]:
    """The simple commands of `text` in order, and every word of it (those of compound commands' heads
    and redirections included). ShellSyntaxError when the lexer cannot follow the text or a compound
    command is left open at the end."""
    p = _Parser()
    words = []
    for t in iter_tokens(text):
        if isinstance(t, Word):
            words.append(t)
            p.word(t)
        else:
            p.op(t)
            if len(p.commands) > MAX_COMMANDS:
                raise ShellSyntaxError(f"more than {MAX_COMMANDS:,} commands: not a configuration nodeconsole "
                                       "edits (set it by hand)")
    p.end_command()
    if p.stack:
        raise ShellSyntaxError(f"{p.stack[-1].kind!r} missing at the end")
    return p.commands, words
