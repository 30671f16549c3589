"""nodeconsole benchmarks, one run, one table per question.

1. Snapshot collection on small, demo and large generated hosts: cold (first) and steady-state time
   per collect, and peak Python memory; how the cost grows with GPUs and with VMs.
2. Console start: time from launch to the first frame showing all demo GPUs, in a real terminal
   (tmux 160x50), against a bare Textual app with a Header, a DataTable and a Footer.
3. The console at a 1 s refresh on the demo and a large host, the bare app, `htop -d 10` and nvitop on
   the simulated GPUs, side by side in one window: CPU, RSS and the bytes each writes to its terminal.

    .venv/bin/python benchmarks/run.py [--quick] [--window S] [--only-terminal] [--stock-textual]

--stock-textual runs the console with NODECONSOLE_STOCK_TEXTUAL=1 (stock Textual, without screens/fast/).

Targets (issue 15): first frame <= 1.5x the bare app; CPU <= 1% of a core on the demo host, <= 2% on
the large host; RSS <= 1.3x the bare app; <= 1,000 terminal bytes/s on the demo host.
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
import tracemalloc
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.console.collector import Collector  # noqa: E402
from nodeconsole.console.demo.generator import generate  # noqa: E402
from nodeconsole.console.demo.nvml_sim import SimulatedNvml  # noqa: E402
from nodeconsole.console.demo.presets import demo_spec, large_spec, small_spec  # noqa: E402
from nodeconsole.console.root import Root  # noqa: E402
from nodeconsole.console.seams import Seams  # noqa: E402


def seams_for(spec, dest: Path) -> Seams:
    host = generate(spec, dest)
    root = Root(host.root)
    return Seams(root=root, libvirt_uri=host.libvirt_uri,
                 nvml_lib=SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True))


def measure_collect(spec, dest: Path, steady: int = 10) -> dict:
    """Cold and steady-state poll times (without tracemalloc, which slows every allocation), then the
    peak Python memory of a cold collect and a few polls in a second, traced pass."""
    seams = seams_for(spec, dest)
    t0 = time.perf_counter()
    c = Collector(seams)
    snap = c.collect()
    cold = time.perf_counter() - t0
    times = []
    for _ in range(steady):
        t = time.perf_counter()
        snap = c.collect()
        times.append(time.perf_counter() - t)
    c.close()
    tracemalloc.start()
    traced = Collector(seams)
    for _ in range(3):
        traced.collect()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    traced.close()
    bad = [n for n in ("sysfs", "nvml", "libvirt", "psutil") if getattr(snap.sources, n) != "ok"]
    return {"gpus": len(snap.gpus), "vms": len(snap.vms), "cpus": len(snap.cpus), "pci": len(snap.pci_devices),
            "cold_ms": cold * 1000, "steady_ms": statistics.median(times) * 1000, "peak_mib": peak / 2**20,
            "bad": ",".join(bad)}


def collection_tables(quick: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ncbench-"))
    rows = [("small", small_spec()), ("demo", demo_spec()), ("large", large_spec())]
    print("\n## Snapshot collection (median of back-to-back polls; sysfs signs every 5 s, changeable parts every 30 s)")
    print(f"{'host':10} {'GPUs':>5} {'CPUs':>5} {'PCI':>5} {'VMs':>5} {'cold ms':>9} {'poll ms':>9} {'peak MiB':>9}")
    for name, spec in rows:
        r = measure_collect(spec, tmp / name)
        print(f"{name:10} {r['gpus']:>5} {r['cpus']:>5} {r['pci']:>5} {r['vms']:>5} {r['cold_ms']:>9.1f} "
              f"{r['steady_ms']:>9.1f} {r['peak_mib']:>9.1f} {r['bad']}")
    print("\n## Growth with GPUs (256 CPUs, 50 VMs) and with VMs (8 GPUs, 256 CPUs)")
    print(f"{'GPUs':>5} {'VMs':>5} {'cold ms':>9} {'poll ms':>9} {'peak MiB':>9}")
    series = [(g, 50) for g in ((4, 16) if quick else (4, 8, 16, 32))]
    series += [(8, v) for v in ((10, 500) if quick else (10, 100, 250, 500))]
    for g, v in series:
        r = measure_collect(large_spec(gpus=g, cpus=256, vms=v), tmp / f"g{g}v{v}", steady=5)
        print(f"{r['gpus']:>5} {r['vms']:>5} {r['cold_ms']:>9.1f} {r['steady_ms']:>9.1f} {r['peak_mib']:>9.1f}")
    shutil.rmtree(tmp, ignore_errors=True)


def generation_table() -> None:
    """Host generation and a cold sysfs read (these were timed assertions in tests once; a target
    belongs here: demo generation well under 1 s, a 500-VM host under 15 s, sysfs of 500 PCI functions
    under 100 ms)."""
    from nodeconsole.console.pciids import PciIds
    from nodeconsole.console.sources.sysfs import read_sysfs

    tmp = Path(tempfile.mkdtemp(prefix="ncgen-"))
    print("\n## Host generation and a cold sysfs read (median of 3)")
    print(f"{'host':10} {'generate ms':>12} {'sysfs read ms':>14} {'PCI':>5}")
    for name, spec in (("demo", demo_spec()), ("large", large_spec(gpus=16, cpus=256, vms=500))):
        gen, read, pci = [], [], 0
        for i in range(3):
            t = time.perf_counter()
            host = generate(spec, tmp / f"{name}{i}")
            gen.append(time.perf_counter() - t)
            t = time.perf_counter()
            pci = len(read_sysfs(Root(host.root), PciIds(paths=None)).pci_devices)
            read.append(time.perf_counter() - t)
        print(f"{name:10} {statistics.median(gen) * 1000:>12.0f} {statistics.median(read) * 1000:>14.1f} {pci:>5}")
    shutil.rmtree(tmp, ignore_errors=True)


# -- terminal measurements --------------------------------------------------------------------------
BARE_APP = """
from textual.app import App
from textual.widgets import DataTable, Footer, Header
class Bare(App):
    def compose(self):
        yield Header(); yield DataTable(); yield Footer()
    def on_mount(self):
        t = self.query_one(DataTable); t.add_columns("a", "b")
        t.add_row("BARE-READY", "1")
Bare().run()
"""
COLS, ROWS = 160, 50  # the size the issue measured at


class Tmux:
    """One program in its own tmux server (a real terminal): its output can be captured and counted."""

    def __init__(self) -> None:
        self.socket = f"ncbench-{uuid.uuid4().hex[:6]}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True).stdout

    def start(self, cmd: str, cols: int = COLS, rows: int = ROWS) -> None:
        # exec: the pane's process is the program itself (its CPU and memory, no shell)
        self("new-session", "-d", "-x", str(cols), "-y", str(rows), f"exec {cmd}" if " && " not in cmd else cmd)

    def pid(self) -> int:
        return int(self("list-panes", "-F", "#{pane_pid}").split()[0])

    def kill(self) -> None:
        self("kill-server")


def first_frame(cmd: str, needles: list[str], timeout: float = 30) -> float:
    t = Tmux()
    t0 = time.perf_counter()
    t.start(cmd)
    try:
        while time.perf_counter() - t0 < timeout:
            screen = t("capture-pane", "-p")
            if all(n in screen for n in needles):
                return time.perf_counter() - t0
            time.sleep(0.005)
        return float("nan")
    finally:
        t.kill()


STOCK_TEXTUAL = ""  # "NODECONSOLE_STOCK_TEXTUAL=1 " with --stock-textual: the console's own runs only


def programs(state: Path, large: Path | None) -> dict[str, str]:
    py = sys.executable
    bare = state / "bare_app.py"
    bare.write_text(BARE_APP)
    demo = f"{STOCK_TEXTUAL}NODECONSOLE_STATE_DIR={state / 'demo'}"
    out = {
        "nodeconsole --demo": f"cd {REPO} && {demo} exec {py} -m nodeconsole.screens.launch --demo --interval 1",
        "bare Textual app": f"{py} {bare}",
    }
    if large is not None:
        out["nodeconsole, large host"] = (f"cd {REPO} && {STOCK_TEXTUAL}exec {py} -m benchmarks.large_console "
                                          f"{large}")
    if shutil.which("htop"):
        out["htop -d 10"] = "htop -d 10"
    try:
        import nvitop  # noqa: F401

        out["nvitop (simulated GPUs)"] = (f"cd {REPO} && exec {py} -m benchmarks.nvitop_demo {state / 'demo'} "
                                          f"--interval 1")
    except ImportError:
        pass
    return out


def first_frame_table(state: Path, runs: int) -> dict[str, float]:
    from nodeconsole.console.demo.state import ensure_demo

    addrs = [g["address"] for g in __import__("json").loads(
        Path(ensure_demo(state / "demo").nvml_state).read_text())["gpus"]]
    cmds = programs(state, None)
    bare, console = [], []
    for _ in range(runs):
        bare.append(first_frame(cmds["bare Textual app"], ["BARE-READY"]))
        console.append(first_frame(cmds["nodeconsole --demo"], addrs))
    b, c = statistics.median(bare), statistics.median(console)
    print(f"\n## First frame in a real terminal (tmux {COLS}x{ROWS}, median of {runs} launches)")
    print(f"bare Header+DataTable+Footer app  {b * 1000:7.0f} ms")
    print(f"nodeconsole --demo, all {len(addrs)} GPUs   {c * 1000:7.0f} ms   ratio {c / b:.2f}x (target <= 1.5x)")
    return {"bare": b, "console": c}


def cpu_of(pid: int) -> float:
    """User+system CPU seconds of a process and its children (threads included, ended ones too)."""
    import psutil

    p = psutil.Process(pid)
    total = 0.0
    for q in [p] + p.children(recursive=True):
        try:
            t = q.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def rss_of(pid: int) -> int:
    import psutil

    p = psutil.Process(pid)
    total = 0
    for q in [p] + p.children(recursive=True):
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def steady_table(state: Path, window: float, warm: float = 15.0) -> dict[str, dict[str, float]]:
    """All programs side by side in one window at a 1 s refresh: CPU, peak RSS and the bytes each
    writes to its terminal (tmux pipe-pane), after `warm` seconds of start-up."""
    tmp = Path(tempfile.mkdtemp(prefix="nclarge-"))
    large = generate(large_spec(), tmp / "large")
    cmds = programs(state, large.dest)
    terms: dict[str, Tmux] = {}
    for name, cmd in cmds.items():
        terms[name] = Tmux()
        terms[name].start(cmd)
    time.sleep(warm)
    pids = {n: t.pid() for n, t in terms.items()}
    outs = {n: tmp / f"out-{i}" for i, n in enumerate(terms)}
    for n, t in terms.items():
        outs[n].write_bytes(b"")
        t("pipe-pane", "-o", f"cat >> {outs[n]}")
    start = {n: cpu_of(p) for n, p in pids.items()}
    peak = {n: 0 for n in pids}
    t0 = time.monotonic()
    while time.monotonic() - t0 < window:
        for n, p in pids.items():
            peak[n] = max(peak[n], rss_of(p))
        time.sleep(1.0)
    elapsed = time.monotonic() - t0
    end = {n: cpu_of(p) for n, p in pids.items()}
    for t in terms.values():
        t.kill()
    res = {n: {"cpu": 100 * (end[n] - start[n]) / elapsed, "rss": peak[n] / 2**20,
               "bps": outs[n].stat().st_size / elapsed} for n in cmds}
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n## At a 1 s refresh, tmux {COLS}x{ROWS}, all side by side over the same {elapsed:.0f} s "
          f"(after {warm:.0f} s of start-up)")
    print(f"{'program':28} {'CPU % of a core':>16} {'RSS MiB':>9} {'terminal bytes/s':>17}")
    for n, r in res.items():
        print(f"{n:28} {r['cpu']:16.2f} {r['rss']:9.1f} {r['bps']:17.0f}")
    return res


def ratios(frame: dict[str, float], steady: dict[str, dict[str, float]]) -> None:
    demo, bare = steady["nodeconsole --demo"], steady["bare Textual app"]
    large = steady.get("nodeconsole, large host")
    rows = [
        ("first frame / bare app", frame["console"] / frame["bare"], 1.5, "x"),
        ("CPU, demo host (% of a core)", demo["cpu"], 1.0, "%"),
        ("CPU, large host (% of a core)", large["cpu"] if large else float("nan"), 2.0, "%"),
        ("RSS / bare app", demo["rss"] / bare["rss"], 1.3, "x"),
        ("terminal bytes/s, demo host", demo["bps"], 1000.0, ""),
    ]
    print("\n## Against the targets (issue 15)")
    for name, value, target, unit in rows:
        verdict = "met" if value <= target else "MISSED"
        print(f"{name:32} {value:9.2f}{unit:1}  target <= {target:g}{unit}  {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer sizes, shorter window")
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--skip-terminal", action="store_true")
    ap.add_argument("--only-terminal", action="store_true", help="skip the collection tables")
    ap.add_argument("--stock-textual", action="store_true", help="the console with stock Textual")
    args = ap.parse_args()
    global STOCK_TEXTUAL
    STOCK_TEXTUAL = "NODECONSOLE_STOCK_TEXTUAL=1 " if args.stock_textual else ""
    print(f"nodeconsole benchmarks  python {sys.version.split()[0]}  {os.cpu_count()} CPUs"
          f"{'  (stock Textual)' if args.stock_textual else ''}")
    if not args.only_terminal:
        generation_table()
        collection_tables(args.quick)
    if args.skip_terminal:
        return
    if shutil.which("tmux") is None:
        print("\n(terminal measurements skipped: no tmux)")
        return
    state = Path(tempfile.mkdtemp(prefix="ncbench-state-"))
    frame = first_frame_table(state, 3 if args.quick else 5)
    if shutil.which("htop") is None:
        print("\n(htop not installed: apt-get install htop)")
    steady = steady_table(state, 10.0 if args.quick else args.window)
    ratios(frame, steady)
    shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
