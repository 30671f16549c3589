"""`capture --redact` by tokens: a name is replaced wherever it occurs bounded by non-alphanumerics (a
VM's disk path, the host's FQDN and names built on it, a user in a description, a process in a kernel
line), and never where it is the capture's structure (a host called `node`, VMs called `dev`, `default`,
`memory` leave `<node>`, `root/dev`, `etc/default/grub` and `<memory>` alone). A property test: for
generated names (structural words, names with `.` and `-`), no name is left in any member and the
replay of the redacted capture equals the original's but for the pseudonyms.

One demo host per module; each test sets its names and extras on a fresh copy of the demo's editable
files (the libvirt definitions, NVML's state, the host name, the kernel log, the audit log)."""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from nodeconsole.console.capture import MANIFEST
from nodeconsole.console.capture.redact import _KEEP_KEYS
from nodeconsole.console.capture.redact_members import _ENUM_ATTRS, _ENUM_TAG_ATTRS, _ENUM_TEXT
from tests.console.test_capture import cli, members

EDITED = ("libvirt.xml", "nvml.json", "root/etc/hostname", "root/proc/sys/kernel/hostname", "root/.sim/kmsg",
          "audit.jsonl")
PSEUDONYM = re.compile(r"(?:host|vm|user|client|proc|serial|domain)-\d+(?:\.invalid)?")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
DISK = ("<disk type='file' device='disk'><source file='/var/lib/libvirt/images/{vm}.qcow2'/>"
        "<target dev='vda' bus='virtio'/></disk>")
XID = "3,300,1900000000,-;NVRM: Xid (PCI:0000:19:00): 79, pid=4321, name={name}, GPU has fallen off the bus."


class Demo:
    def __init__(self, state: Path, out: Path) -> None:
        self.state, self.out = state, out
        self.saved = {rel: (state / rel).read_bytes() if (state / rel).exists() else None for rel in EDITED}
        self.n = 0
        self._baseline: dict | None = None

    def reset(self) -> None:
        for rel, data in self.saved.items():
            if data is None:
                (self.state / rel).unlink(missing_ok=True)
            else:
                (self.state / rel).write_bytes(data)

    def edit(self, rel: str, fn) -> None:
        path = self.state / rel
        path.write_text(fn(path.read_text()))

    def rename_vm(self, old: str, new: str) -> None:
        self.edit("libvirt.xml", lambda x: x.replace(f"<name>{old}</name>", f"<name>{new}</name>"))
        self.edit("nvml.json", lambda x: x.replace(f'"vm_id": "{old}"', f'"vm_id": "{new}"'))

    def add_to_vm(self, vm: str, xml: str) -> None:
        def add(text: str) -> str:
            i = text.index("<devices>", text.index(f"<name>{vm}</name>")) + len("<devices>")
            return text[:i] + xml + text[i:]
        self.edit("libvirt.xml", add)

    def describe(self, vm: str, text: str) -> None:
        self.edit("libvirt.xml", lambda x: x.replace(f"<name>{vm}</name>",
                                                     f"<name>{vm}</name><description>{text}</description>"))

    def set_hostname(self, etc: str, kernel: str | None = None) -> None:
        (self.state / "root/etc/hostname").write_text(etc + "\n")
        (self.state / "root/proc/sys/kernel/hostname").write_text((kernel or etc) + "\n")

    def baseline(self) -> dict:
        """A plain capture of the demo as the property test edits it, with the demo's own names: its
        paths, sources and replay's shape (taken once)."""
        if self._baseline is None:
            self.reset()
            self.add_to_vm("train-a", DISK.format(vm="train-a"))
            self.describe("train-b", "train-b@gpu-node-01-bmc")
            (self.state / "root/.sim/kmsg").write_text(XID.format(name="db-1-worker") + "\n")
            plain = self.capture(redact=False)
            self._baseline = {"paths": _paths(plain), "sources": _sources(plain), "shape": _shape(_snapshot(plain))}
            self.reset()
        return self._baseline

    def capture(self, redact: bool = True) -> Path:
        self.n += 1
        path = self.out / f"c{self.n}.tar.gz"
        rc, _, err = cli("capture", "--demo", *(["--redact"] if redact else []), "-o", str(path))
        assert rc == 0, err
        return path


@pytest.fixture(scope="module")
def demo_host(tmp_path_factory):
    from nodeconsole.console.demo.state import ensure_demo

    base = Path(tempfile.mkdtemp(prefix="nodeconsole-test-redact-", dir=tmp_path_factory.getbasetemp()))
    state = base / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NODECONSOLE_STATE_DIR", str(state))
        ensure_demo(state)
        yield Demo(state, base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def demo(demo_host):
    demo_host.reset()
    yield demo_host
    demo_host.reset()


def _texts(archive: Path) -> dict[str, str]:
    return {name: (data or b"").decode("utf-8", "replace") for name, (_k, _t, data) in members(archive).items()}


def _bounded(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![^\W_]){re.escape(name)}(?![^\W_])")


def _snapshot(archive: Path) -> dict:
    rc, out, err = cli("snapshot", "--replay", str(archive), "--json")
    assert rc == 0, err
    return json.loads(out)


def test_a_vm_name_inside_its_disk_path_is_replaced(demo):
    demo.add_to_vm("train-a", DISK.format(vm="train-a"))
    texts = _texts(demo.capture())
    libvirt = "\n".join(t for n, t in texts.items() if n.startswith("libvirt/"))
    assert "train-a" not in "\n".join(texts.values())
    disks = re.findall(r"/var/lib/libvirt/images/([^'\"]+)\.qcow2", libvirt)
    assert disks and all(re.fullmatch(r"vm-\d+", d) for d in disks)
    assert "type=\"file\" device=\"disk\"" in libvirt and "bus=\"virtio\"" in libvirt  # enumerations kept


def test_the_fqdn_its_labels_and_names_built_on_it_are_replaced(demo):
    demo.set_hostname("gpu-node-01.example.com", "gpu-node-01")
    demo.describe("train-a", "BMC at gpu-node-01-bmc, console gpu-node-01.example.com, mail ops@example.com")
    archive = demo.capture()
    everything = "\n".join(_texts(archive).values())
    assert not _bounded("gpu-node-01").search(everything) and not _bounded("example").search(everything)
    (description,) = re.findall(r"<description>(.*?)</description>", _texts(archive)["libvirt/node.xml"])
    assert description == "BMC at host-1-bmc, console host-1.invalid, mail ops@domain-1.com"
    assert _texts(archive)["root/etc/hostname"] == "host-1.invalid\n"
    assert _snapshot(archive)["host"]["hostname"] == "host-1"


def test_a_user_in_a_description_is_replaced_as_in_the_audit_log(demo):
    (demo.state / "audit.jsonl").write_text(json.dumps({
        "id": "20250101-000000-abcd", "when": "2025-01-01T00:00:00+00:00", "action": "pin", "title": "Pin train-c",
        "host": "gpu-node-01", "request": {"vm": "train-c"}, "steps": [], "undo": [], "result": "applied",
        "who": {"user": "alice", "uid": 1001}}) + "\n")
    demo.describe("train-c", "owner alice@corp, ask alice.")
    archive = demo.capture()
    assert not _bounded("alice").search("\n".join(_texts(archive).values()))
    assert "<description>owner user-1@corp, ask user-1.</description>" in _texts(archive)["libvirt/node.xml"]
    assert json.loads(_texts(archive)["audit.jsonl"])["who"] == {"user": "user-1"}


def test_a_process_name_in_a_kernel_line_is_replaced_and_the_event_still_reads(demo):
    (demo.state / "root/.sim/kmsg").write_text(XID.format(name="train-a-worker") + "\n")
    archive = demo.capture()
    kmsg = _texts(archive)["root/.sim/kmsg"]
    assert "train-a-worker" not in kmsg and "worker" not in kmsg and re.search(r"name=proc-\d+, GPU", kmsg)
    rc, out, err = cli("events", "--replay", str(archive), "--json")
    assert rc == 0, err
    assert [e["xid"] for e in json.loads(out)] == [79]


def _shape(snap: dict) -> dict:
    """What a replay shows but for the names: the VMs and their states, the NUMA nodes, the GPUs and
    their owners, every source."""
    return {"vms": sorted((v["state"], v["vcpus"], v["memory_kib"]) for v in snap["vms"]),
            "numa": [(n["id"], n["cpus"], n["memory_kib"]) for n in snap["numa_nodes"]],
            "gpus": [(g["address"], g["owner"]["kind"], len(g["owner"]["vms"])) for g in snap["gpus"]],
            "sources": snap["sources"]}


def _sources(archive: Path) -> dict:
    return {k: v["status"] for k, v in json.loads(members(archive)[MANIFEST][2])["sources"].items()}


def _paths(archive: Path) -> list[str]:
    """The members' paths and link targets, UUIDs masked (they are pseudonyms; nothing else may change)."""
    return sorted(UUID.sub("U", f"{n} {t}") for n, (_k, t, _d) in members(archive).items())


def test_a_host_called_node_keeps_the_node_file_and_the_numa_nodes(demo):
    demo.set_hostname("node")
    plain, redacted = demo.capture(redact=False), demo.capture()
    assert ET.fromstring(_texts(redacted)["libvirt/node.xml"]).tag == "node"
    assert _paths(redacted) == _paths(plain)  # root/sys/devices/system/node/… kept
    snap = _snapshot(redacted)
    assert snap["host"]["hostname"] == "host-1" and _shape(snap) == _shape(_snapshot(plain))
    assert len(snap["numa_nodes"]) == 2 and len(snap["vms"]) == 14 and snap["sources"]["libvirt"] == "ok"


def test_vms_called_dev_default_memory_keep_root_dev_etc_default_and_memory(demo):
    for old, new in (("train-a", "dev"), ("train-b", "default"), ("db-1", "memory")):
        demo.rename_vm(old, new)
    plain, redacted = demo.capture(redact=False), demo.capture()
    assert {"root/dev/kvm", "root/etc/default/grub"} <= set(members(redacted))
    assert _paths(redacted) == _paths(plain)
    node = ET.fromstring(_texts(redacted)["libvirt/node.xml"])
    assert node.find("memory") is not None and all(d.find("memory") is not None for d in node.iter("domain"))
    names = [d.findtext("name") for d in node.iter("domain")]
    assert not {"dev", "default", "memory"} & set(names) and all(re.fullmatch(r"vm-\d+", n) for n in names)
    snap = _snapshot(redacted)
    assert _shape(snap) == _shape(_snapshot(plain)) and _sources(redacted) == _sources(plain)


def _leftovers(path: str, text: str, name: str) -> list[str]:
    """Where `name` is still spelled in a member, outside the structure (XML tags, attribute names and
    enumerated values, JSON keys and enumerations) and the pseudonyms."""
    found = _bounded(name)
    hits = []
    if path.endswith(".xml"):
        for el in ET.fromstring(text).iter():
            tag = el.tag.rsplit("}", 1)[-1]
            values = [] if tag in _ENUM_TEXT else [el.text or ""]
            values += [el.tail or ""] + [v for k, v in el.attrib.items()
                                         if k not in _ENUM_ATTRS and (tag, k) not in _ENUM_TAG_ATTRS]
            hits += [v for v in values if found.search(PSEUDONYM.sub("", v))]
    elif path.endswith(".json") or path.endswith(".jsonl"):
        def walk(v, key=""):
            if isinstance(v, dict):
                return [h for k, x in v.items() for h in walk(x, k)]
            if isinstance(v, list):
                return [h for x in v for h in walk(x, key)]
            ok = isinstance(v, str) and key not in _KEEP_KEYS and v != "ok"
            return [v] if ok and found.search(PSEUDONYM.sub("", v)) else []
        for line in text.splitlines() if path.endswith(".jsonl") else [text]:
            hits += walk(json.loads(line)) if line.strip() else []
    elif found.search(PSEUDONYM.sub("", text)):
        hits.append(text)
    return hits


STRUCTURAL = ["node", "dev", "default", "memory", "domain", "devices", "name", "cpu", "uuid", "source", "pci",
              "strict", "static", "hostdev", "address", "test", "sys", "proc", "etc", "grub", "vcpu", "mdev"]
NAMES = st.sampled_from(STRUCTURAL) | st.from_regex(r"[a-z][a-z0-9]{1,5}(?:[.-][a-z0-9]{1,4}){1,2}", fullmatch=True)
DEMO_VMS = ["train-a", "train-b", "db-1"]


# No shrinking: an example takes seconds (the failing example is reported as generated).
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=NAMES, vms=st.lists(NAMES, min_size=3, max_size=3, unique=True))
def test_property_no_name_is_left_and_the_replay_is_the_same_but_for_pseudonyms(demo_host, host, vms):
    demo = demo_host
    demo.reset()
    names = [host, *vms]
    if len(set(names)) < len(names) or set(names) & {"train-c", "build-1"}:
        return  # each a different name, none another demo VM's
    demo.set_hostname(host)
    for old, new in zip(DEMO_VMS, vms):
        demo.rename_vm(old, new)
    demo.add_to_vm(vms[0], DISK.format(vm=vms[0]))
    demo.describe(vms[1], f"{vms[1]}@{host}-bmc")
    (demo.state / "root/.sim/kmsg").write_text(XID.format(name=f"{vms[2]}-worker") + "\n")
    redacted = demo.capture()
    texts = _texts(redacted)
    for name in names:
        for path, text in texts.items():
            assert not _leftovers(path, text, name), (name, path)
    plain = demo.baseline()  # the demo's own names: renaming changes nothing else of a plain capture
    assert _paths(redacted) == plain["paths"]
    snap = _snapshot(redacted)
    assert snap["host"]["hostname"] == ("host-1.invalid" if "." in host else "host-1")  # an FQDN's pseudonym
    assert _shape(snap) == plain["shape"]
    assert _sources(redacted) == plain["sources"] and "failed" not in plain["sources"].values()
    assert not {host, *vms} & {v["name"] for v in snap["vms"]}
    demo.reset()
