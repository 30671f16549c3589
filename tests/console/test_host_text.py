"""Host-supplied text is data: hostile names (markup, escape sequences, 3,000 characters) through every
source — sysfs (hostname, a driver name), NVML (GPU names, driver version), libvirt (VM names) and the
audit log (a record title) — reach the CLI's output with visible escapes, never as control bytes; the
snapshot (and `snapshot --json`) keeps the full value."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nodeconsole.console.hosttext import CELL_MAX, VisibleWriter, clip, lines, show, visible

REPO = Path(__file__).resolve().parents[2]

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
C1_CSI = "\x9b31m"
HOSTNAME = f"gpu-node{OSC_TITLE}{CLEAR}"
DRIVER_VERSION = f"550.90{C1_CSI}"
GPU_NAME = f"NVIDIA H100{OSC_TITLE}"
GPU_NAME_MARKUP = "[bold red]x"
DRIVER = f"snd_hda{CLEAR}[bold red]x"  # a driver name (sysfs link) with an escape and markup
VM_CLICK = "[@click=app.quit]q"
VM_LINK = "[link=http:x]y"  # libvirt refuses "/" in a name; NVML names carry the full link markup
GPU_NAME_LINK = "[link=http://x]y[/link]"
VM_LONG = "v" * 3000
AUDIT_TITLE = f"Bind GPU {OSC_TITLE}{CLEAR}{C1_CSI} to vfio-pci"
RAW = ("\x1b", "\x07", "\x9b")  # what must never reach a terminal from host text

IDLE = "0000:9a:00.0"  # the demo's idle GPU on nvidia (console index 4); train-c (shut off) holds it
AUDIO = "0000:18:00.1"  # GPU 0's audio function: its driver is renamed


def hostile_demo(state: Path) -> Path:
    """Generate the demo host in `state`, then give it hostile host text through every source."""
    from nodeconsole.console.demo.state import ensure_demo

    host = ensure_demo(state)
    root = Path(host.root)
    (root / "proc/sys/kernel/hostname").write_text(HOSTNAME + "\n")
    # a driver name: the device's `driver` link points at a driver directory of that name
    drivers = root / "sys/bus/pci/drivers"
    (drivers / DRIVER).mkdir(parents=True, exist_ok=True)
    dev = (root / "sys/bus/pci/devices" / AUDIO).resolve()
    link = dev / "driver"
    target = os.readlink(link)
    link.unlink()
    os.symlink(target.rsplit("/", 1)[0] + "/" + DRIVER, link)
    # NVML: driver version and GPU names
    nvml = json.loads(Path(host.nvml_state).read_text())
    nvml["driver_version"] = DRIVER_VERSION
    for i, g in enumerate(nvml["gpus"]):
        g["name"] = (GPU_NAME, GPU_NAME_MARKUP + OSC_TITLE, GPU_NAME_LINK)[i % 3]
    Path(host.nvml_state).write_text(json.dumps(nvml))
    # libvirt: XML cannot carry control characters, so VM names are markup and length
    xml = Path(state / "libvirt.xml")
    text = xml.read_text()
    for old, new in (("train-a", VM_CLICK), ("train-b", VM_LINK), ("vgpu-desk-1", VM_LONG)):
        text = text.replace(f"<name>{old}</name>", f"<name>{new}</name>")
    xml.write_text(text)
    # the audit log: a record whose title carries escapes (as a change to a hostile GPU name would)
    record = {"id": "20250101-000000-beef", "when": "2025-01-01T00:00:00+00:00", "who": {"user": "root"},
              "action": "passthrough", "result": "applied", "title": AUDIT_TITLE, "steps": [], "undo": []}
    with open(state / "audit.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return state


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NODECONSOLE_STATE_DIR": str(state)}
    code = "import sys; from nodeconsole.actions.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def _assert_clean(out: str) -> None:
    for ch in RAW:
        assert ch not in out, f"raw {ch!r} in output: {out[max(0, out.find(ch) - 60):out.find(ch) + 60]!r}"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    return hostile_demo(tmp_path_factory.mktemp("hostile") / "demo")


# -- the sanitiser ----------------------------------------------------------------------------------

def test_visible_escapes_control_characters():
    assert visible(OSC_TITLE) == "\\x1b]0;pwned\\x07"
    assert visible(CLEAR) == "\\x1b[2J"
    assert visible(C1_CSI) == "\\x9b31m"
    assert visible("a\u202eb\u2028c\x7f\x00") == "a\\u202eb\\u2028c\\x7f\\x00"
    assert visible("plain name [b]x[/b] ü 日本") == "plain name [b]x[/b] ü 日本"  # markup is text here
    assert visible("a\nb\tc") == "a\\x0ab\\x09c"
    assert visible("a\nb\x1b", keep="\n") == "a\nb\\x1b"
    assert visible(None) == "" and visible(7) == "7"
    for s in (HOSTNAME, DRIVER_VERSION, AUDIT_TITLE, "x\u200bz"):
        once = visible(s)
        assert visible(once) == once  # idempotent: the output holds no control character
        assert not re.search(r"[\x00-\x1f\x7f-\x9f]", once)


def test_cap_applies_to_display_only():
    assert clip("abc", 3) == "abc" and clip("abcd", 3) == "ab…"
    assert show(VM_LONG) == "v" * (CELL_MAX - 1) + "…"
    assert len(show(HOSTNAME, 200)) <= 200
    assert lines("a\x1b\n" + "b" * 50, limit=10) == "a\\x1b\nbbbbbbbbb…"


def test_visible_writer_keeps_newlines_and_delegates():
    buf = io.StringIO()
    w = VisibleWriter(buf)
    print(f"title {OSC_TITLE}", "\tx", file=w)  # type: ignore[arg-type]
    assert buf.getvalue() == "title \\x1b]0;pwned\\x07 \tx\n"
    assert w.getvalue() == buf.getvalue() and w.wrapped is buf


# -- the snapshot keeps the full value; the CLI prints visible escapes ------------------------------

def test_snapshot_model_keeps_full_values(hostile, monkeypatch):
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.seams import demo_host

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(hostile))
    snap = Collector(demo_host()).collect()
    assert snap.host.hostname == HOSTNAME
    assert snap.nvml_driver_version == DRIVER_VERSION
    assert {g.name for g in snap.gpus} >= {GPU_NAME, GPU_NAME_MARKUP + OSC_TITLE, GPU_NAME_LINK}
    assert snap.pci(AUDIO).driver == DRIVER
    assert {VM_CLICK, VM_LINK, VM_LONG} <= {v.name for v in snap.vms}


def test_snapshot_summary_is_clean_and_capped(hostile):
    r = _cli(hostile, "snapshot", "--demo")
    assert r.returncode == 0, r.stderr
    _assert_clean(r.stdout + r.stderr)
    assert "host gpu-node\\x1b]0;pwned\\x07\\x1b[2J" in r.stdout
    assert "NVIDIA H100\\x1b]0;pwn" in r.stdout and VM_CLICK in r.stdout and VM_LINK in r.stdout
    assert VM_LONG not in r.stdout and show(VM_LONG) in r.stdout  # capped for display
    assert max(len(line) for line in r.stdout.splitlines()) < 400


def test_snapshot_json_has_full_json_escaped_values(hostile):
    r = _cli(hostile, "snapshot", "--demo", "--json")
    assert r.returncode == 0, r.stderr
    _assert_clean(r.stdout)
    assert "\\u001b]0;pwned\\u0007" in r.stdout and "\\u009b31m" in r.stdout  # JSON's own escapes
    snap = json.loads(r.stdout)
    assert snap["host"]["hostname"] == HOSTNAME and snap["nvml_driver_version"] == DRIVER_VERSION
    assert VM_LONG in {v["name"] for v in snap["vms"]}  # the whole 3,000 characters
    assert DRIVER in {d["driver"] for d in snap["pci_devices"]}


def test_printed_plan_is_clean(hostile):
    before = (hostile / "audit.jsonl").read_text()
    r = _cli(hostile, "passthrough", "4", "--vm", VM_CLICK, "--demo")
    _assert_clean(r.stdout + r.stderr)
    assert "(0000:9a:00.0, [bold red]x\\x1b]0;pwned\\x07, nvidia-smi 3) through to VM [@click=app.quit]q" in r.stdout
    assert "Nothing was changed" in r.stdout, r.stdout + r.stderr
    assert (hostile / "audit.jsonl").read_text() == before


def test_unknown_vm_usage_error_is_clean(hostile):
    r = _cli(hostile, "passthrough", "4", "--vm", f"nope{OSC_TITLE}", "--demo")
    assert r.returncode == 2
    _assert_clean(r.stdout + r.stderr)


def test_log_is_clean(hostile):
    r = _cli(hostile, "log", "--demo")
    assert r.returncode == 0, r.stderr
    _assert_clean(r.stdout)
    assert "Bind GPU \\x1b]0;pwned\\x07\\x1b[2J\\x9b31m to vfio-pci" in r.stdout
    j = _cli(hostile, "log", "--demo", "--json")
    _assert_clean(j.stdout)
    assert any(json.loads(line)["title"] == AUDIT_TITLE for line in j.stdout.splitlines())


def test_applied_change_then_log_and_undo_are_clean(tmp_path):
    """A real change to the GPU with a hostile NVML name: its audit title holds the escapes (JSON keeps
    them escaped on disk); the apply output, `log` and the undo plan show them visibly."""
    state = hostile_demo(tmp_path / "demo")
    done = _cli(state, "passthrough", "4", "--demo", "--apply", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_clean(done.stdout + done.stderr)
    assert b"\x1b" not in (state / "audit.jsonl").read_bytes()
    log = _cli(state, "log", "--demo")
    _assert_clean(log.stdout + log.stderr)
    assert "(0000:9a:00.0, [bold red]x\\x1b]0;pwned\\x07, nvidia-smi 3) through" in log.stdout
    undo = _cli(state, "undo", "--demo")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    _assert_clean(undo.stdout + undo.stderr)
    assert "\\x1b]0;pwned\\x07" in undo.stdout
