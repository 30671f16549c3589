"""Building the argv lists of an NCCL check: nccl-tests' all_reduce_perf locally, the bundled PyTorch
benchmark as a fallback, and the mpirun / torchrun lines of a multi-node run (built, not run here).

Everything is an argv list (never a shell string); user-supplied GPU ids, host names, sizes and
environment entries are validated first because mpirun and torchrun hand them on to remote hosts.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from nodeconsole.actions.nccl.parse import size_arg

BENCHMARK = Path(__file__).with_name("torch_allreduce.py")
DEFAULT_MIN, DEFAULT_MAX, DEFAULT_FACTOR = "8", "1G", 2
_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_GPU_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]{8,}(?:/\d+/\d+)?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=^@+%-]*$")
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")


def validate_gpus(gpus: Sequence[int | str]) -> list[str]:
    """GPU indices (ints or digit strings) or GPU-/MIG- UUIDs, unique and non-empty; returned as the
    strings that go into CUDA_VISIBLE_DEVICES."""
    if not gpus:
        raise ValueError("no GPU selected")
    out: list[str] = []
    for g in gpus:
        if isinstance(g, bool):
            raise ValueError(f"{g!r} is not a GPU index or UUID")
        if isinstance(g, int):
            text = str(g)
            if g < 0:
                raise ValueError(f"GPU index must not be negative: {g}")
        else:
            text = str(g).strip()
            if not ((text.isascii() and text.isdigit()) or _GPU_UUID.fullmatch(text)):
                raise ValueError(f"{g!r} is not a GPU index or UUID")
            text = str(int(text)) if text.isdigit() else text
        if text in out:
            raise ValueError(f"GPU {text} is listed twice")
        out.append(text)
    return out


def validate_host(host: str) -> str:
    """A host name or IPv4 address; anything that a shell or mpirun could read as more is refused."""
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise ValueError(f"{host!r} is not a valid host name")
    return host


def validate_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment entries passed on to other hosts: plain names, values without shell syntax."""
    out = {}
    for k, v in env.items():
        if not ENV_NAME.fullmatch(k):
            raise ValueError(f"{k!r} is not an environment variable name")
        if not _SAFE_VALUE.fullmatch(str(v)):
            raise ValueError(f"value of {k} contains characters not allowed here: {v!r}")
        out[k] = str(v)
    return out


def _check_program(path: str) -> str:
    if not _SAFE_PATH.fullmatch(path) or path.startswith("-"):
        raise ValueError(f"{path!r} is not an acceptable program path")
    return path


def sweep_args(min_bytes: str | int = DEFAULT_MIN, max_bytes: str | int = DEFAULT_MAX,
               factor: int = DEFAULT_FACTOR) -> list[str]:
    """`-b MIN -e MAX -f FACTOR`, validated (sizes accept nccl-tests' K/M/G suffixes)."""
    lo, hi = size_arg(min_bytes), size_arg(max_bytes)
    if lo > hi:
        raise ValueError(f"minimum size {min_bytes} is above the maximum {max_bytes}")
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 2:
        raise ValueError(f"size factor must be an integer of at least 2, not {factor!r}")
    return ["-b", str(min_bytes).strip(), "-e", str(max_bytes).strip(), "-f", str(factor)]


def find_all_reduce_perf(path: str | None = None, search_path: str | None = None) -> str | None:
    """An explicit path when it is an executable file, else `all_reduce_perf` from PATH."""
    if path:
        if "/" not in path:
            return shutil.which(path, path=search_path)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which("all_reduce_perf", path=search_path)


def all_reduce_argv(binary: str, ngpus: int, sweep: Sequence[str] | None = None,
                    extra: Sequence[str] = ()) -> list[str]:
    """`all_reduce_perf -b 8 -e 1G -f 2 -g N` (one process driving N GPUs)."""
    if ngpus < 1:
        raise ValueError("at least one GPU")
    return [binary, *(sweep if sweep is not None else sweep_args()), "-g", str(ngpus), *extra]


def torch_argv(ngpus: int, sweep: Sequence[str] | None = None, python: str = sys.executable,
               script: Path = BENCHMARK) -> list[str]:
    """The bundled PyTorch benchmark under torchrun, one process per GPU on this host."""
    if ngpus < 1:
        raise ValueError("at least one GPU")
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ngpus}", str(script),
            *(sweep if sweep is not None else sweep_args())]


def torch_cuda_available(python: str = sys.executable, timeout: float = 60) -> bool:
    """Whether `python` has PyTorch with CUDA and NCCL (asked in a child: importing torch is slow and
    initialises CUDA, which this process must not)."""
    code = ("import sys, torch, torch.distributed as d\n"
            "sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 3)")
    try:
        return subprocess.run([python, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass(frozen=True)
class LocalCommand:
    argv: list[str]
    kind: str  # "nccl-tests" or "torch"
    env: dict[str, str]  # what to add to the environment


class LocalCommandOptions(TypedDict, total=False):
    """The keyword options of `local_command`, for the functions that pass them on."""
    python: str
    search_path: str | None
    torch_probe: Callable[[str], bool]


def local_command(gpus: Sequence[int | str], path: str | None = None, sweep: Sequence[str] | None = None,
                  *, python: str = sys.executable, search_path: str | None = None,
                  torch_probe: Callable[[str], bool] = torch_cuda_available) -> LocalCommand:
    """The single-host check for `gpus`: all_reduce_perf when found, else the PyTorch benchmark when
    `python` has torch with CUDA; ValueError (with what to install) when neither is there."""
    ids = validate_gpus(gpus)
    env = {"NCCL_DEBUG": "INFO", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(ids)}
    binary = find_all_reduce_perf(path, search_path)
    if binary:
        return LocalCommand(all_reduce_argv(binary, len(ids), sweep), "nccl-tests", env)
    if path:
        raise ValueError(f"{path} is not an executable file")
    if torch_probe(python):
        return LocalCommand(torch_argv(len(ids), sweep, python), "torch", env)
    raise ValueError("neither all_reduce_perf (nccl-tests) nor PyTorch with CUDA was found: build "
                     "nccl-tests (github.com/NVIDIA/nccl-tests) or install torch")


def _hosts(hosts: Sequence[str], gpus_per_host: int) -> list[str]:
    """The validated host names of a multi-node command (ValueError saying what is wrong)."""
    if not hosts:
        raise ValueError("no host given")
    if gpus_per_host < 1:
        raise ValueError("at least one GPU per host")
    names = [validate_host(h) for h in hosts]
    if len(set(names)) != len(names):
        raise ValueError("a host is listed twice")
    return names


def mpirun_command(hosts: Sequence[str], gpus_per_host: int, binary: str = "all_reduce_perf",
                   sweep: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
                   mpirun: str = "mpirun") -> list[str]:
    """`mpirun -H a:N,b:N -np TOTAL -x NCCL_DEBUG=INFO ... all_reduce_perf -b .. -g 1`: one rank per GPU."""
    names = _hosts(hosts, gpus_per_host)
    exports = validate_env({"NCCL_DEBUG": "INFO", **(env or {})})
    argv = [_check_program(mpirun), "-H", ",".join(f"{h}:{gpus_per_host}" for h in names),
            "-np", str(gpus_per_host * len(names)), "--bind-to", "none"]
    for k, v in exports.items():
        argv += ["-x", f"{k}={v}"]
    return argv + all_reduce_argv(_check_program(binary), 1, sweep)


def torchrun_commands(hosts: Sequence[str], gpus_per_host: int, sweep: Sequence[str] | None = None,
                      port: int = 29500, rdzv_id: str = "nccl-check", torchrun: str = "torchrun",
                      script: str = str(BENCHMARK)) -> list[tuple[str, list[str]]]:
    """(host, argv) for each host: torchrun with c10d rendezvous at the first host. The benchmark
    script must exist at `script` on every host."""
    names = _hosts(hosts, gpus_per_host)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    if not ENV_NAME.fullmatch(rdzv_id.replace("-", "_")):
        raise ValueError(f"{rdzv_id!r} is not an acceptable rendezvous id")
    tail = [_check_program(script), *(sweep if sweep is not None else sweep_args())]
    return [(h, [_check_program(torchrun), f"--nnodes={len(names)}", f"--nproc_per_node={gpus_per_host}",
                 f"--node_rank={i}", "--rdzv_backend=c10d", f"--rdzv_endpoint={names[0]}:{port}",
                 f"--rdzv_id={rdzv_id}", *tail])
            for i, h in enumerate(names)]


def format_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The equivalent shell line, for showing to the admin (quoted, never executed)."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join(prefix + [shlex.quote(a) for a in argv])
