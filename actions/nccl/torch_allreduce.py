"""All-reduce bandwidth with torch.distributed, printed in nccl-tests' all_reduce_perf format so the same
parser reads it. The fallback when nccl-tests is not installed but PyTorch with CUDA is.

Run under torchrun, one process per GPU:
    python -m torch.distributed.run --standalone --nproc_per_node=2 torch_allreduce.py -b 8 -e 1G -f 2

Self-contained on purpose (torchrun starts it as a plain script on any host): it imports nothing from
the project, and torch only inside main() so that importing this module stays cheap.
Out-of-place is timed as copy + in-place all_reduce (torch has no out-of-place all_reduce).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

_INFO_BYTES = 512
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"([0-9]+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size")
    return int(m.group(1)) * _UNITS[m.group(2)]


def sweep(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    out, size = [], max(min_bytes, 1)
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def bus_factor(nranks: int) -> float:
    """busbw = algbw × 2(n−1)/n for all_reduce (what nccl-tests reports)."""
    return 2 * (nranks - 1) / nranks if nranks > 0 else 0.0


def format_time(us: float) -> str:
    if us >= 10000:
        return f"{us:7.0f}"
    return f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def format_half(time_us: float, algbw: float, busbw: float, wrong: int | None) -> str:
    return f"  {format_time(time_us)}  {algbw:6.2f}  {busbw:6.2f}  {'N/A' if wrong is None else wrong:>6}"


def format_row(size: int, count: int, dtype: str, op: str, root: int,
               out: tuple[float, float, float, int | None], inp: tuple[float, float, float, int | None]) -> str:
    return f"{size:12d}  {count:12d}  {dtype:>8}  {op:>6}  {root:6d}" + format_half(*out) + format_half(*inp)


def header_lines(nranks: int, min_bytes: int, max_bytes: int, factor: int, warmup: int, iters: int,
                 check: bool, devices: Sequence[tuple[int, str, int, int, str, str]], tests_version: str,
                 nccl_code: int | None) -> list[str]:
    lines = [f"# nccl-tests version {tests_version}" + (f" nccl-library={nccl_code}" if nccl_code else ""),
             "# Collective test starting: all_reduce_perf",
             f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {factor}(factor) warmup iters: "
             f"{warmup} iters: {iters} agg iters: 1 validation: {int(check)} graph: 0 ranks: {nranks}",
             "#", "# Using devices"]
    for rank, host, pid, dev, bus, name in devices:
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {dev:2d} [{bus}] {name}")
    lines += ["#", "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
              "#       size         count      type   redop    root"
              + "     time   algbw   busbw #wrong" * 2,
              "#        (B)    (elements)" + " " * 31 + "(us)  (GB/s)  (GB/s)" + " " * 12 + "(us)  (GB/s)  (GB/s)"]
    return lines


def footer_lines(busbws: Sequence[float], wrong_total: int) -> list[str]:
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    return [f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}",
            f"# Avg bus bandwidth    : {avg:g}", "#", "# Collective test concluded: all_reduce_perf", "#"]


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("32M"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("32M"))
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("--backend", default="nccl", help="gloo with --device cpu for a run without GPUs")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    return p.parse_args(argv)


class _Bench:
    """One rank's side of the sweep: times an all-reduce like nccl-tests (warm-up, barrier, mean over
    ranks) and, with --check, counts wrong elements. `torch` and `dist` are the modules main() imported."""

    def __init__(self, a: argparse.Namespace, torch: Any, dist: Any, dev: Any, rank: int, world: int,
                 cuda: bool) -> None:
        self.a, self.torch, self.dist, self.dev = a, torch, dist, dev
        self.rank, self.world, self.cuda = rank, world, cuda

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def timed(self, op, buf) -> float:
        a, dist = self.a, self.dist
        for _ in range(a.warmup_iters):
            op(buf)
        self.sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            op(buf)
        self.sync()
        elapsed = self.torch.tensor([(time.perf_counter() - t0) / max(a.iters, 1)], dtype=self.torch.float64,
                                    device=self.dev)
        dist.all_reduce(elapsed)  # nccl-tests reports the mean over ranks
        return float(elapsed.item()) / self.world * 1e6

    def wrong_after(self, op, buf) -> int | None:
        if not self.a.check:
            return None
        world = self.world
        buf.fill_(self.rank + 1)
        op(buf)
        self.sync()
        bad = (buf != world * (world + 1) / 2).sum().to(self.torch.float64).reshape(1)
        self.dist.all_reduce(bad)
        return int(bad.item())

    def run_sweep(self) -> tuple[list[float], int]:
        """Every size, out-of-place then in-place; rank 0 prints the rows. The bus bandwidths and the
        number of wrong elements."""
        a, torch, dist, dev, world = self.a, self.torch, self.dist, self.dev, self.world
        busbws: list[float] = []
        wrong_total = 0
        for size in sweep(a.minbytes, a.maxbytes, a.stepfactor):
            count = max(size // 4, 1)
            nbytes = count * 4
            send = torch.zeros(count, dtype=torch.float32, device=dev)
            recv = torch.zeros_like(send)
            halves = []

            def out_of_place(b, dst=recv):
                dst.copy_(b)
                dist.all_reduce(dst)

            for op, buf in ((out_of_place, send), (dist.all_reduce, recv)):
                us = self.timed(op, buf)
                wrong = self.wrong_after(dist.all_reduce, torch.zeros_like(send))
                algbw = nbytes / (us / 1e6) / 1e9 if us > 0 else 0.0
                halves.append((us, algbw, algbw * bus_factor(world), wrong))
                busbws.append(algbw * bus_factor(world))
                wrong_total += wrong or 0
            if self.rank == 0:
                print(format_row(nbytes, count, "float", "sum", -1, halves[0], halves[1]), flush=True)
        return busbws, wrong_total


def _gather_devices(torch: Any, dist: Any, dev: Any, rank: int, world: int, local: int,
                    cuda: bool) -> list[tuple[Any, ...]]:
    """Every rank's (rank, host, pid, local rank, PCI bus id, device name), in rank order."""
    if cuda:
        props = torch.cuda.get_device_properties(local)
        bus = "{:04x}:{:02x}:{:02x}".format(int(getattr(props, "pci_domain_id", 0)),
                                            int(getattr(props, "pci_bus_id", 0)),
                                            int(getattr(props, "pci_device_id", 0)))
        name = props.name
    else:
        bus, name = "cpu", "CPU"
    # Gathered as bytes in a tensor: all_gather_object would need numpy, which torch does not require.
    mine = json.dumps([rank, socket.gethostname(), os.getpid(), local, bus, name]).encode()[:_INFO_BYTES]
    buf = torch.zeros(_INFO_BYTES, dtype=torch.uint8, device=dev)
    buf[:len(mine)] = torch.tensor(list(mine), dtype=torch.uint8)
    parts = [torch.zeros_like(buf) for _ in range(world)]
    dist.all_gather(parts, buf)
    return [tuple(json.loads(bytes(p.cpu().tolist()).rstrip(b"\0"))) for p in parts]


def main(argv: Sequence[str] | None = None) -> int:
    a = _args(argv)
    # torch is optional: only this worker needs it, on a machine that has it (not where mypy runs)
    import torch  # type: ignore[import-not-found]
    import torch.distributed as dist  # type: ignore[import-not-found]

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group(backend=a.backend)
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    devices = _gather_devices(torch, dist, dev, rank, world, local, cuda)
    nccl_code = None
    if cuda and a.backend == "nccl":
        major, minor, patch = torch.cuda.nccl.version()[:3]
        nccl_code = major * 10000 + minor * 100 + patch
    if rank == 0:
        for line in header_lines(world, a.minbytes, a.maxbytes, a.stepfactor, a.warmup_iters, a.iters,
                                 bool(a.check), devices, f"torch-{torch.__version__}", nccl_code):
            print(line, flush=True)
    busbws, wrong_total = _Bench(a, torch, dist, dev, rank, world, cuda).run_sweep()
    if rank == 0:
        for line in footer_lines(busbws, wrong_total):
            print(line, flush=True)
    dist.destroy_process_group()
    return 1 if wrong_total else 0

if __name__ == "__main__":
    sys.exit(main())
