"""`nodeconsole` with only the console's own options starts the console without building every
subcommand's parser (a start-up cost); a subcommand word, --help or an unknown word still builds them."""
from __future__ import annotations

import pytest

from nodeconsole.console import cli


@pytest.mark.parametrize(("argv", "wanted"), [
    ([], False),
    (["--demo"], False),
    (["--interval", "2", "--theme", "light", "--demo"], False),
    (["--interval=2", "--fleet", "http://prom:9090"], False),
    (["--root", "/srv/capture", "--libvirt", "test:///x.xml"], False),
    (["--replay", "snapshot"], False),  # a value that looks like a subcommand is still a value
    (["snapshot", "--json"], True),
    (["--demo", "doctor"], True),
    (["--help"], True),
    (["-h"], True),
    (["frobnicate"], True),  # unknown word: the full parser says which commands there are
    (["--interval"], False),  # a missing value: argparse says so
])
def test_which_command_lines_name_a_subcommand(argv, wanted):
    assert cli._wants_subcommand(argv) is wanted


def test_the_console_gets_its_options_without_the_subcommands(monkeypatch):
    built = []
    real = cli.build_parser

    def spy(load: bool = True, more=None):
        built.append(load)
        return real(load=load, more=more)

    monkeypatch.setattr(cli, "build_parser", spy)
    seen, loaded = [], []
    assert cli.main(["--interval", "2", "--theme", "light", "--demo"], console=lambda a: seen.append(a) or 0,
                    more=lambda: loaded.append(True)) == 0
    assert built == [False] and loaded == []  # not even the change subcommands of actions/cli/
    assert seen[0].interval == 2 and seen[0].theme == "light" and seen[0].demo and seen[0].command is None


def test_an_unknown_word_is_still_an_error_naming_the_commands(capsys):
    assert cli.main(["frobnicate"], console=lambda a: 0) == 2
    err = capsys.readouterr().err
    assert "frobnicate" in err and "snapshot" in err
