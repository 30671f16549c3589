"""A real terminal for tests: a private tmux server (its own socket), keys in, screen text out."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest


def need_tmux() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        msg = "tmux is not installed (scripts/setup.sh --test installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return tmux


class Term:
    def __init__(self, tmux: str, socket: str) -> None:
        self.tmux, self.socket = tmux, socket

    def run(self, *args: str) -> str:
        return subprocess.run([self.tmux, "-L", self.socket, *args], capture_output=True, text=True,
                              timeout=10).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p")

    def wait_for(self, *needles: str, timeout: float = 20.0) -> str:
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = self.screen()
            if all(n in text for n in needles):
                return text
            time.sleep(0.1)
        raise AssertionError(f"{needles} not on screen after {timeout}s:\n{text}")

    def alive(self) -> bool:
        return subprocess.run([self.tmux, "-L", self.socket, "has-session"], capture_output=True).returncode == 0
