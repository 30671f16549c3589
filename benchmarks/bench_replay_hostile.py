"""Replay of hostile captures at the limits (console/capture/limits.py): peak RSS and wall time of
`nodeconsole snapshot --replay FILE --json`, a new process per archive (as an analyst runs it).

    .venv/bin/python benchmarks/bench_replay_hostile.py [--only NAME]

Target (issue 28): every archive, accepted or refused, under 256 MiB RSS and 10 s. The archives are
built here from raw tar headers (gzip level 1) into a temporary directory under /dev/shm where there
is one; extraction goes to a private directory there too (removed by the replay itself).
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.console.capture import limits  # noqa: E402

RSS_MIB, SECONDS = 256, 10.0
CLI = "import sys; from nodeconsole.console.cli import main; sys.exit(main(sys.argv[1:]))"
MANIFEST = b'{"format": "nodeconsole-capture", "schema": 1, "hostname": "bench"}'


def header(name: bytes, kind: bytes = b"0", size: int = 0) -> bytes:
    b = bytearray(512)
    b[0:100] = name[:100].ljust(100, b"\0")
    b[100:124] = b"0000644\0" b"0000000\0" b"0000000\0"
    b[124:136] = b"%011o\0" % size if size < 8 ** 11 else b"\x80" + size.to_bytes(11, "big")
    b[136:148] = b"00000000000\0"
    b[156:157] = kind
    b[257:265] = b"ustar\x0000"
    b[148:156] = b" " * 8
    b[148:156] = b"%06o\0 " % sum(b)
    return bytes(b)


def pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def member(name: bytes, data: bytes = b"", kind: bytes = b"0") -> bytes:
    return header(name, kind, len(data) if kind == b"0" else 0) + (pad(data) if kind == b"0" else b"")


def pax(record: bytes) -> bytes:
    n = len(record) + 2
    while len(b"%d %s\n" % (n, record)) != n:
        n += 1
    body = b"%d %s\n" % (n, record)
    return header(b"././@PaxHeader", b"x", len(body)) + pad(body)


def longname(name: bytes) -> bytes:
    return header(b"././@LongLink", b"L", len(name) + 1) + pad(name + b"\0")


# -- the archives: each a generator of raw tar bytes after the manifest ----------------------------------

def big_members() -> Iterator[bytes]:
    """Members of the largest size, as many as the total allows (3 x 64 MiB)."""
    chunk = os.urandom(1 << 20)  # incompressible: the archive is as large as it unpacks
    for i in range(3):
        yield header(b"root/big%d" % i, b"0", limits.MAX_MEMBER_BYTES)
        for _ in range(limits.MAX_MEMBER_BYTES >> 20):
            yield chunk


def many_members() -> Iterator[bytes]:
    """As many members as the count allows, files and directories in the served tree."""
    for i in range(limits.MAX_MEMBERS - 3):
        yield member(b"root/d%d" % i, kind=b"5") if i % 2 else member(b"root/f%d" % i, b"x")


def long_names() -> Iterator[bytes]:
    """Long names of the largest size, as many as the total allows (outside the served folders: no
    file system takes a name this long, tarfile still reads each)."""
    stem = b"later/" + b"n" * (limits.MAX_HEADER_FIELD - 64)
    for i in range(limits.MAX_TOTAL_BYTES // (limits.MAX_HEADER_FIELD + 1024) - 8):
        yield longname(stem + b"%d" % i) + header(b"later/x", b"5")


def pax_headers() -> Iterator[bytes]:
    """pax headers of the largest size (digit runs at the allowed maximum), as many as the pax total allows."""
    value = (b"1" * limits.MAX_PAX_DIGITS + b"a") * ((limits.MAX_HEADER_FIELD - 600) // (limits.MAX_PAX_DIGITS + 1))
    for i in range(limits.MAX_PAX_TOTAL // limits.MAX_HEADER_FIELD):
        yield pax(b"comment=" + value) + member(b"root/p%d" % i, kind=b"5")


def refused_pax_total() -> Iterator[bytes]:
    """Small pax headers of digit runs at the maximum, beyond the pax total."""
    value = (b"1" * limits.MAX_PAX_DIGITS + b"a") * 30
    for i in range(limits.MAX_TOTAL_BYTES // 2048):
        yield pax(b"comment=" + value) + member(b"later/p%d" % i, kind=b"5")


def refused_longname() -> Iterator[bytes]:
    yield header(b"././@LongLink", b"L", 2 << 30)  # declares 2 GiB


def refused_pax_digits() -> Iterator[bytes]:
    body = b"1" * 160_000
    yield header(b"././@PaxHeader", b"x", len(body)) + pad(body)


def refused_huge_member() -> Iterator[bytes]:
    yield header(b"later/huge", b"0", 4 << 30)


def refused_million() -> Iterator[bytes]:
    for i in range(1_000_000):
        yield member(b"later/d%d" % i, kind=b"5")


def refused_bomb() -> Iterator[bytes]:
    zeros = b"\0" * (1 << 20)
    for i in range(8):
        yield header(b"root/z%d" % i, b"0", limits.MAX_MEMBER_BYTES)
        for _ in range(limits.MAX_MEMBER_BYTES >> 20):
            yield zeros


ARCHIVES: dict[str, Callable[[], Iterator[bytes]]] = {
    "3 x 64 MiB members": big_members, f"{limits.MAX_MEMBERS} members": many_members,
    "8 KiB long names": long_names, "8 KiB pax headers": pax_headers,
    "refused: 2 GiB long name": refused_longname, "refused: 160K-digit pax": refused_pax_digits,
    "refused: 4 GiB member": refused_huge_member,
    "refused: pax headers beyond 1 MiB": refused_pax_total, "refused: 1M members": refused_million,
    "refused: gzip bomb (512 MiB of zeros)": refused_bomb,
}


def build(path: Path, parts: Iterator[bytes]) -> None:
    with gzip.open(path, "wb", compresslevel=1) as gz:
        gz.write(member(b"manifest.json", MANIFEST) + member(b"root/proc/cmdline", b"x\n"))
        for part in parts:
            gz.write(part)
        gz.write(b"\0" * 1024)


def measure(path: Path, scratch: Path) -> tuple[int, float, float, str]:
    """rc, peak RSS (MiB), wall seconds, the last stderr line of one replay in a new process."""
    env = {**os.environ, "XDG_RUNTIME_DIR": str(scratch)}
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CLI, "snapshot", "--json", "--replay", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    return proc.returncode, usage.ru_maxrss / 1024, wall, (err.strip().splitlines() or [""])[-1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="run the archives whose name contains this")
    args = ap.parse_args()
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    work = Path(tempfile.mkdtemp(prefix="bench-replay-hostile-", dir=shm))
    ok = True
    try:
        scratch = work / "run"
        scratch.mkdir(mode=0o700)
        print(f"{'archive':40} {'file MiB':>9} {'rc':>3} {'RSS MiB':>8} {'s':>6}  what the replay said")
        for name, parts in ARCHIVES.items():
            if args.only and args.only not in name:
                continue
            path = work / "a.tar.gz"
            build(path, parts())
            rc, rss, wall, said = measure(path, scratch)
            within = rss < RSS_MIB and wall < SECONDS and list(scratch.iterdir()) == []
            ok &= within and (rc == 2) == name.startswith("refused")
            print(f"{name:40} {path.stat().st_size / 2**20:9.1f} {rc:3} {rss:8.0f} {wall:6.2f}  "
                  f"{said.rpartition('.tar.gz: ')[2][:70]}{'' if within else '  <-- over the target'}")
            path.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"target: under {RSS_MIB} MiB and {SECONDS:.0f} s each: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
