"""`nodeconsole capture` and `--replay FILE`: a capture reopens as the host it was taken from (snapshot,
doctor, events, plans), read-only; capture → replay → capture gives the same archive but the manifest's
time; --redact leaves none of the host's names, UUIDs or MACs; malicious archives are refused.

One demo host per module (with a kernel log, an audit record and a MAC added), one capture of it, one
large host, and every shared real-machine tree via --root; the CLI runs in-process."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.console.capture import MANIFEST
from nodeconsole.console.capture.kernel_events import keep_lines
from nodeconsole.console.capture.live import blank_live
from nodeconsole.console.capture.recording import LINK, Tree
from nodeconsole.console.capture.redact import Redactor
from nodeconsole.console.collector import Collector
from nodeconsole.console.root import Root
from nodeconsole.console.sources.kernel_log import parse
from tests.console.test_sysfs_hosts import TREES, _find_root, _tree_names

MAC = "52:54:00:AB:cd:ef"
KMSG = [
    "6,100,1000000,-;kvm: vcpu0 unhandled rdmsr",
    "3,101,1843308145,-;NVRM: Xid (PCI:0000:19:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    *[f"6,{102 + i},{1843400000 + i},-;audit: noise {i}" for i in range(40)],
    "3,200,1900000000,-;NVRM: Xid (PCI:0000:9b:00): 48, pid=77, name=python, DBE (0x1,0x2)",
    "6,201,1900000001,-;the end",
]


WHO = {"user": "jdoe-ops", "sudo_user": "asmith", "ssh_client": "192.0.2.77"}  # who made the demo's change


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def members(path: Path) -> dict[str, tuple[bytes, str, bytes | None]]:
    """name → (type, link target, content) of every member."""
    out = {}
    with tarfile.open(path) as tf:
        for m in tf:
            f = tf.extractfile(m) if m.isreg() else None
            out[m.name] = (m.type, m.linkname, f.read() if f is not None else None)
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """This module's files: in memory where the system has /dev/shm (the hosts and captures are
    thousands of small files), else in pytest's temporary directory."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    d = Path(tempfile.mkdtemp(prefix="nodeconsole-test-capture-", dir=shm or tmp_path_factory.getbasetemp()))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(scratch):
    """A demo host with a kernel log, an audit record and a MAC in a domain, and one capture of it taken
    right after a snapshot and a doctor run of the live demo."""
    from nodeconsole.console.demo.state import ensure_demo

    base = scratch / "capture"
    base.mkdir()
    state = base / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NODECONSOLE_STATE_DIR", str(state))
        host = ensure_demo(state)
        (host.root / ".sim/kmsg").write_text("\n".join(KMSG) + "\n")
        xml = host.libvirt_xml.read_text()
        i = xml.index("<devices>", xml.index("<name>train-c</name>")) + len("<devices>")
        host.libvirt_xml.write_text(xml[:i] + f"\n      <interface type='ethernet'><mac address='{MAC}'/>"
                                    "</interface>" + xml[i:])
        (state / "audit.jsonl").write_text(json.dumps({
            "id": "20250101-000000-abcd", "when": "2025-01-01T00:00:00+00:00",
            "action": "pin", "title": "Pin train-c", "host": "gpu-node-01", "request": {"vm": "train-c"},
            "steps": [], "undo": [], "result": "applied", "finished": "2025-01-01T00:00:01+00:00",
            "who": {"user": WHO["user"], "uid": 1007, "tty": "/dev/pts/3", "ssh_client": WHO["ssh_client"],
                    "sudo_user": WHO["sudo_user"]}}) + "\n")
        rc, snap_json, _ = cli("snapshot", "--demo", "--json")
        assert rc == 0
        rc, doctor_json, _ = cli("doctor", "--demo", "--json")
        rc, events_json, _ = cli("events", "--demo", "--json")
        archive = base / "demo.tar.gz"
        rc, _, err = cli("capture", "--demo", "-o", str(archive))
        assert rc == 0, err
        yield {"state": state, "host": host, "archive": archive, "snapshot": json.loads(snap_json),
               "doctor": json.loads(doctor_json), "events": json.loads(events_json), "err": err, "base": base}


def test_capture_reports_progress_and_every_source(demo):
    assert "reading the host" in demo["err"] and "wrote" in demo["err"]
    manifest = json.loads(members(demo["archive"])[MANIFEST][2])
    assert manifest["format"] == "nodeconsole-capture" and manifest["schema"] == 1
    assert manifest["hostname"] == "gpu-node-01" and manifest["origin"] == "demo"
    assert {k: v["status"] for k, v in manifest["sources"].items()} == {
        "sysfs": "ok", "psutil": "ok", "doctor": "ok", "kernel_log": "ok", "tree": "ok", "nvml": "ok",
        "libvirt": "ok", "audit": "ok"}
    assert manifest["sources"]["kernel_log"]["events"] == 2 and manifest["sources"]["libvirt"]["domains"] == 14
    assert set(manifest["versions"]) >= {"kernel", "driver", "libvirt", "nodeconsole"}
    assert manifest["programs"]["driverctl"]  # where the host had each program plans look for


def test_archive_is_deterministic_small_and_holds_the_layout(demo):
    data = demo["archive"].read_bytes()
    assert len(data) < 5 << 20
    assert data[4:8] == b"\0\0\0\0"  # gzip header: no time
    with tarfile.open(demo["archive"]) as tf:
        infos = tf.getmembers()
    names = [m.name for m in infos]
    assert names[0] == MANIFEST and names[1:] == sorted(names[1:])
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" for m in infos)
    assert {m.mode for m in infos if m.isreg()} == {0o644} and {m.mode for m in infos if m.isdir()} == {0o755}
    assert {"doctor.json", "nvml.json", "audit.jsonl", "libvirt/node.xml", "libvirt/capabilities.xml",
            "root/proc/cmdline", "root/.sim/kmsg"} <= set(names)
    assert sum(n.startswith("libvirt/inactive/") for n in names) == 14
    # only what was read: the demo's tree holds config space of every function, but not all of /sys
    assert len(names) < sum(1 for _ in Path(demo["host"].root).rglob("*"))
    # a symlink stays a symlink, relative, as on the host
    link = next(m for m in infos if m.name.endswith("sys/bus/pci/devices/0000:19:00.0"))
    assert link.issym() and link.linkname.startswith("../../../devices/")


def test_replay_snapshot_equals_the_live_snapshot_but_for_live_fields(demo):
    rc, out, _ = cli("snapshot", "--replay", str(demo["archive"]), "--json")
    assert rc == 0
    replay = json.loads(out)
    assert blank_live(replay) == blank_live(demo["snapshot"])
    assert all(v == "ok" for v in replay["sources"].values())
    assert all(v["cpu_percent"] is None for v in replay["vms"])  # a replay does not make up CPU use


def test_doctor_and_events_replay_as_captured(demo):
    archive = str(demo["archive"])
    rc, out, _ = cli("doctor", "--replay", archive, "--json")
    assert json.loads(out) == demo["doctor"] == json.loads(members(demo["archive"])["doctor.json"][2])
    from nodeconsole.console.doctor.model import CHECK_IDS

    assert [c["id"] for c in demo["doctor"]["checks"]] == list(CHECK_IDS)  # every check, once
    rc, out, _ = cli("events", "--replay", archive, "--json")
    assert rc == 0 and json.loads(out) == demo["events"] and len(demo["events"]) == 2
    assert {e["vm"] for e in demo["events"]} == {"train-a", "train-b"}
    rc, out, _ = cli("log", "--replay", archive)
    assert rc == 0 and "Pin train-c" in out


def test_capture_of_a_replay_is_the_same_archive_but_the_time(demo):
    again = demo["base"] / "again.tar.gz"
    rc, _, err = cli("capture", "--replay", str(demo["archive"]), "-o", str(again))
    assert rc == 0, err
    a, b = members(demo["archive"]), members(again)
    assert set(a) == set(b)
    # only the manifest may differ: its capture time (the same when both fall in one second)
    assert [n for n in a if a[n] != b[n]] in ([], [MANIFEST])
    ma, mb = json.loads(a[MANIFEST][2]), json.loads(b[MANIFEST][2])
    assert ma.pop("captured_at") != "" and mb.pop("captured_at") != ""
    assert ma == mb


def _tree_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        h.update(str(p.relative_to(d)).encode())
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_actions_refuse_on_a_replay_while_plans_show(demo):
    from nodeconsole.console.capture.replay import open_replay

    archive = str(demo["archive"])
    extracted = open_replay(archive).dir
    before = _tree_digest(extracted)
    rc, plan, _ = cli("passthrough", "4", "--replay", archive)
    assert rc == 0 and "Bind 0000:9a:00.0 to vfio-pci" in plan and "Nothing was changed" in plan
    rc, live_plan, _ = cli("passthrough", "4", "--demo")
    assert plan == live_plan  # the plan the host would have got
    for argv in (("passthrough", "4"), ("mig", "4", "3g.40gb,3g.40gb"), ("doctor", "--fix", "numa-balancing")):
        rc, out, err = cli(*argv, "--replay", archive, "--apply", "--yes")
        assert rc == 1 and "replay is read-only" in out + err, argv
    assert _tree_digest(extracted) == before


def test_the_replayed_nvml_library_refuses_changes(demo):
    import pynvml

    from nodeconsole.console.seams import replay_host

    lib = replay_host(str(demo["archive"])).nvml_lib
    saved = pynvml.nvmlLib
    try:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlDeviceSetPersistenceMode(handle, 0)
        pynvml.nvmlShutdown()
    finally:
        pynvml.nvmlLib = saved
        pynvml._nvmlGetFunctionPointer_cache.clear()


def test_nvml_state_read_through_pynvml_serves_the_same_readings(demo):
    """The live-host path: NVML read through pynvml (here from the demo's simulated library, as from
    libnvidia-ml) into nvml.json form; the simulated library serving that dump answers the NVML source
    exactly as the original did, moving metrics included (their captured values)."""
    import dataclasses

    from nodeconsole.console.capture.nvml_dump import dump_nvml
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.sources.nvml import read_nvml

    root = Root(demo["host"].root)
    original = SimulatedNvml.from_file(demo["host"].nvml_state, root=root, clock=lambda: 1234.5)
    state = dump_nvml(original)
    assert all("captured" in g and "load" not in g for g in state["gpus"])
    served = SimulatedNvml(json.loads(json.dumps(state)), root=root, clock=lambda: 99.0)
    before, after = read_nvml(original), read_nvml(served)
    assert len(before.gpus) == 7 and any(g.mig.instances for g in before.gpus)
    assert any(g.vgpu_instances for g in before.gpus) and any(g.processes for g in before.gpus)
    assert after.driver_version == before.driver_version
    assert [dataclasses.asdict(g) for g in after.gpus] == [dataclasses.asdict(g) for g in before.gpus]


def _all_text(archive: Path) -> str:
    """Every member's name, link target and content, as one text to search."""
    parts = []
    for name, (_kind, target, data) in members(archive).items():
        parts += [name, target, (data or b"").decode("utf-8", "replace")]
    return "\n".join(parts)


def test_redact_leaves_no_name_uuid_or_mac_and_the_replay_still_ties_vms_to_gpus(demo):
    redacted = demo["base"] / "redacted.tar.gz"
    rc, _, err = cli("capture", "--demo", "--redact", "-o", str(redacted))
    assert rc == 0, err
    plain, text = _all_text(demo["archive"]), _all_text(redacted)
    uuids = set(re.findall(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", plain))
    vms = [v["name"] for v in demo["snapshot"]["vms"]]
    serials = [g["serial"] for g in json.loads(members(demo["archive"])["nvml.json"][2])["gpus"]]
    assert len(uuids) >= 20 and MAC.lower() in plain and "gpu-node-01" in plain
    for secret in ["gpu-node-01", MAC, MAC.lower(), *vms, *serials, *uuids]:
        # as a word: a short VM name ("db-1") can occur inside a pseudonym's hex ("…3fdb-1a2c…")
        assert not re.search(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])", text), secret
    rc, out, _ = cli("snapshot", "--replay", str(redacted), "--json")
    snap, orig = json.loads(out), demo["snapshot"]
    assert snap["host"]["hostname"] == "host-1" and len(snap["vms"]) == len(orig["vms"])
    shape = [(g["address"], g["owner"]["kind"], len(g["owner"]["vms"]), len(g["vgpu"]["instances"]))
             for g in orig["gpus"]]
    assert [(g["address"], g["owner"]["kind"], len(g["owner"]["vms"]), len(g["vgpu"]["instances"]))
            for g in snap["gpus"]] == shape
    assert all(re.fullmatch(r"vm-\d+", v) for g in snap["gpus"] for v in g["owner"]["vms"])
    assert sorted(h["gpu"] or "" for v in snap["vms"] for h in v["hostdevs"]) == \
        sorted(h["gpu"] or "" for v in orig["vms"] for h in v["hostdevs"])
    assert json.loads(members(redacted)[MANIFEST][2])["redacted"] is True


def test_redact_replaces_who_made_the_changes_and_the_log_still_reads(demo):
    """The audit log's user names and SSH address become pseudonyms (root stays), in those fields
    only; the replayed log still lists the change, made by user-N from client-N."""
    redacted = demo["base"] / "redacted-who.tar.gz"
    rc, _, err = cli("capture", "--demo", "--redact", "-o", str(redacted))
    assert rc == 0, err
    assert all(v in _all_text(demo["archive"]) for v in WHO.values())
    text = _all_text(redacted)
    for secret in WHO.values():
        assert secret not in text, secret
    record = json.loads(members(redacted)["audit.jsonl"][2])
    assert record["who"] == {"user": "user-2", "tty": "/dev/pts/3", "ssh_client": "client-1",
                             "sudo_user": "user-1"}  # numbered in sorted order: asmith, then jdoe-ops; no uid
    assert record["action"] == "pin" and record["result"] == "applied"
    rc, out, err = cli("log", "--replay", str(redacted), "--json")
    assert rc == 0, err
    listed = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(r["action"], r["who"]["user"]) for r in listed] == [("pin", "user-2")]


def test_redact_audit_keeps_root_and_empties_lines_that_are_not_whole_records():
    """Root and its uid stay; another user's uid goes; the names are replaced wherever a record's values
    spell them (not in its keys: a user may be named like one); a torn record, a line that is not JSON
    and one nested past what the reader takes become empty lines (they may hold the same names)."""
    from nodeconsole.console.capture.redact import redact_audit

    log = (b'{"id":"a","who":{"user":"root","uid":0,"sudo_user":"bob","ssh_client":"2001:db8::5"}}\n'
           b'not json\n'
           b'{"id":"b","who":{"user":"steps","uid":1001},"steps":[{"path":"/home/steps/x","from":"2001:db8::5"}]}\n'
           b'{"id":"c","who":{"user":"bob","ssh_client":"2001:db8::5"},"title":"Giv\n'
           + b"[" * 100000 + b"]" * 100000 + b"\n")
    out = redact_audit(log).split(b"\n")
    assert json.loads(out[0])["who"] == {"user": "root", "uid": 0, "sudo_user": "user-1", "ssh_client": "client-1"}
    assert out[1] == b""
    second = json.loads(out[2])
    assert second["who"] == {"user": "user-2"}
    assert second["steps"] == [{"path": "/home/user-2/x", "from": "client-1"}]  # the key "steps" kept
    assert out[3] == b"" and out[4] == b"" and out[5] == b""
    assert b"bob" not in redact_audit(log) and b"2001:db8::5" not in redact_audit(log)


def test_redactor_is_consistent_and_keeps_case():
    red = Redactor(["node7.example.com"], ["db-1", "a&b"], key=b"k" * 32)
    u = "2968d48a-f258-58ee-864e-d036f457ad06"
    text = red.text(f"{u} {u.upper()} db-1 db-10 xdb-1 node7 node7.example.com a&amp;b 52:54:00:aa:bb:cc")
    first, upper, *rest = text.split()
    assert first != u and first.lower() == upper.lower() and upper == upper.upper()
    assert rest[:3] == ["vm-2", "db-10", "xdb-1"]  # whole names only
    assert rest[3:5] == ["host-1", "host-1.invalid"] and rest[5] == "vm-1"
    assert rest[6] != "52:54:00:aa:bb:cc" and int(rest[6][:2], 16) & 0x3 == 0x2  # locally administered
    assert red.text(text) != text or True  # applying twice is harmless (pseudonyms are no originals)
    assert red.data(b"\xff\xfe" + u.encode()) .startswith(b"\xff\xfe") and u.encode() not in red.data(u.encode())


def _malicious(path: Path, build) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        manifest = json.dumps({"format": "nodeconsole-capture", "schema": 1}).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(manifest)
        tf.addfile(info, io.BytesIO(manifest))
        info = tarfile.TarInfo("root/proc/cmdline")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"x\n"))
        build(tf)
    path.write_bytes(gzip.compress(buf.getvalue()))
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "", data: bytes = b"evil"):
    def add(tf: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        if kind == tarfile.REGTYPE:
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        else:
            tf.addfile(info)
    return add


def _chain(tf: tarfile.TarFile) -> None:
    # each link alone stays inside (q → root, r → root/q/.. → root, p → root/r/../evil → root/evil), but
    # followed for real r is root's parent and p lands beside the extraction
    _member("root/q", tarfile.SYMTYPE, ".")(tf)
    _member("root/r", tarfile.SYMTYPE, "q/..")(tf)
    _member("root/p", tarfile.SYMTYPE, "r/../evil")(tf)


@pytest.mark.parametrize("build,why", [
    (_member("../evil"), "leads out"),
    (_member("root/../../evil"), "leads out"),
    (_member("/tmp/evil"), "absolute"),
    (_member("root/sys/x", tarfile.SYMTYPE, "../../../../etc/passwd"), "points out"),
    (_member("root/sys/y", tarfile.SYMTYPE, "/etc/passwd"), "absolute"),
    (_chain, "leads out"),
    (_member("root/dev/sda", tarfile.BLKTYPE), "device"),
    (_member("root/hard", tarfile.LNKTYPE, "root/proc/cmdline"), "hard link"),
], ids=["dotdot", "dotdot-inside", "absolute", "link-out", "link-absolute", "link-chain", "device", "hardlink"])
def test_malicious_archives_are_refused(tmp_path, build, why):
    archive = _malicious(tmp_path / "bad.tar.gz", build)
    rc, out, err = cli("snapshot", "--replay", str(archive))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and why in err, err
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_bad_replay_arguments_are_one_line(tmp_path, demo):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(os.urandom(2000))
    notours = tmp_path / "plain.tar.gz"
    with tarfile.open(notours, "w:gz") as tf:
        tf.add(__file__, arcname="hello.py")
    for argv, why in (((str(tmp_path / "missing.tar.gz"),), "no such file"), ((str(junk),), "not a readable archive"),
                      ((str(notours),), "not a nodeconsole capture"),
                      ((str(demo["archive"]), "--demo"), "cannot be combined"),
                      ((str(demo["archive"]), "--root", str(tmp_path)), "cannot be combined")):
        rc, out, err = cli("snapshot", "--replay", *argv)
        assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_kernel_log_keeps_event_lines_and_their_distances():
    noise = [f"[{i}.0] eth0: link up {i}" for i in range(500)]
    log = noise[:200] + [
        "[1000.1] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "[1000.1] NVRM: (PCI ID: 10de:2330) installed in this system has",
        "[1000.1] NVRM: fallen off the bus and is not responding to commands.",
    ] + noise[200:205] + [
        "[1001.0] pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:17:00.0",
        "[1001.0] nvidia 0000:17:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer",
    ] + noise[205:] + ["[2000.0] NVRM: Xid (PCI:0000:18:00): 43, pid=1, name=x, Ch 00000008"] + noise[:30]
    raw = ("\n".join(log) + "\n").encode()
    kept = keep_lines(iter(io.BytesIO(raw)))
    assert parse(kept) == parse(raw) and len(parse(raw)) == 3
    assert len(kept) < len(raw) / 10 and kept.endswith(b"link up 29\n")  # the newest line stays


def test_a_live_hosts_kmsg_is_kept_where_a_replay_reads_it(tmp_path):
    from nodeconsole.console.capture.kernel_events import kept_logs

    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev/kmsg").write_text("\n".join(KMSG) + "\n")  # a regular file stands for the device
    (kept,) = kept_logs(Root(root), live=True)
    assert (kept.source, kept.rel, kept.events) == ("/dev/kmsg", "var/log/kern.log", 2)
    assert parse(kept.data) == parse("\n".join(KMSG))


def test_tree_never_follows_a_link_out_of_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "sys/a").mkdir(parents=True)
    (tmp_path / "secret").write_text("no")
    (root / "sys/a/out").symlink_to("../../../secret")
    (root / "sys/a/abs").symlink_to("/etc/hostname")
    (root / "sys/a/in").symlink_to("../b")
    (root / "sys/b").mkdir()
    (root / "sys/b/v").write_text("1\n")
    tree = Tree(Root(root))
    tree.add_file("sys/a/in/v", b"1\n")
    assert tree.resolve("sys/a/out") is None and tree.resolve("sys/a/abs") is None
    tree.add_listing("sys/a")
    assert tree.entries["sys/a/in"].kind == LINK and tree.entries["sys/b/v"].data == b"1\n"
    assert "sys/a/out" not in tree.entries and tree.links_out == 2
    assert tree.entries["sys/a/abs"].target == "../../etc/hostname"  # kept, relative, never followed
    assert "etc/hostname" not in tree.entries


@pytest.fixture(scope="module")
def large(scratch):
    """The large host itself (16 GPUs, 256 CPUs, 500 VMs), generated once for the module."""
    from nodeconsole.console.demo.generator import generate
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.demo.presets import large_spec
    from nodeconsole.console.seams import Seams

    host = generate(large_spec(), scratch / "large")
    root = Root(host.root)
    return Seams(root=root, libvirt_uri=host.libvirt_uri,
                 nvml_lib=SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True))


def test_large_preset_replays_as_captured(large, tmp_path):
    from nodeconsole.console.capture.take import take_capture
    from nodeconsole.console.seams import replay_host

    capture = take_capture(large)
    archive = tmp_path / "large.tar.gz"
    archive.write_bytes(capture.data)
    live = Collector(large).collect()
    replayed = Collector(replay_host(archive)).collect()
    assert len(live.vms) == 500 and len(live.gpus) == 16 and len(live.cpus) == 256
    assert {g.owner.kind for g in live.gpus} >= {"host", "vfio", "vgpu", "mig"}
    assert blank_live(replayed.to_dict()) == blank_live(live.to_dict())


@pytest.fixture(scope="module")
def trees(shared_dir, scratch):
    """Each shared real-machine tree, extracted on first use."""
    found: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in found:
            archive = shared_dir / "hosts" / f"{name}.tar.bz2"
            assert archive.exists(), f"no captured tree {archive}"
            dest = scratch / "trees" / name
            with tarfile.open(archive) as tf:
                tf.extractall(dest, filter="data")
            found[name] = _find_root(dest)
        return found[name]
    return get


@pytest.mark.parametrize("name", TREES)
def test_real_trees_replay_as_captured(trees, name, tmp_path):
    from nodeconsole.console.seams import real_host, replay_host

    root = trees(name)
    archive = tmp_path / "tree.tar.gz"
    rc, _, err = cli("capture", "--root", str(root), "-o", str(archive))
    assert rc == 0, err
    manifest = json.loads(members(archive)[MANIFEST][2])
    assert manifest["origin"] == "tree" and manifest["sources"]["nvml"]["status"] == "skipped"
    # what `snapshot --json` prints, by the collector alone (the CLI is exercised on the demo above)
    live = Collector(real_host(str(root))).collect()
    replayed = Collector(replay_host(archive)).collect()
    assert live.sources.sysfs == "ok" and live.cpus
    assert blank_live(replayed.to_dict()) == blank_live(live.to_dict())


def test_a_source_that_failed_at_capture_fails_the_same_on_replay(trees, tmp_path):
    """libvirt down when the capture was taken: recorded as failed, and the replay's snapshot says what
    the host's said (not that a captured tree has no libvirt)."""
    from nodeconsole.console.seams import real_host, replay_host

    root = trees(_tree_names()[-1])
    uri = f"test://{tmp_path}/no-such-node.xml"
    archive = tmp_path / "down.tar.gz"
    rc, _, err = cli("capture", "--root", str(root), "--libvirt", uri, "-o", str(archive))
    assert rc == 0 and "libvirt failed" in err
    manifest = json.loads(members(archive)[MANIFEST][2])
    assert manifest["sources"]["libvirt"]["status"] == "failed" and "no-such-node.xml" in \
        manifest["sources"]["libvirt"]["reason"]
    live = Collector(real_host(str(root), uri)).collect()
    replayed = Collector(replay_host(archive)).collect()
    assert live.sources.libvirt.startswith("unavailable: cannot connect")
    assert replayed.sources == live.sources
    assert blank_live(replayed.to_dict()) == blank_live(live.to_dict())
