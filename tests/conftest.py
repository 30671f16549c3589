"""Shared fixtures, and the hermetic test environment.

Hermetic: before anything is collected, the environment that could leak from the machine running the
suite is replaced: `HOME` and `XDG_*` point into a fresh temporary directory, the time zone and locale
are fixed, pci.ids is the built-in table (device names never depend on what is installed), and
variables that the console or its checks read (NCCL_*, SSH_*, SUDO_*, terminal size, colour switches,
the demo state directory) are removed. Subprocesses inherit the same environment. Run in parallel
(pytest-xdist, scripts/test.sh), each worker makes its own temporary HOME.

`shared_dir` finds the project's reference material (../shared from the repo root,
or $NODECONSOLE_SHARED): in a user's clone without it, dependent tests skip and say so; in CI (env CI
set) its absence is a failure, never a silent skip."""
from __future__ import annotations

import importlib.abc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_HERMETIC_HOME: Path | None = None
_DROP_PREFIXES = ("NCCL_", "SSH_", "SUDO_", "XDG_", "LC_", "TEXTUAL", "NODECONSOLE_", "LIBVIRT_", "VIRSH_", "OMPI_",
                  "PMIX_")
_DROP = {"COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TMUX", "TMUX_PANE", "LANGUAGE",
         "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "MAIL", "USER", "LOGNAME"}
# TEXTUAL_SNAPSHOT_TEMPDIR: where pytest-textual-snapshot's parallel workers leave their results for the
# controller's report (set by the controller, for its workers).
_KEEP = {"NODECONSOLE_SHARED", "TEXTUAL_SNAPSHOT_TEMPDIR"}
_END_NOTES = pytest.StashKey[dict[str, list[str]]]()


class _RepoFoldersAreNotPackages(importlib.abc.MetaPathFinder):
    """The repository root is on sys.path while testing (for `tests.*`), which would let `console`,
    `actions`, `screens` and `themes` import as top-level packages beside `nodeconsole.*` (two copies of
    every module). Refuse them, so a stray old-style import fails loudly here instead of at a user's."""

    NAMES = {"console", "actions", "screens", "themes"}

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.NAMES:
            raise ImportError(f"import nodeconsole.{fullname}, not {fullname}: the repository's folders "
                              f"install under the one package `nodeconsole`")
        return None


def hermetic_environ(home: Path) -> dict[str, str]:
    """The environment every test (and every subprocess a test starts) runs with."""
    env = {k: v for k, v in os.environ.items()
           if k in _KEEP or not (k in _DROP or k.startswith(_DROP_PREFIXES))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".local/state"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_DATA_HOME=str(home / ".local/share"),
               TZ="UTC", LANG="C.UTF-8", LC_ALL="C.UTF-8", NODECONSOLE_PCI_IDS="")
    return env


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--stock-textual", action="store_true",
                     help="draw with stock Textual (NODECONSOLE_STOCK_TEXTUAL=1, screens/rendering.py): the "
                          "tests marked fast_textual, which test the fast paths through the app, are deselected")


def pytest_configure(config: pytest.Config) -> None:
    global _HERMETIC_HOME
    sys.meta_path.insert(0, _RepoFoldersAreNotPackages())
    _HERMETIC_HOME = Path(tempfile.mkdtemp(prefix="nodeconsole-test-home-"))
    env = hermetic_environ(_HERMETIC_HOME)
    if config.getoption("stock_textual"):  # the rendering mode is the run's, never the machine's
        env["NODECONSOLE_STOCK_TEXTUAL"] = "1"
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    # Property tests keep no example database between runs: what an earlier run on this machine found
    # must not change what this run tests.
    from hypothesis import settings
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(str(_HERMETIC_HOME / ".hypothesis"))  # its caches too: not in the checkout
    settings.register_profile("hermetic", database=None)
    settings.load_profile("hermetic")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _HERMETIC_HOME is not None:
        shutil.rmtree(_HERMETIC_HOME, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `-n N --dist loadgroup` (scripts/test.sh), the tests on the real libvirtd run in one worker:
    that worker starts the one daemon (a session fixture) and the tests take turns with its guests.
    SVG snapshot tests are labelled in their reports, for the count at the end of a run split over workers.
    With --stock-textual the tests of the fast paths through the app (marked fast_textual) are deselected
    (reported as such, not passed): the app has none."""
    if config.getoption("stock_textual"):
        fast = [item for item in items if item.get_closest_marker("fast_textual")]
        if fast:
            config.hook.pytest_deselected(items=fast)
            items[:] = [item for item in items if not item.get_closest_marker("fast_textual")]
    for item in items:
        if item.get_closest_marker("real_libvirtd"):
            item.add_marker(pytest.mark.xdist_group("real_libvirtd"))
        if "snap_compare" in getattr(item, "fixturenames", ()):
            item.user_properties.append(("svg_snapshot", True))


def _distributed_controller(config: pytest.Config) -> bool:
    """This process hands the tests to pytest-xdist workers (`-n N`, N > 0) and runs none itself."""
    return not hasattr(config, "workerinput") and config.getoption("dist", default="no") != "no"


def end_of_run_note(config: pytest.Config, heading: str, line: str) -> None:
    """A line shown under `heading` in the summary at the end of the run. With `-n N` it is written in a
    worker and shown by the controller (sent along when the worker finishes)."""
    config.stash.setdefault(_END_NOTES, {}).setdefault(heading, []).append(line)


@pytest.hookimpl(trylast=True)  # after the last session fixture's teardown, which may add a note
def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["nodeconsole_end_notes"] = session.config.stash.get(_END_NOTES, {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # pytest-xdist, in the controller: a worker finished
    for heading, lines in getattr(node, "workeroutput", {}).get("nodeconsole_end_notes", {}).items():
        for line in lines:
            end_of_run_note(node.config, heading, line)


def pytest_terminal_summary(terminalreporter) -> None:
    # syrupy's own count ("snapshot report summary") sees only its process's tests: none in the
    # controller of a distributed run. The Textual snapshot report of any differences prints either way.
    counts: dict[str, int] = {}
    if _distributed_controller(terminalreporter.config):
        for outcome in ("passed", "failed", "skipped"):
            reports = terminalreporter.stats.get(outcome, [])
            n = sum(1 for r in reports if getattr(r, "when", None) == "call"
                    and any(prop[0] == "svg_snapshot" for prop in r.user_properties))
            if n:
                counts[outcome] = n
    if counts:
        terminalreporter.write_sep("-", "snapshot report summary")
        terminalreporter.write_line(" ".join(f"{n} snapshot{'s' * (n != 1)} {outcome}."
                                             for outcome, n in counts.items()))
    for heading, lines in terminalreporter.config.stash.get(_END_NOTES, {}).items():
        terminalreporter.write_sep("-", heading)
        for line in lines:
            terminalreporter.write_line(line)


def _shared_path() -> Path:
    env = os.environ.get("NODECONSOLE_SHARED")
    return Path(env) if env else REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_path()
    if not (path / "REFERENCE.md").exists():
        msg = (f"reference material not found at {path} (the ../shared folder beside the repo, or "
               f"$NODECONSOLE_SHARED); tests that compare against real captured hosts need it")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


# A demo host shared by the tests of one module that only read it (each asserts it changed nothing).
@pytest.fixture(scope="module")
def _shared(tmp_path_factory) -> Path:
    from nodeconsole.console.demo.state import ensure_demo

    d = tmp_path_factory.mktemp("shared") / "demo"
    ensure_demo(d)
    return d


@pytest.fixture
def state_ro(_shared, monkeypatch) -> Path:
    """A demo shared by the tests of one module that must change nothing (each asserts that it did not
    or only reads)."""
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(_shared))
    return _shared


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    """A private demo host (state directory) for CLI tests that run `nodeconsole ... --demo` and change it."""
    from nodeconsole.console.demo.state import ensure_demo

    d = tmp_path / "demo"
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(d))
    ensure_demo(d)
    return d
