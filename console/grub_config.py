"""GRUB's kernel command line as grub-mkconfig sees it, and its edit (console/shell_assign.py underneath).

grub-mkconfig sources /etc/default/grub, then every /etc/default/grub.d/*.cfg; the kernel of a normal
boot entry gets GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT. The snippets are taken in C (byte)
order: the shell's glob sorts by the locale's collation, which can differ from byte order in other
locales (`a-b.cfg` vs `a_b.cfg`, upper vs lower case); name snippets so that both orders agree.

The words of a value are split as the kernel splits its command line: at blanks outside double quotes
(`acpi_osi="Windows 2015"` is one word). An edit adds words at the end of GRUB_CMDLINE_LINUX_DEFAULT and
removes words (and words of the same name with another value: `intel_iommu=off` when `intel_iommu=on` is
added) from both variables, in whichever file sets each one last.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from nodeconsole.console.root import Root
from nodeconsole.console.shell_assign import ShellEditError, Source, edit, source_all

GRUB_DEFAULT = "etc/default/grub"
GRUB_D = "etc/default/grub.d"
LINUX = "GRUB_CMDLINE_LINUX"
DEFAULT = "GRUB_CMDLINE_LINUX_DEFAULT"
_UNQUOTED = re.compile(r'[^ \t\n\r\f\v"]+')
_BLANK = re.compile(r"[ \t\n\r\f\v]+")

__all__ = ["ShellEditError", "GrubCmdline", "edit_words", "flag_name", "grub_files", "grub_sources"]


def flag_name(word: str) -> str:
    """A command-line word's name: `intel_iommu=on` → `intel_iommu`, `iommu=pt` → `iommu`."""
    return word.split("=", 1)[0]


def edit_words(words: list[str], add: list[str], remove: list[str]) -> list[str]:
    """Command-line words with `add` set (a word replaces any word of the same name) and `remove`
    dropped (a bare name in `remove` drops every word of that name)."""
    out = list(words)
    for r in remove:
        out = [w for w in out if w != r and not ("=" not in r and flag_name(w) == r)]
    for a in add:
        name = flag_name(a)
        out = [w for w in out if flag_name(w) != name or ("=" not in a and w == a)]
        if a not in out:
            out.append(a)
    return out


def kernel_words(value: str) -> list[str]:
    """`value` split as the kernel splits its command line (blanks outside double quotes)."""
    out: list[str] = []
    cur: list[str] = []
    i, n = 0, len(value)
    while i < n:
        m = _UNQUOTED.match(value, i)
        if m:
            cur.append(m.group())
            i = m.end()
        elif value[i] == '"':
            j = value.find('"', i + 1)
            j = n - 1 if j < 0 else j
            cur.append(value[i:j + 1])
            i = j + 1
        else:
            if cur:
                out.append("".join(cur))
                cur = []
            i = _BLANK.match(value, i).end()  # type: ignore[union-attr]
    if cur:
        out.append("".join(cur))
    return out


def grub_files(root: Root) -> list[str]:
    """/etc/default/grub then the grub.d snippets, in the order grub-mkconfig sources them (C order;
    hidden names are not matched by `*.cfg`)."""
    names = [n for n in root.listdir(GRUB_D) if n.endswith(".cfg") and not n.startswith(".")]
    names.sort(key=lambda n: n.encode("utf-8", "surrogateescape"))
    return [GRUB_DEFAULT] + [f"{GRUB_D}/{n}" for n in names if root.exists(f"{GRUB_D}/{n}")]


def grub_sources(root: Root) -> list[Source] | None:
    """The files' bytes (None when /etc/default/grub is absent; an unreadable snippet is left out)."""
    out = []
    for rel in grub_files(root):
        data = root.read_bytes(rel)
        if data is None and rel == GRUB_DEFAULT:
            return None
        if data is not None:
            out.append(Source(f"/{rel}", data))
    return out


@dataclass(frozen=True)
class GrubCmdline:
    """The two variables' words, or why they cannot be known."""
    linux: tuple[str, ...] | None
    default: tuple[str, ...] | None
    why: str = ""

    @property
    def words(self) -> list[str] | None:
        """GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT (None when either is unknown)."""
        if self.linux is None or self.default is None:
            return None
        return list(self.linux + self.default)

    @classmethod
    def read(cls, sources: list[Source]) -> GrubCmdline:
        s = source_all(sources)
        linux, default = s.value(LINUX), s.value(DEFAULT)
        why = s.why(LINUX) or s.why(DEFAULT)
        return cls(None if linux is None else tuple(kernel_words(linux)),
                   None if default is None else tuple(kernel_words(default)), why)


def split_edit(linux: list[str], default: list[str], add: list[str], remove: list[str]) -> tuple[list[str], list[str]]:
    """The two variables' words after adding `add` (to GRUB_CMDLINE_LINUX_DEFAULT, unless present) and
    removing `remove` and every other value of an added word's name (from both)."""
    for r in remove:
        linux = [w for w in linux if w != r and not ("=" not in r and flag_name(w) == r)]
        default = [w for w in default if w != r and not ("=" not in r and flag_name(w) == r)]
    for a in add:
        name = flag_name(a)
        linux = [w for w in linux if flag_name(w) != name or w == a]
        default = [w for w in default if flag_name(w) != name or w == a]
        if a not in linux and a not in default:
            default.append(a)
    return linux, default


def edit_cmdline(sources: list[Source], add: list[str], remove: list[str]) -> list[bytes]:
    """The files' new bytes (see the module doc); ShellEditError when it cannot be done safely."""
    now = GrubCmdline.read(sources)
    if now.linux is None or now.default is None:
        raise ShellEditError(now.why)
    linux, default = split_edit(list(now.linux), list(now.default), add, remove)
    new = {}
    if linux != list(now.linux):
        new[LINUX] = " ".join(linux)
    if default != list(now.default):
        new[DEFAULT] = " ".join(default)
    if not new:
        return [s.data for s in sources]
    return edit(sources, new)
