"""Hostile captures against `--replay` (issue 28, items 4, 5, 6, 12): a node file that points libvirt
outside the capture, tar headers that would make tarfile allocate, loop or run quadratic regexes,
members beyond the limits, deep JSON, kernel logs of sick hosts, and the extraction directory on
signals and after a kill.

Archives are built here from raw 512-byte headers (a header may *declare* gigabytes at no cost); small
limits come through monkeypatch on console/capture/limits.py where real data would be slow to make."""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from nodeconsole.console.capture import limits
from nodeconsole.console.capture.kernel_events import cut_lines, keep_lines, kept_logs
from nodeconsole.console.capture.scratch import LOCK, PREFIX
from nodeconsole.console.cli import main
from nodeconsole.console.root import Root

MANIFEST = json.dumps({"format": "nodeconsole-capture", "schema": 1, "hostname": "h"}).encode()
XID = b"May  1 00:00:00 h kernel: [%d.0] NVRM: Xid (PCI:0000:19:00): 79, pid=%d, name=p, GPU has fallen off the bus.\n"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def header(name: bytes, kind: bytes = b"0", size: int = 0, link: bytes = b"", size_field: bytes | None = None) -> bytes:
    """One ustar header block, its checksum computed (the name cut to the field's 100 bytes)."""
    b = bytearray(512)
    b[0:100] = name[:100].ljust(100, b"\0")
    b[100:124] = b"0000644\0" b"0000000\0" b"0000000\0"
    b[124:136] = size_field if size_field is not None else b"%011o\0" % size
    b[136:148] = b"00000000000\0"
    b[156:157] = kind
    b[157:157 + len(link)] = link
    b[257:265] = b"ustar\x0000"
    b[148:156] = b" " * 8
    b[148:156] = b"%06o\0 " % sum(b)
    return bytes(b)


def pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def member(name: str, data: bytes = b"", kind: bytes = b"0") -> bytes:
    return header(name.encode(), kind, len(data) if kind == b"0" else 0) + (pad(data) if kind == b"0" else b"")


def capture(*parts: bytes, manifest: bytes = MANIFEST) -> bytes:
    """A minimal capture (a manifest and one file of the tree) with `parts` after it, gzip-compressed."""
    raw = member("manifest.json", manifest) + member("root/proc/cmdline", b"x\n") + b"".join(parts)
    return gzip.compress(raw + b"\0" * 1024, mtime=0)


def replay(tmp_path: Path, data: bytes, *argv: str) -> tuple[int, str, str]:
    path = tmp_path / "c.tar.gz"
    path.write_bytes(data)
    return cli(*(argv or ("snapshot", "--json")), "--replay", str(path))


def refused(result: tuple[int, str, str], why: str) -> None:
    rc, out, err = result
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and why in err, (rc, err[-500:])
    assert "Traceback" not in err


@pytest.fixture(autouse=True)
def private_scratch(tmp_path, monkeypatch):
    """Extractions go to this test's own directory (and none is left behind)."""
    scratch = tmp_path / "run"
    scratch.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(scratch))
    yield scratch


# -- item 4: the node file reads only inside the capture ----------------------------------------------

DOMAIN = "<domain type='test'><name>{}</name><memory>1024</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>"


def node(*domains: str) -> bytes:
    inner = "".join(f"<domain file='{d}'/>" for d in domains)
    return (f"<node><cpu><mhz>1000</mhz><model>m</model><active>2</active><nodes>1</nodes><sockets>1</sockets>"
            f"<cores>2</cores><threads>1</threads></cpu><memory>1048576</memory>{inner}</node>").encode()


@pytest.mark.parametrize("ref,why", [
    ("{secret}", "only files inside the capture"),  # absolute
    ("../../../../../../../..{secret}", "outside the capture"),
    ("/dev/stdin", "only files inside the capture"),
    ("inactive", "not a regular file"),
    ("missing.xml", "No such file"),
], ids=["absolute", "dotdot", "stdin", "directory", "missing"])
def test_node_file_references_outside_the_capture_are_refused(tmp_path, ref, why):
    secret = tmp_path / "secret.xml"
    secret.write_text(DOMAIN.format("stolen"))
    data = capture(member("libvirt", kind=b"5"), member("libvirt/inactive", kind=b"5"),
                   member("libvirt/node.xml", node(ref.format(secret=secret))))
    refused(replay(tmp_path, data), why)


def test_a_node_file_reference_inside_the_capture_is_served(tmp_path):
    data = capture(member("libvirt", kind=b"5"), member("libvirt/vm.xml", DOMAIN.format("inside").encode()),
                   member("libvirt/node.xml", node("vm.xml")))
    rc, out, err = replay(tmp_path, data)
    assert rc == 0, err
    assert [vm["name"] for vm in json.loads(out)["vms"]] == ["inside"]


def test_a_node_file_reference_in_any_namespace_or_a_doctype_is_refused(tmp_path):
    xml = node().replace(b"</node>", b"<domain xmlns:x='urn:x' x:file='/etc/hostname'/></node>")
    data = capture(member("libvirt", kind=b"5"), member("libvirt/node.xml", xml))
    refused(replay(tmp_path, data), "only files inside the capture")
    xml = b"<!DOCTYPE node [<!ENTITY e SYSTEM '/etc/hostname'>]>" + node()
    refused(replay(tmp_path, capture(member("libvirt", kind=b"5"), member("libvirt/node.xml", xml))), "DOCTYPE")


# -- item 5: headers checked before tarfile parses them -----------------------------------------------

def test_a_long_name_header_declaring_2_gib_is_refused_unread(tmp_path):
    data = capture(header(b"././@LongLink", b"L", 2 << 30), member("root/x", b"1"))
    t0 = time.perf_counter()
    refused(replay(tmp_path, data), "long name header of 2147483648 bytes")
    assert time.perf_counter() - t0 < 30  # nothing of the declared size is read (generous: shared CPUs)


def test_a_real_long_name_over_the_field_limit_is_refused(tmp_path):
    name = b"root/" + b"a" * (limits.MAX_HEADER_FIELD + 10)
    data = capture(header(b"././@LongLink", b"L", len(name) + 1) + pad(name + b"\0"), member("root/y", b"1"))
    refused(replay(tmp_path, data), "long name header of")


def pax(*records: bytes) -> bytes:
    body = b""
    for rec in records:
        n = len(rec) + 2
        while len(b"%d %s\n" % (n, rec)) != n:
            n += 1
        body += b"%d %s\n" % (n, rec)
    return header(b"././@PaxHeader", b"x", len(body)) + pad(body)


def test_a_pax_header_of_160k_digits_is_refused_at_once(tmp_path):
    """CVE-2024-6232: tarfile's pax regexes are quadratic on digit runs (39 s for 54 KB on 3.11.7);
    refused from its size alone, on interpreters with and without the fix."""
    body = b"1" * 160_000
    data = capture(header(b"././@PaxHeader", b"x", len(body)) + pad(body), member("root/z", b"1"))
    refused(replay(tmp_path, data), "pax header of 160000 bytes")


def test_a_pax_header_within_the_size_limit_but_of_digits_is_refused(tmp_path):
    body = b"1" * (limits.MAX_HEADER_FIELD - 600)
    data = capture(header(b"././@PaxHeader", b"x", len(body)) + pad(body), member("root/z", b"1"))
    refused(replay(tmp_path, data), "run of more than")
    data = capture(pax(b"comment=" + b"7" * 2000), member("root/z", b"1"))
    refused(replay(tmp_path, data), "run of more than")


def test_pax_headers_together_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_PAX_TOTAL", 4096)
    ok = b"".join(pax(b"comment=" + b"a" * 100) + member(f"root/k{i}", kind=b"5") for i in range(3))
    rc, _, err = replay(tmp_path, capture(ok))
    assert rc == 0, err
    many = b"".join(pax(b"comment=" + b"a" * 100) + member(f"root/k{i}", kind=b"5") for i in range(10))
    refused(replay(tmp_path, capture(many)), "more than 4 KiB of pax headers")


def test_pax_records_are_checked(tmp_path):
    data = capture(pax(b"size=5000000000"), member("root/big", b"1"))
    refused(replay(tmp_path, data), "too large (5000000000 bytes")
    refused(replay(tmp_path, capture(pax(b"GNU.sparse.size=10"), member("root/s", b"1"))), "sparse")
    junk = b"16 path=root/ok\n" + b"\0" * 5 + b"9 size=1\n"  # a record hidden in the padding
    refused(replay(tmp_path, capture(header(b"././@PaxHeader", b"x", 16) + pad(junk), member("root/p", b"1"))),
            "data after the records")
    refused(replay(tmp_path, capture(header(b"././@PaxHeader", b"x", 7) + pad(b"99 a=b\n"), member("root/q"))),
            "malformed record")


def test_a_chain_of_extension_headers_is_refused(tmp_path):
    name = pad(b"root/n\0")
    chain = b"".join(header(b"././@LongLink", b"L", 7) + name for _ in range(2000))
    refused(replay(tmp_path, capture(chain, member("root/n", b"1"))), "extension headers in a row")


@pytest.mark.parametrize("size_field", [b"%011o\0" % (4 << 30), b"\x80" + (65 << 20).to_bytes(11, "big")],
                         ids=["4GiB-outside-the-tops", "65MiB-base256"])
def test_a_member_declaring_more_than_the_member_limit_is_refused_unread(tmp_path, size_field):
    data = capture(header(b"junk/big", b"0", size_field=size_field))
    refused(replay(tmp_path, data), "too large")


def test_member_count_counts_every_member(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_MEMBERS", 50)
    outside = b"".join(member(f"later/d{i}", kind=b"5") for i in range(60))  # not served, still counted
    refused(replay(tmp_path, capture(outside)), "more than 50 members")
    rc, _, err = replay(tmp_path, capture(b"".join(member(f"later/d{i}", kind=b"5") for i in range(40))))
    assert rc == 0, err


def test_total_unpacked_bytes_are_bounded_and_a_gzip_bomb_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_TOTAL_BYTES", 1 << 20)
    monkeypatch.setattr(limits, "MAX_MEMBER_BYTES", 4 << 20)
    bomb = member("root/zeros", b"\0" * (3 << 20))  # 3 MiB of zeros, a few KiB compressed
    refused(replay(tmp_path, capture(bomb)), "more than 1 MiB unpacked")
    many = b"".join(member(f"root/m{i}", b"x" * (300 << 10)) for i in range(4))
    refused(replay(tmp_path, capture(many)), "more than 1 MiB unpacked")


def test_nothing_is_left_in_the_scratch_directory_after_a_refusal(tmp_path, private_scratch):
    refused(replay(tmp_path, capture(member("root/dev/sda", kind=b"4"))), "device")
    assert list(private_scratch.iterdir()) == []


# -- item 12: deep JSON --------------------------------------------------------------------------------

@pytest.mark.parametrize("levels", [100, 100_000])
def test_deeply_nested_json_is_one_line(tmp_path, levels):
    deep = b"[" * levels + b"]" * levels
    refused(replay(tmp_path, capture(member("nvml.json", b'{"gpus": [], "x": ' + deep + b"}"))), "nests deeper")
    manifest = MANIFEST[:-1] + b', "x": ' + deep + b"}"
    refused(replay(tmp_path, capture(manifest=manifest)), "nests deeper")


# -- item 6: what capture writes, replay opens ----------------------------------------------------------

def test_a_run_of_nul_bytes_is_one_cut_line_in_small_memory(tmp_path):
    log = tmp_path / "kern.log"
    with open(log, "wb") as f:
        f.write(XID % (1, 1))
        for _ in range(32):
            f.write(b"\0" * (1 << 20))
        f.write(b"\n" + XID % (2, 2))
    from nodeconsole.console.capture.kernel_events import _file_lines

    tracemalloc.start()
    try:
        kept = keep_lines(_file_lines(str(log)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    assert kept == XID % (1, 1) + b"\n" + XID % (2, 2)  # the NUL line is dropped (no event), distances kept
    (line,) = [ln for ln in cut_lines([b"\0" * (1 << 20) + b"\n"])]
    assert line == b"\0" * limits.MAX_LOG_LINE + f"\u2026[cut {(1 << 20) - limits.MAX_LOG_LINE} bytes]\n".encode()


def test_kept_lines_keep_the_newest_tail_below_the_member_limit(monkeypatch):
    monkeypatch.setattr(limits, "MAX_LOG_KEPT", 64 << 10)
    lines = [XID % (i, i) for i in range(5000)]  # ~600 KB, every line an event
    kept = keep_lines(iter(lines))
    assert len(kept) <= 64 << 10 and kept.endswith(lines[-1]) and kept.startswith(b"May")
    assert len(kept) > 60 << 10


def test_a_xid_storm_capture_reopens(tmp_path, monkeypatch):
    """A kernel log larger than the member limit: the capture keeps its newest lines, the replay opens."""
    monkeypatch.setattr(limits, "MAX_MEMBER_BYTES", 256 << 10)
    monkeypatch.setattr(limits, "MAX_LOG_KEPT", 128 << 10)
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "root"
    (root / "var/log").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("x\n")
    (root / "var/log/kern.log").write_bytes(b"".join(XID % (i, i) for i in range(8000)))  # ~1 MB
    (kept,) = kept_logs(Root(root), live=False)
    assert len(kept.data) <= 128 << 10
    archive = tmp_path / "storm.tar.gz"
    rc, _, err = cli("capture", "--root", str(root), "-o", str(archive))
    assert rc == 0, err
    rc, out, err = cli("events", "--json", "--replay", str(archive))
    assert rc == 0, err
    events = json.loads(out)
    assert any(e["pid"] == 7999 for e in events)  # the newest line is kept


def test_a_capture_beyond_the_limits_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_MEMBERS", 3)
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc/cmdline").write_text("x\n")
    rc, out, err = cli("capture", "--root", str(root), "-o", str(tmp_path / "c.tar.gz"))
    assert rc == 2 and "members (at most 3)" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "c.tar.gz").exists()


# -- item 12: the extraction directory on every way out ------------------------------------------------

CHILD = textwrap.dedent("""
    import signal, sys, time
    for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_DFL)  # as a process started from a shell gets them
    from nodeconsole.console.capture.replay import open_replay
    print(open_replay(sys.argv[1]).dir, flush=True)
    time.sleep(120)
""")


def _child(archive: Path, scratch: Path) -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(archive)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    extracted = Path(proc.stdout.readline().strip())
    assert extracted.parent == scratch and (extracted / "manifest.json").is_file()
    return proc, extracted


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_the_extraction_is_removed_when_the_replay_is_signalled(tmp_path, private_scratch, sig):
    archive = tmp_path / "c.tar.gz"
    archive.write_bytes(capture())
    proc, extracted = _child(archive, private_scratch)
    assert oct(extracted.stat().st_mode & 0o777) == oct(0o700)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == -sig  # it still dies of the signal
    assert not extracted.exists()


def test_a_killed_replays_extraction_is_removed_by_the_next_one_but_a_live_ones_is_not(tmp_path, private_scratch):
    from nodeconsole.console.capture.replay import open_replay
    from nodeconsole.console.capture.scratch import discard

    archive = tmp_path / "c.tar.gz"
    archive.write_bytes(capture())
    killed, stale = _child(archive, private_scratch)
    live, alive = _child(archive, private_scratch)
    foreign = private_scratch / f"{PREFIX}nolock"  # no lock file (an older release's): never judged
    foreign.mkdir()
    try:
        killed.kill()
        killed.wait(timeout=30)
        assert (stale / LOCK).exists()
        archive2 = tmp_path / "d.tar.gz"
        archive2.write_bytes(capture(member("root/other", b"1")))
        mine = open_replay(archive2).dir
        assert not stale.exists() and alive.is_dir() and foreign.is_dir() and mine.is_dir()
    finally:
        live.kill()
        live.wait(timeout=30)
    discard(mine)
    assert not mine.exists()
