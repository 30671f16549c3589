"""The built wheel, installed into a fresh virtual environment, adds exactly one top-level import
package (`nodeconsole`) and runs from there: `nodeconsole snapshot --demo --json` and the console itself
in a real terminal. Built offline (no build isolation) from a copy of the source, so the checkout stays
clean; the fresh environment borrows only the third-party dependencies of the test environment."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.terminal import Term, need_tmux

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "console", "screens", "actions", "themes")


def _run(*args: str | Path, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=240, **kw)


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> tuple[Path, set[str]]:
    """(the fresh venv, what installing the wheel added to its site-packages)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                 "-w", tmp / "dist", src)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("nodeconsole-*.whl")

    venv = tmp / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    site = Path(_run(venv / "bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())
    # the dependencies (textual, pynvml, libvirt, psutil, rich) of the test environment; its .pth files
    # (the editable nodeconsole among them) are not processed from a path added this way
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    before = {p.name for p in site.iterdir()}
    installed = _run(sys.executable, "-m", "pip", "--python", venv / "bin/python", "install", "--no-deps",
                     "--no-index", "--disable-pip-version-check", wheel)
    assert installed.returncode == 0, installed.stderr
    return venv, {p.name for p in site.iterdir()} - before


def test_wheel_adds_one_top_level_package(wheel_env):
    venv, added = wheel_env
    assert {a for a in added if not a.endswith(".dist-info")} == {"nodeconsole"}
    assert {a for a in added if a.endswith(".dist-info")} == {"nodeconsole-0.1.0.dist-info"}
    (site,) = {p.parent for p in venv.glob("lib/python*/site-packages/nodeconsole")}
    pkg = site / "nodeconsole"
    assert sorted(p.name for p in pkg.iterdir()) == ["actions", "console", "screens", "themes"]
    assert (pkg / "themes" / "nodeconsole.tcss").is_file()
    # every package of the checkout is in the wheel
    for init in REPO.glob("*/**/__init__.py"):
        rel = init.relative_to(REPO)
        if rel.parts[0] in SOURCES:
            assert (pkg / rel).is_file(), f"{rel} is missing from the wheel"
    # and nothing else entered the environment's import namespace
    top = _run(venv / "bin/python", "-c", "import nodeconsole.console as c; print(c.__file__)", cwd=venv)
    assert top.returncode == 0, top.stderr
    assert top.stdout.strip() == str(pkg / "console" / "__init__.py")


def test_wheel_snapshot_demo_json(wheel_env, tmp_path):
    venv, _ = wheel_env
    out = _run(venv / "bin/nodeconsole", "snapshot", "--demo", "--json", cwd=tmp_path,
               env={**os.environ, "NODECONSOLE_STATE_DIR": str(tmp_path / "demo")})
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert snap["schema"] == 1
    assert len(snap["gpus"]) == 10
    assert all(v == "ok" for v in snap["sources"].values()), snap["sources"]


def test_wheel_console_in_a_terminal(wheel_env, tmp_path):
    venv, _ = wheel_env
    term = Term(need_tmux(), f"nc-wheel-{uuid.uuid4().hex[:8]}")
    cmd = (f"cd {tmp_path} && NODECONSOLE_STATE_DIR={tmp_path / 'demo'} TERM=xterm-256color "
           f"{venv / 'bin/nodeconsole'} --demo")
    term.run("new-session", "-d", "-x", "80", "-y", "24", cmd)
    try:
        text = term.wait_for("Overview", "0000:bb:00.0", "vfio→train", timeout=40)
        assert "Problems" in text
        term.run("send-keys", "4")
        term.wait_for("Address", "enabled 3GI")  # the GPUs screen, styled by the shipped theme file
        term.run("send-keys", "q")
        end = time.monotonic() + 10
        while term.alive() and time.monotonic() < end:
            time.sleep(0.1)
        assert not term.alive(), "q did not quit the console"
    finally:
        term.run("kill-server")

