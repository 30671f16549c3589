"""CLI output on the demo host never depends on the tools installed on the machine running it.

The same commands run twice: with the normal PATH, and with a PATH that first offers decoy
`nvidia-smi`, `driverctl`, `lspci`, `journalctl`, `dmesg`, `virsh`, `all_reduce_perf`, `modprobe`,
`update-initramfs` and `systemctl` (each prints DECOY and fails). The outputs must be identical, and no
decoy may have run."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = ("nvidia-smi", "driverctl", "lspci", "journalctl", "dmesg", "virsh", "all_reduce_perf", "modprobe",
         "update-initramfs", "systemctl", "nodeconsole")
CODE = "import sys; from nodeconsole.actions.cli import main; sys.exit(main(sys.argv[1:]))"
COMMANDS = (
    ("snapshot", "--json"),
    ("passthrough", "4", "--vm", "build-1", "--persist"),
    ("release", "1"),
    ("mig", "4", "3g.40gb,3g.40gb"),
    ("mig", "save"),
    ("pin", "train-b"),
    ("nccl", "check"),
)


def _decoys(bin_dir: Path, log: Path) -> None:
    bin_dir.mkdir()
    for tool in TOOLS:
        exe = bin_dir / tool
        exe.write_text(f"#!/bin/sh\necho {tool} >> {log}\necho DECOY\nexit 1\n")
        exe.chmod(0o755)


def _run(args: tuple[str, ...], state: Path, path: str) -> tuple[int, str, str]:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state), "PATH": path}
    out = subprocess.run([sys.executable, "-c", CODE, *args, "--demo"], env=env, capture_output=True, text=True,
                         timeout=120)
    return out.returncode, out.stdout, out.stderr


def _no_clock_events(text: str) -> str:
    """The snapshot JSON with each GPU's clock-event (throttle) reasons blanked."""
    if not text.startswith("{"):
        return text
    snap = json.loads(text)
    for g in snap.get("gpus", ()):
        g["clock_events"] = None
    return json.dumps(snap, indent=2)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_output_independent_of_installed_tools(args, tmp_path):
    log = tmp_path / "ran.log"
    _decoys(tmp_path / "bin", log)
    plain = _run(args, tmp_path / "a" / "demo", os.environ["PATH"])
    decoyed = _run(args, tmp_path / "b" / "demo", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert plain[0] in (0, 1), plain[2]
    # state directories differ by name only; the outputs must not
    assert decoyed[0] == plain[0]
    norm = [s.replace(str(tmp_path / "b"), str(tmp_path / "a")) for s in decoyed[1:]]
    if args[0] == "snapshot":  # the simulated GPUs and VMs move with the clock: compare all but numbers
        # and the throttle reasons (a power cap comes and goes with the simulated load)
        norm, want = ([re.sub(r"\d+(\.\d+)?", "#", _no_clock_events(s)) for s in outs]
                      for outs in (norm, plain[1:]))
    else:
        want = list(plain[1:])
    assert norm == want
    assert not log.exists(), f"a machine tool ran: {log.read_text()}"
    assert "DECOY" not in plain[1] + decoyed[1]
