"""Kernel-log parsing speed and memory: a generated log in all four text forms, mixed.

    .venv/bin/python benchmarks/bench_kernel_log.py [--mb 100] [--keep DIR]

The log is mostly ordinary kernel lines (what a busy host logs), with NVRM lines that hold no event
(GSP RPC history, "GPU at PCI"), Xids, fallen-off-the-bus messages in one and three lines, and AER
summaries with their device lines: about 3% of the lines reach the matcher. A second, "dense" log
has an event on every line. Prints MB/s, events found and the peak RSS (resource.getrusage).
Target (issue 19): 100 MB in under 5 s, memory flat.

Then (issue 28) `events` through the command line's own code (`nodeconsole events --kernel-log FILE --json`,
run in this process, its output thrown away) on 10 MB and 100 MB of a harder mix: the lines above, other
programs' lines in syslog form that say "NVRM: Xid" (never events), and long padded lines (a 64 KiB Xid
line with blanks after name= every 20,000 lines, a 1 MiB one every 10 MB). Target: the time per MB of the
two within 1.5x of each other (linear). Last, the slowest of single 1 MiB lines padded at every field
boundary of an Xid, an AER and an all_reduce_perf output line (`--nccl`: the NCCL output reader too).
Target: each under 1 s.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.actions.nccl.parse import parse_text  # noqa: E402
from nodeconsole.console.cli import main as cli_main  # noqa: E402
from nodeconsole.console.sources.kernel_log import KernelLog, parse  # noqa: E402

NOISE = [
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "mlx5_core 0000:bc:00.0: mlx5_cmd_out_err:838:(pid 2213): QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed",
    "IPv6: ADDRCONF(NETDEV_CHANGE): vnet12: link becomes ready",
    "virbr0: port 3(vnet12) entered forwarding state",
    "kvm_amd: kvm [48211]: vcpu0, guest rIP: 0xffffffff8b0a2c61 unimplemented wrmsr: 0xc0011029 data 0x3",
    "audit: type=1400 audit(1727862067.311:412): apparmor=\"DENIED\" operation=\"open\" profile=\"libvirt-9f3c\"",
    "vfio-pci 0000:19:00.0: enabling device (0000 -> 0003)",
    "perf: interrupt took too long (2509 > 2500), lowering kernel.perf_event_max_sample_rate to 79500",
]
NVRM_NOISE = [
    "NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
    "NVRM:     -3    103  GSP_RM_ALLOC          0x0000000000000000 0x000000000000006c 0x00062ed1a6b517d9",
    "pcieport 0000:00:01.0: AER: enabled with IRQ 27",
]
EVENTS = [
    "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response "
    "from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (0009:01:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1)",
    "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.",
    "pcieport 0000:17:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:19:00.0",
    "vfio-pci 0000:19:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
    "pcieport 0000:17:01.0: AER: Corrected error message received from 0000:19:00.0",
]
THREE = ["NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:26b5) installed in this system has",
         "NVRM: fallen off the bus and is not responding to commands."]


def stamp(form: int, n: int, msg: str) -> str:
    s = n // 50
    if form == 0:
        return f"[{s / 10:12.6f}] {msg}"
    if form == 1:
        return f"[Sun Feb 23 {s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d} 2025] {msg}"
    if form == 2:
        return f"Oct 02 {s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d} gpu-node-01 kernel: {msg}"
    return f"6,{n},{s * 100000},-;{msg}"


def generate(path: Path, mb: int, dense: bool = False) -> None:
    target = mb << 20
    size, n = 0, 0
    with path.open("w", encoding="utf-8") as f:
        while size < target:
            lines = []
            for _ in range(2000):
                n += 1
                form = (n // 1000) % 4  # runs of one form, as a concatenation of pastes would be
                if dense:
                    msg = EVENTS[n % len(EVENTS)]
                elif n % 97 == 0:
                    lines += [stamp(form, n, t) if i == 0 or form != 0 else " " * 15 + t for i, t in enumerate(THREE)]
                    continue
                elif n % 50 == 0:
                    msg = EVENTS[n // 50 % len(EVENTS)]
                elif n % 60 == 0:
                    msg = NVRM_NOISE[n // 60 % len(NVRM_NOISE)]
                else:
                    msg = NOISE[n % len(NOISE)]
                lines.append(stamp(form, n, msg))
            chunk = "\n".join(lines) + "\n"
            f.write(chunk)
            size += len(chunk)


def measure(path: Path) -> tuple[float, int, int]:
    log = KernelLog()
    t = time.perf_counter()
    with path.open("rb", buffering=0) as f:
        found = sum(1 for _ in log.events(f))
    return time.perf_counter() - t, found, log.lines


USER = ["Oct 02 10:41:07 gpu-node-01 myapp[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        "Oct 02 10:41:07 gpu-node-01 sshd[811]: Invalid user NVRM: Xid (PCI:0000:3b:00): 13, from 203.0.113.9 port 22"]
PADDED = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name={pad}python3, GPU has fallen off the bus."


def generate_hard(path: Path, mb: int) -> None:
    """The mixed log, other programs' lines and long padded lines added."""
    generate(path, mb * 4 // 5)
    target, size, n = mb << 20, path.stat().st_size, 0
    with path.open("r+", encoding="utf-8") as f:
        f.seek(0, os.SEEK_END)
        while size < target:
            n += 1
            lines = [USER[n % 2]] * 50 + [PADDED.format(pad=" " * (64 << 10))]
            if n % 150 == 0:
                lines.append(PADDED.format(pad="\t" * (1 << 20)))
            chunk = "\n".join(lines) + "\n"
            f.write(chunk)
            size += len(chunk)


def run_events_cli(path: Path) -> float:
    t = time.perf_counter()
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        rc = cli_main(["events", "--kernel-log", str(path), "--json"])
    if rc != 0:
        raise SystemExit(f"events exited {rc}")
    return time.perf_counter() - t


def events_scaling(tmp: Path) -> None:
    print(f"\n{'events --kernel-log FILE --json':32} {'MB':>6} {'s':>7} {'s/MB':>8}")
    per_mb = []
    for mb in (10, 100):
        path = tmp / f"hard-{mb}.log"
        generate_hard(path, mb)
        real_mb = path.stat().st_size / 2**20
        secs = run_events_cli(path)
        per_mb.append(secs / real_mb)
        print(f"{'':32} {real_mb:6.0f} {secs:7.2f} {secs / real_mb:8.4f}")
        path.unlink()
    ratio = max(per_mb) / min(per_mb)
    print(f"time per MB, 100 MB against 10 MB: {per_mb[1] / per_mb[0]:.2f}x (target: within 1.5x) "
          f"{'ok' if ratio <= 1.5 else 'MISSED'}")


def worst_line(lines: list[str], read, pads=(" ", "\t", "=", "9", "name=", "\x00", ", ", "a", ":")) -> tuple[float, str]:
    """The slowest single read of `lines` with one line padded by 1 MiB at one field boundary."""
    worst = (0.0, "")
    for i, line in enumerate(lines):
        cuts = [j for j in range(len(line) + 1)
                if j in (0, len(line)) or line[j - 1].isalnum() != line[j].isalnum()]
        for pad in pads:
            for j in cuts:
                text = "\n".join(lines[:i] + [line[:j] + pad * ((1 << 20) // len(pad)) + line[j:]] + lines[i + 1:])
                t = time.perf_counter()
                read(text + "\n")
                secs = time.perf_counter() - t
                if secs > worst[0]:
                    worst = (secs, f"{pad!r} before {line[j:j + 16]!r}")
    return worst


def one_mib_lines(nccl: bool) -> None:
    print("\nslowest 1 MiB line (padding at every field boundary; target: under 1 s)")
    for name, line in (("Xid", PADDED.format(pad="")), ("AER", "Oct 02 10:41:07 gpu-node-01 kernel: pcieport "
                                                             "0000:17:01.0: AER: Corrected error received: 0000:19:00.0")):
        secs, where = worst_line([line], parse)
        print(f"  kernel log, {name} line: {secs:.3f} s ({where})")
    if nccl:
        out = ["# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20",
               "#  Rank  0 Group  0 Pid 1341852 on worker-0 device  0 [0x07] NVIDIA A100-SXM4-40GB",
               "host-a:880:887 [0] NCCL INFO Channel 07/0 : 3[3] -> 4[7] [send] via NET/IB/0/GDRDMA",
               "host-a:880:887 [0] NCCL INFO 32 coll channels, 16 nvls channels, 32 p2p channels",
               "     1048576        262144     float     sum      -1    78.77   13.31   23.29      0    81.31   12.90",
               "# Avg bus bandwidth    : 130.613"]
        secs, where = worst_line(out, parse_text, pads=(" ", "\t", "9", "a", ":", "Channel "))
        print(f"  all_reduce_perf output: {secs:.3f} s ({where})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--keep", type=Path, help="write the logs here and keep them")
    ap.add_argument("--nccl", action="store_true", help="time 1 MiB lines of the NCCL output reader too")
    ap.add_argument("--only-linear", action="store_true", help="skip the first (issue 19) table")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="nckmsg-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"{'log':8} {'MB':>6} {'lines':>10} {'events':>8} {'s':>7} {'MB/s':>7} {'peak RSS MiB':>13}")
        for name, dense, mb in (() if args.only_linear else (("mixed", False, args.mb), ("dense", True, max(1, args.mb // 10)))):
            path = tmp / f"{name}.log"
            generate(path, mb, dense)
            real_mb = path.stat().st_size / 2**20
            secs, found, lines = measure(path)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            print(f"{name:8} {real_mb:6.0f} {lines:10} {found:8} {secs:7.2f} {real_mb / secs:7.0f} {rss / 1024:13.1f}")
        print(f"(peak RSS before parsing: {rss0 / 1024:.1f} MiB)")
        events_scaling(tmp)
        one_mib_lines(args.nccl)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
