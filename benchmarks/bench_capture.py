"""Capture and replay of the demo host: how long `nodeconsole capture --demo` takes and how large the
archive is, and how fast a replay opens against the live demo.

    .venv/bin/python benchmarks/bench_capture.py [--runs 5] [--skip-terminal]

1. Capture: the command end to end (a new process, as an admin runs it) and take_capture in-process;
   the archive's size. Targets (issue 14): under 3 s and under 5 MB.
2. Opening: seams plus the console's first (sysfs-only) frame and the first full snapshot, in-process,
   live demo against its replay (the replay extracts the archive first).
3. First frame in a real terminal (tmux 120x40, all 10 GPUs on screen), `--demo` against `--replay FILE`.
   Target: the replay within 1.5x of the live demo.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.console.capture.take import take_capture  # noqa: E402
from nodeconsole.console.collector import Collector  # noqa: E402
from nodeconsole.console.demo.state import ensure_demo  # noqa: E402
from nodeconsole.console.seams import demo_host, replay_host  # noqa: E402

CAPTURE_S, CAPTURE_MB, FRAME_RATIO = 3.0, 5.0, 1.5


def capture_table(state: Path, out: Path, runs: int) -> None:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state)}
    cli, inproc = [], []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nodeconsole.console.cli", "capture", "--demo", "-o", str(out)],
                       cwd=REPO, env=env, check=True, capture_output=True)
        cli.append(time.perf_counter() - t)
    os.environ["NODECONSOLE_STATE_DIR"] = str(state)
    size = 0
    for _ in range(runs):
        seams = demo_host()
        t = time.perf_counter()
        size = len(take_capture(seams).data)
        inproc.append(time.perf_counter() - t)
    c = statistics.median(cli)
    print(f"\n## Capture of the demo host (median of {runs})")
    print(f"nodeconsole capture --demo (new process)  {c * 1000:7.0f} ms   target < {CAPTURE_S:.0f} s  "
          f"{'ok' if c < CAPTURE_S else 'MISSED'}")
    print(f"take_capture in-process                   {statistics.median(inproc) * 1000:7.0f} ms")
    print(f"archive size                              {size / 1024:7.0f} KiB  target < {CAPTURE_MB:.0f} MB  "
          f"{'ok' if size < CAPTURE_MB * 2**20 else 'MISSED'}")


def open_table(archive: Path, runs: int) -> None:
    def measure(make) -> tuple[float, float, float]:
        t = time.perf_counter()
        seams = make()
        t_seams = time.perf_counter()
        collector = Collector(seams)
        collector.collect(partial=True)
        t_first = time.perf_counter()
        collector.collect()
        t_full = time.perf_counter()
        collector.close()
        return t_seams - t, t_first - t, t_full - t

    from nodeconsole.console.capture import replay as replay_module

    rows = {"live demo": [], "replay": []}
    for _ in range(runs):
        rows["live demo"].append(measure(demo_host))
        replay_module._opened.clear()  # extract again, as a new process would
        rows["replay"].append(measure(lambda: replay_host(archive)))
    print(f"\n## Opening, in-process (median of {runs}; ms from the start)")
    print(f"{'host':12} {'seams':>8} {'first frame':>12} {'full snapshot':>14}")
    for name, values in rows.items():
        s, f, full = (statistics.median(v[i] for v in values) * 1000 for i in range(3))
        print(f"{name:12} {s:>8.0f} {f:>12.0f} {full:>14.0f}")


def terminal_table(state: Path, archive: Path, runs: int) -> None:
    from benchmarks.run import first_frame

    addrs = ["0000:18:00.0", "0000:db:00.0"]  # the first and the last GPU row
    py = sys.executable
    env = f"NODECONSOLE_STATE_DIR={state}"
    live, replay = [], []
    for _ in range(runs):
        live.append(first_frame(f"cd {REPO} && {env} {py} -m nodeconsole.screens.launch --demo", addrs))
        replay.append(first_frame(f"cd {REPO} && {env} {py} -m nodeconsole.screens.launch --replay {archive}",
                                  addrs + ["replay of"]))
    a, b = statistics.median(live), statistics.median(replay)
    print(f"\n## First frame in a real terminal (tmux 120x40, median of {runs} launches)")
    print(f"nodeconsole --demo            {a * 1000:7.0f} ms")
    print(f"nodeconsole --replay FILE     {b * 1000:7.0f} ms   ratio {b / a:.2f}x (target <= {FRAME_RATIO}x)  "
          f"{'ok' if b <= FRAME_RATIO * a else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-terminal", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ncbench-capture-"))
    try:
        state = tmp / "demo"
        ensure_demo(state)
        archive = tmp / "demo.tar.gz"
        print(f"nodeconsole capture benchmark  python {sys.version.split()[0]}  {os.cpu_count()} CPUs")
        capture_table(state, archive, args.runs)
        open_table(archive, args.runs)
        if args.skip_terminal or shutil.which("tmux") is None:
            print("\n(terminal measurement skipped" + ("" if args.skip_terminal else ": no tmux") + ")")
        else:
            terminal_table(state, archive, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
