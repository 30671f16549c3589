"""Command lines of the NCCL check: validation of user input, the local fallback to the PyTorch
benchmark, the multi-node mpirun/torchrun lines, and the benchmark's output format."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from nodeconsole.actions.nccl import torch_allreduce as bench
from nodeconsole.actions.nccl.commands import (
    BENCHMARK,
    find_all_reduce_perf,
    format_command,
    local_command,
    mpirun_command,
    sweep_args,
    torchrun_commands,
    validate_env,
    validate_gpus,
    validate_host,
)
from nodeconsole.actions.nccl.parse import Row, expected_rows, parse_text

BAD_HOSTS = ["", "a;b", "a b", "$(reboot)", "`id`", "-oProxyCommand=x", "host:8", "a/b", "a..b", "-x", "h\n",
             "x" * 64, "a|b", "a&b", "*"]


def test_gpu_lists() -> None:
    assert validate_gpus([0, 1, "3", " 2 "]) == ["0", "1", "3", "2"]
    assert validate_gpus(["GPU-5f3a8e2c-1d2b-4c3d-9e8f-0a1b2c3d4e5f"]) == ["GPU-5f3a8e2c-1d2b-4c3d-9e8f-0a1b2c3d4e5f"]
    assert validate_gpus(["MIG-5f3a8e2c-1d2b-4c3d-9e8f-0a1b2c3d4e5f"])
    for bad in ([], [-1], ["0,1"], ["0;rm -rf /"], [0, "0"], ["GPU-"], [True], ["1.5"], ["$(id)"]):
        with pytest.raises(ValueError):
            validate_gpus(bad)


@pytest.mark.parametrize("host", ["node1", "gpu-1-7", "10.0.0.12", "n1.cluster.example.org", "A1"])
def test_valid_hosts(host: str) -> None:
    assert validate_host(host) == host


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_hosts_with_shell_or_option_syntax_are_refused(host: str) -> None:
    with pytest.raises(ValueError):
        validate_host(host)
    with pytest.raises(ValueError):
        mpirun_command([host], 8)
    with pytest.raises(ValueError):
        torchrun_commands(["ok", host], 8)


def test_sweep_args() -> None:
    assert sweep_args() == ["-b", "8", "-e", "1G", "-f", "2"]
    assert sweep_args("1M", "256M", 4) == ["-b", "1M", "-e", "256M", "-f", "4"]
    for bad in (("1G", "8", 2), ("8", "1G", 1), ("8;x", "1G", 2), ("8", "1G", "2")):
        with pytest.raises(ValueError):
            sweep_args(*bad)


def test_mpirun_command() -> None:
    argv = mpirun_command(["gpu-1", "gpu-2"], 4, "/opt/nccl-tests/build/all_reduce_perf",
                          env={"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "^mlx5_2"})
    assert argv[:3] == ["mpirun", "-H", "gpu-1:4,gpu-2:4"]
    assert argv[argv.index("-np") + 1] == "8"
    exports = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert exports == ["NCCL_DEBUG=INFO", "NCCL_SOCKET_IFNAME==eth0", "NCCL_IB_HCA=^mlx5_2"]
    tail = argv[argv.index("/opt/nccl-tests/build/all_reduce_perf"):]
    assert tail == ["/opt/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "1"]
    assert shlex.split(format_command(argv)) == argv  # the shown line means exactly this argv
    for bad in ({"A B": "1"}, {"X": "a b"}, {"X": "$(id)"}, {"X": "a;b"}):
        with pytest.raises(ValueError):
            mpirun_command(["gpu-1"], 1, env=bad)
    with pytest.raises(ValueError):
        mpirun_command(["gpu-1", "gpu-1"], 1)
    with pytest.raises(ValueError):
        mpirun_command(["gpu-1"], 1, binary="all_reduce_perf; reboot")


def test_torchrun_commands() -> None:
    cmds = torchrun_commands(["n1", "n2", "n3"], 8, port=29501)
    assert [h for h, _ in cmds] == ["n1", "n2", "n3"]
    for rank, (_, argv) in enumerate(cmds):
        assert argv[0] == "torchrun"
        assert f"--node_rank={rank}" in argv and "--nnodes=3" in argv and "--nproc_per_node=8" in argv
        assert "--rdzv_endpoint=n1:29501" in argv and "--rdzv_backend=c10d" in argv
        assert argv[-7:] == [str(BENCHMARK), "-b", "8", "-e", "1G", "-f", "2"]
    with pytest.raises(ValueError):
        torchrun_commands(["n1"], 8, port=70000)
    with pytest.raises(ValueError):
        torchrun_commands(["n1"], 8, rdzv_id="a b")


def test_validate_env() -> None:
    assert validate_env({"NCCL_DEBUG": "INFO", "X": "/a/b.c:1,^d"}) == {"NCCL_DEBUG": "INFO", "X": "/a/b.c:1,^d"}


def test_local_command_prefers_nccl_tests_then_torch(tmp_path: Path) -> None:
    exe = tmp_path / "all_reduce_perf"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    probed: list[str] = []

    def probe(python: str) -> bool:
        probed.append(python)
        return True

    cmd = local_command([2, 3], search_path=str(tmp_path), torch_probe=probe)
    assert cmd.kind == "nccl-tests" and probed == []
    assert cmd.argv == [str(exe), "-b", "8", "-e", "1G", "-f", "2", "-g", "2"]
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "2,3" and cmd.env["NCCL_DEBUG"] == "INFO"
    assert local_command([0], path=str(exe), torch_probe=probe).argv[0] == str(exe)

    empty = tmp_path / "empty"
    empty.mkdir()
    cmd = local_command([0, 1, 2], search_path=str(empty), torch_probe=probe, python="/usr/bin/python3")
    assert cmd.kind == "torch" and probed == ["/usr/bin/python3"]
    assert cmd.argv == ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
                        str(BENCHMARK), "-b", "8", "-e", "1G", "-f", "2"]
    with pytest.raises(ValueError, match="nccl-tests"):
        local_command([0], search_path=str(empty), torch_probe=lambda p: False)
    with pytest.raises(ValueError):
        local_command([0], path=str(tmp_path / "missing"), torch_probe=probe)
    exe.chmod(0o644)
    assert find_all_reduce_perf(str(exe)) is None


def test_benchmark_output_reads_as_all_reduce_perf() -> None:
    """The PyTorch fallback's own formatting, read back by the parser."""
    sizes = bench.sweep(8, 1 << 20, 2)
    assert len(sizes) == expected_rows(8, 1 << 20, 2)
    devices = [(0, "node-a", 100, 0, "0000:17:00", "NVIDIA H100 80GB HBM3"),
               (1, "node-a", 101, 1, "0000:65:00", "NVIDIA H100 80GB HBM3")]
    lines = bench.header_lines(2, 8, 1 << 20, 2, 5, 20, True, devices, "torch-2.5.1", 22105)
    busbws, expected = [], []
    for i, size in enumerate(sizes):
        t = 10.0 + i * 1234.5
        alg = size / (t / 1e6) / 1e9
        bus = alg * bench.bus_factor(2)
        wrong = None if i == 3 else i % 2
        lines.append(bench.format_row(size, size // 4, "float", "sum", -1, (t, alg, bus, wrong), (t, alg, bus, 0)))
        busbws += [bus, bus]
        expected.append((size, round(bus, 2), wrong))
    lines += bench.footer_lines(busbws, 7)
    p = parse_text("\n".join(lines) + "\n")
    assert [(r.size, r.out_of_place.busbw, r.out_of_place.wrong) for r in p.rows] == expected
    assert all(isinstance(r, Row) and r.count == r.size // 4 for r in p.rows)
    assert p.avg_busbw == pytest.approx(sum(busbws) / len(busbws), rel=1e-5)
    assert (p.oob_count, p.oob_ok) == (7, False)
    assert p.version == "2.21.5" and p.tests_version == "torch-2.5.1"
    assert [d.pci_address for d in p.devices] == ["0000:17:00.0", "0000:65:00.0"]
    assert p.header is not None and (p.header.min_bytes, p.header.max_bytes, p.header.step_factor) == (8, 1 << 20, 2)
    assert bench.bus_factor(1) == 0 and bench.bus_factor(8) == 1.75
    assert bench.parse_size("1G") == 1 << 30


def test_benchmark_module_needs_no_torch_to_import() -> None:
    import subprocess
    code = "import nodeconsole.actions.nccl.torch_allreduce, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == "False"
