"""Property (issue 28, Done when (a)): for random valid sh files (/etc/default/grub and grub.d
snippets: every kind of quoting, escapes, line continuations, comments with non-UTF-8 bytes, `;`-joined
and `export`ed assignments, other variables expanded, conditionals and command substitution for other
variables), the command line bash gives after the edit is the one before plus exactly the flags added or
removed (a conflicting value replaced) and every other GRUB_* variable is unchanged; the reader agrees
with bash before the edit. A refused edit is one whose files hold what we cannot edit safely."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nodeconsole.console.grub_config import GrubCmdline, edit_cmdline
from nodeconsole.console.shell_assign import ShellEditError, Source
from tests.grub_bash import source_grub

WORDS = ("quiet", "splash", "intel_iommu=off", "intel_iommu=on", "iommu=pt", "nomodeset", "console=ttyS0,115200",
         'acpi_osi="Windows 2015"', "pcie_acs_override=downstream,multifunction", "a$b", "x\\y", "it's", "`t`")
TARGETS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
OTHER_LINES = (b"#", b"if ", b"case ", b"  ", b"fi", b"esac", b"GRUB_TIMEOUT", b"GRUB_B", b"GRUB_DISTRIBUTOR", b"GRUB_E",
               b"[ -n")


def _dq(s: str, cont: bool) -> str:
    body = "".join("\\" + c if c in '"\\$`' else c for c in s)
    return '"' + (body.replace(" ", " \\\n", 1) if cont else body) + '"'


def _bare(s: str) -> str:
    return "".join("\\" + c if not (c.isalnum() or c in "=,._-") else c for c in s)


@st.composite
def sh_word(draw, value: str) -> str:
    """`value` as one sh word, quoted one of several ways (split into pieces quoted differently)."""
    if not value:
        return draw(st.sampled_from(['""', "''", ""]))
    cut = draw(st.integers(0, len(value)))
    pieces = [value[:cut], value[cut:]]
    out = []
    for p in pieces:
        if not p:
            continue
        kind = draw(st.sampled_from(["dq", "dqc", "sq", "bare"]))
        if kind == "sq" and "'" not in p:
            out.append(f"'{p}'")
        elif kind == "bare":
            out.append(_bare(p))
        else:
            out.append(_dq(p, kind == "dqc"))
    return "".join(out)


COMMENT = st.binary(max_size=12).map(lambda b: b"# " + b.replace(b"\n", b" ").replace(b"\r", b" "))


@st.composite
def line(draw, targets_ok: bool) -> tuple[bytes, bool]:
    """(a line of sh, whether it is one the editor must refuse to work around)."""
    kind = draw(st.sampled_from(["target", "target", "target", "other", "comment", "blank", "if", "case",
                                 "andor", "subst", "ref", "unsafe"]))
    tail = draw(st.sampled_from([b"", b";GRUB_TIMEOUT=5", b" # c\xe9", b" ;GRUB_A=1 # x"]))
    if kind == "target" and targets_ok:
        name = draw(st.sampled_from(TARGETS))
        value = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))
        prefix = draw(st.sampled_from(["", "export "]))
        ref = draw(st.sampled_from(["", "", f"${name} ", "${GRUB_EXTRA} "]))
        word = ('"' + ref + '"' if ref else "") + draw(sh_word(value))
        return (prefix + f"{name}=" + word).encode("latin-1") + tail + b"\n", False
    if kind == "other":
        return f"GRUB_TIMEOUT={draw(st.integers(0, 9))}".encode() + tail + b"\n", False
    if kind == "comment":
        return draw(COMMENT) + b"\n", False
    if kind == "if":
        return b'if [ -n "$GRUB_TIMEOUT" ]; then\n  GRUB_TIMEOUT_STYLE=menu\nfi\n', False
    if kind == "case":
        return b"case x in\n  x) GRUB_GFXMODE=auto;;\n  *) GRUB_GFXMODE=640x480;;\nesac\n", False
    if kind == "andor":
        return b"GRUB_B=1 && GRUB_C=2 || GRUB_D=3\n", False
    if kind == "subst":
        return b"GRUB_DISTRIBUTOR=`echo Debian`\nGRUB_E=$(echo x)\n", False
    if kind == "ref":
        return b"GRUB_EXTRA='nomodeset'\n", False
    if kind == "unsafe" and targets_ok:
        return f"[ -n x ] && {draw(st.sampled_from(TARGETS))}=quiet\n".encode(), True
    return b"\n", False


@st.composite
def grub_files(draw) -> tuple[list[bytes], bool]:
    files, unsafe = [], False
    for _ in range(draw(st.integers(1, 3))):
        lines = draw(st.lists(line(True), max_size=6))
        unsafe |= any(u for _, u in lines)
        files.append(b"GRUB_EXTRA=''\n" + b"".join(text for text, _ in lines))
    return files, unsafe


def _expected(words: list[str], add: list[str], remove: list[str]) -> list[str]:
    """The words with `remove` gone (a bare name: every value of it), every other value of an added
    flag's name gone, and each added flag appended unless it is there."""
    def name(w: str) -> str:
        return w.split("=", 1)[0]
    out = [w for w in words if not any(w == r or ("=" not in r and name(w) == r) for r in remove)]
    for a in add:
        out = [w for w in out if name(w) != name(a) or w == a]
        out += [] if a in out else [a]
    return out


def _write(tmp: Path, files: list[bytes]) -> list[Source]:
    (tmp / "grub.d").mkdir(exist_ok=True)
    for old in (tmp / "grub.d").iterdir():
        old.unlink()
    (tmp / "grub").write_bytes(files[0])
    for i, data in enumerate(files[1:]):
        (tmp / "grub.d" / f"{i:02d}-x.cfg").write_bytes(data)
    return [Source("/etc/default/grub", files[0])] + [Source(f"/{i}", d) for i, d in enumerate(files[1:])]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(grub_files(), st.lists(st.sampled_from(["intel_iommu=on", "iommu=pt"]), min_size=1, max_size=2, unique=True),
       st.lists(st.sampled_from(["pcie_acs_override", "intel_iommu=off", "nomodeset"]), max_size=2, unique=True))
def test_the_edit_changes_exactly_the_flags(tmp_path, case, add, remove):
    files, unsafe = case
    sources = _write(tmp_path, files)
    before, others, err = source_grub(tmp_path / "grub", tmp_path / "grub.d")
    assert err == b"", err
    read = GrubCmdline.read(sources)
    if not unsafe:
        assert read.words == before, read.why
    try:
        new = edit_cmdline(sources, add, remove)
    except ShellEditError as e:
        assert unsafe, e
        event("refused")
        return
    event("edited" if new != files else "unchanged")
    _write(tmp_path, new)
    after, others_after, err = source_grub(tmp_path / "grub", tmp_path / "grub.d")
    assert err == b"", err
    assert after == _expected(before, add, remove)
    assert others_after == others
    for old, data in zip(files, new):  # every comment line, and every line not setting the two, kept
        kept = [ln for ln in old.split(b"\n") if ln.startswith(OTHER_LINES)]
        assert all(ln in data.split(b"\n") for ln in kept)
        for tail in (b"# c\xe9", b";GRUB_TIMEOUT=5", b" ;GRUB_A=1 # x"):  # what followed on a target's line
            assert data.count(tail) == old.count(tail)
