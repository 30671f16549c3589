"""`nodeconsole doctor` on the large generated host (16 GPUs, 256 CPUs, 500 VMs): the snapshot is taken
once (that is the collector's cost, measured by benchmarks/run.py), then every check runs on it, reading
its files through the root seam each time (a doctor run memoises reads within the run, not across runs).

    .venv/bin/python benchmarks/bench_doctor.py [--runs 20] [--keep DIR]

Prints the first run (cold: imports done, files not yet in the page cache of this process's reads),
the median and the worst of the following runs, and the statuses found. Target (issue 13): under 200 ms.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.console.collector import Collector  # noqa: E402
from nodeconsole.console.demo.generator import generate  # noqa: E402
from nodeconsole.console.demo.nvml_sim import SimulatedNvml  # noqa: E402
from nodeconsole.console.demo.presets import large_spec  # noqa: E402
from nodeconsole.console.doctor.run import run_doctor  # noqa: E402
from nodeconsole.console.root import Root  # noqa: E402
from nodeconsole.console.seams import Seams  # noqa: E402

TARGET_MS = 200.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--keep", metavar="DIR", help="generate the host here and keep it (default: a temporary folder)")
    args = ap.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ncdoctor-"))
    try:
        t = time.perf_counter()
        host = generate(large_spec(), tmp / "large")
        gen_s = time.perf_counter() - t
        root = Root(host.root)
        seams = Seams(root=root, libvirt_uri=host.libvirt_uri,
                      nvml_lib=SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True))
        collector = Collector(seams)
        t = time.perf_counter()
        snap = collector.collect()
        collect_s = time.perf_counter() - t
        collector.close()
        bad = [n for n in ("sysfs", "nvml", "libvirt") if getattr(snap.sources, n) != "ok"]
        t = time.perf_counter()
        report = run_doctor(snap, root)
        cold = time.perf_counter() - t
        times = []
        for _ in range(max(1, args.runs)):
            t = time.perf_counter()
            report = run_doctor(snap, root)
            times.append(time.perf_counter() - t)
        median, worst = statistics.median(times) * 1000, max(times) * 1000
        print(f"nodeconsole doctor benchmark  python {sys.version.split()[0]}")
        print(f"large host: {len(snap.gpus)} GPUs, {len(snap.cpus)} CPUs, {len(snap.vms)} VMs, "
              f"{len(snap.pci_devices)} PCI functions (generated in {gen_s:.1f} s, snapshot {collect_s * 1000:.0f} ms"
              f"{', sources not ok: ' + ','.join(bad) if bad else ''})")
        print(f"run_doctor: first {cold * 1000:.1f} ms, median {median:.1f} ms, worst {worst:.1f} ms "
              f"over {len(times)} runs (target < {TARGET_MS:.0f} ms: {'met' if median < TARGET_MS else 'MISSED'})")
        counts = report.counts()
        print("statuses: " + ", ".join(f"{counts[s]} {s}" for s in ("pass", "warn", "fail", "skip")))
        for c in report.checks:
            print(f"  {c.status:<4}  {c.id:<19}  {c.finding[:110]}")
        return 0 if median < TARGET_MS else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
