"""The sh reader on long paddings (issue 28, linear parsers): the result is right whatever the padding
and its length (the time is benchmarks/bench_grub_tokenizer.py's)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.console.grub_config import GrubCmdline
from nodeconsole.console.shell_assign import Source, quote, source_all

# (padding inside a double-quoted value, what it gives)
PADDINGS = {" ": " ", "a": "a", "\\\\": "\\", '\\"': '"', "\\\n": "", "\\$": "$", "\\x": "\\x", "'": "'"}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(PADDINGS)), st.integers(0, 300_000), st.sampled_from(["", ";GRUB_TIMEOUT=5", " # x"]))
def test_a_long_padding_gives_the_value_the_shell_gives(unit, n, tail):
    data = f'GRUB_CMDLINE_LINUX_DEFAULT="quiet{unit * n}splash"{tail}\n'.encode("latin-1")
    state = source_all([Source("grub", data)])
    assert state.value("GRUB_CMDLINE_LINUX_DEFAULT") == f"quiet{PADDINGS[unit] * n}splash"
    assert state.value("GRUB_TIMEOUT") == ("5" if tail.startswith(";") else "")


@settings(max_examples=30, deadline=None)
@given(st.text(st.characters(min_codepoint=1, max_codepoint=255), max_size=2000))
def test_quote_gives_back_exactly_the_value(value):
    data = ("X=" + quote(value) + ";Y=$X\n").encode("latin-1")
    state = source_all([Source("f", data)])
    assert state.value("X") == value and state.value("Y") == value
    assert state.value("Z") is None and state.value("GRUB_Z") == ""  # never set: only GRUB_ names are empty


def test_long_comment_and_blank_lines_are_skipped():
    data = b"#" + b"\xff" * 1_000_000 + b"\n" + b" \t" * 500_000 + b'\nGRUB_CMDLINE_LINUX="a b"\n'
    assert GrubCmdline.read([Source("grub", data)]).words == ["a", "b"]


def test_a_flood_of_commands_is_refused_and_a_real_file_is_read():
    import pytest

    from nodeconsole.console.shell_cmds import MAX_COMMANDS, ShellSyntaxError, parse

    real = b'GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\n' + b"GRUB_X=1;" * 200 + b'\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    assert GrubCmdline.read([Source("grub", real)]).words == ["quiet"]
    flood = b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"' + b";A=1" * (MAX_COMMANDS + 1) + b"\n"
    with pytest.raises(ShellSyntaxError, match="more than 10,000 commands"):
        parse(flood.decode())
    state = source_all([Source("grub", flood)])
    assert state.everything and "more than 10,000 commands" in state.everything
