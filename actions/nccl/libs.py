"""Finding the NCCL libraries installed on a host (below a `Root`) and their versions.

Three places matter: the system library (what nccl-tests and MPI programs link), the `nvidia-nccl-cuXX`
pip wheel (what PyTorch loads) and, for older PyTorch builds, a copy inside `torch/lib`. Versions come
from file names (`libnccl.so.2.21.5`), dist-info folders (`nvidia_nccl_cu12-2.21.5.dist-info`), torch's
declared requirement, and as a last resort the "NCCL version X.Y.Z" banner inside the binary.
"""
from __future__ import annotations

import mmap
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeconsole.console.root import Root

DEFAULT_SYSTEM_DIRS: tuple[str, ...] = (
    "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "usr/local/lib",
    "usr/local/cuda*/lib64", "usr/local/cuda*/targets/*/lib", "usr/local/nccl*/lib", "opt/conda/lib",
)
DEFAULT_SITE_PACKAGES: tuple[str, ...] = (
    "usr/lib/python3*/site-packages", "usr/lib/python3/dist-packages", "usr/local/lib/python3*/site-packages",
    "usr/local/lib/python3*/dist-packages", "opt/conda/lib/python3*/site-packages",
    "opt/conda/envs/*/lib/python3*/site-packages", "root/.local/lib/python3*/site-packages",
    "home/*/.local/lib/python3*/site-packages", "home/*/*/lib/python3*/site-packages",
    "opt/*/lib/python3*/site-packages",
)
_LIBNAME = re.compile(r"^libnccl\.so(?:\.\d+)*$")
_NAME_VERSION = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
_DIST_INFO = re.compile(r"^nvidia_nccl_cu(\d+)-(\d+\.\d+\.\d+)[^-]*\.dist-info$")
_TORCH_DIST = re.compile(r"^torch-([^-]+)\.dist-info$")
_TORCH_REQ = re.compile(r"^Requires-Dist:\s*(nvidia-nccl-cu\d+)\s*\(?\s*==\s*(\d+\.\d+\.\d+)", re.M)
_BANNER = re.compile(rb"NCCL version (\d+\.\d+\.\d+)")
_SCAN_LIMIT = 2 << 30  # never map more than this of a binary


@dataclass(frozen=True)
class NcclLib:
    """One NCCL installation. `path` is the host's absolute path (not the root's)."""
    path: str
    version: str | None  # "2.21.5", None when it could not be told
    source: str  # "system", "conda", "pip" or "torch"
    package: str = ""  # "nvidia-nccl-cu12", "torch 2.5.1 (pins nvidia-nccl-cu12)"

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> NcclLib:
        """From plain data (e.g. another host's snapshot in JSON)."""
        v = d.get("version")
        return cls(str(d.get("path", "")), str(v) if v else None, str(d.get("source", "system")),
                   str(d.get("package", "")))


def version_in_binary(path: str | os.PathLike[str]) -> str | None:
    """The "NCCL version X.Y.Z" banner compiled into libnccl (and into binaries linking it statically)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return None
            with mmap.mmap(f.fileno(), min(size, _SCAN_LIMIT), access=mmap.ACCESS_READ) as mm:
                m = _BANNER.search(mm)
                return m.group(1).decode() if m else None
    except (OSError, ValueError):
        return None


def _host_path(root: Root, p: Path) -> str:
    return "/" + p.relative_to(root.path).as_posix()


def _globs(root: Root, patterns: Sequence[str]) -> list[Path]:
    seen: list[Path] = []
    top = root.path.resolve()
    for pat in patterns:
        for p in sorted(root.path.glob(pat.lstrip("/"))):
            # An absolute link in a captured tree points at this machine's files, not the host's.
            if p.is_dir() and p not in seen and (top == Path("/") or p.resolve().is_relative_to(top)):
                seen.append(p)
    # Directories reached without a symlink first, so a library is reported under its real path.
    return sorted(seen, key=lambda p: p.resolve() != top / p.relative_to(root.path))


def _identity(p: Path) -> tuple[int, int] | str:
    try:
        st = p.stat()
        return (st.st_dev, st.st_ino)
    except OSError:
        return str(p)


def _libs_in_dir(root: Root, d: Path, source: str, package: str = "",
                 version: str | None = None) -> list[NcclLib]:
    try:
        names = sorted(n for n in os.listdir(d) if _LIBNAME.match(n))
    except OSError:
        return []
    out = []
    for n in names:
        p = d / n
        if p.is_symlink():
            target = os.path.basename(os.readlink(p))
            tm = _NAME_VERSION.search(target)
            if target in names or not tm:
                continue  # the file it names is listed on its own (or it tells nothing)
            ver = tm.group(1)
        else:
            m = _NAME_VERSION.search(n)
            ver = m.group(1) if m else (version or version_in_binary(p))
        out.append((p, NcclLib(_host_path(root, p), ver, source, package)))
    # A versioned file and an unversioned copy of it are one installation.
    seen: set[object] = set()
    result = []
    for p, lib in out:
        key = _identity(p)
        if key not in seen:
            seen.add(key)
            result.append(lib)
    return result


def _pip_libs(root: Root, site: Path) -> list[NcclLib]:
    libdir = site / "nvidia" / "nccl" / "lib"
    if not libdir.is_dir():
        return []
    dists = sorted((m for n in _listdir(site) if (m := _DIST_INFO.match(n))), key=lambda m: m.group(0))
    version = dists[-1].group(2) if dists else None
    package = f"nvidia-nccl-cu{dists[-1].group(1)}" if dists else "nvidia-nccl"
    return _libs_in_dir(root, libdir, "pip", package, version)


def _torch_libs(root: Root, site: Path) -> list[NcclLib]:
    out = _libs_in_dir(root, site / "torch" / "lib", "torch", "torch (bundled)")
    for name in _listdir(site):
        m = _TORCH_DIST.match(name)
        if not m:
            continue
        try:
            meta = (site / name / "METADATA").read_text(errors="replace")
        except OSError:
            continue
        if req := _TORCH_REQ.search(meta):
            out.append(NcclLib(_host_path(root, site / "torch"), req.group(2), "torch",
                               f"torch {m.group(1)} (pins {req.group(1)})"))
    return out


def _listdir(d: Path) -> list[str]:
    try:
        return sorted(os.listdir(d))
    except OSError:
        return []


def find_nccl_libs(root: Root, site_packages: Sequence[str] = DEFAULT_SITE_PACKAGES,
                   system_dirs: Sequence[str] = DEFAULT_SYSTEM_DIRS) -> list[NcclLib]:
    """Every NCCL found below `root`: system directories first, then each site-packages directory
    (root-relative glob patterns, so a caller can add its own virtual environments)."""
    libs: list[NcclLib] = []
    seen: set[object] = set()

    def add(found: list[NcclLib]) -> None:
        for lib in found:
            key = (lib.source, _identity(root.p(lib.path)))
            if key not in seen:
                seen.add(key)
                libs.append(lib)

    for d in _globs(root, system_dirs):
        add(_libs_in_dir(root, d, "conda" if "conda" in d.as_posix() else "system"))
    for site in _globs(root, site_packages):
        add(_pip_libs(root, site))
        add(_torch_libs(root, site))
    return libs
