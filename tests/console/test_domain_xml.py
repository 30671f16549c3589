"""The one domain-XML editor (console/domain_xml.py + console/domain_edits.py) on libvirt's own test data:
random sequences of the edits actions make (hostdevs PCI/mdev, vcpupin, emulatorpin, numatune) on the
real-world domain definitions in shared/libvirt-domains. Every result parses, says what was asked, keeps
every byte outside the edited element, and the inverse edits give back the original bytes exactly."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeconsole.console.domain_edits import (
    add_mdev_hostdev,
    add_pci_hostdev,
    put_hostdev,
    set_emulatorpin,
    set_numa_memory,
    set_vcpupin,
    take_hostdev,
)
from nodeconsole.console.domain_xml import Doc, scan
from nodeconsole.console.libvirt_xml import parse_domain

PCI = [f"0000:ab:00.{f}" for f in range(4)]
MDEV = [f"c0ffee00-0000-4000-8000-00000000000{i}" for i in range(4)]
CPUSETS = [None, "0", "1-3", "0,2", "4-7,^5", "12"]
MODES = [None, "strict", "interleave", "preferred"]

ops = st.one_of(
    st.tuples(st.just("vcpupin"), st.integers(0, 5), st.sampled_from(CPUSETS)),
    st.tuples(st.just("emulatorpin"), st.sampled_from(CPUSETS)),
    st.tuples(st.just("numa"), st.sampled_from(MODES), st.sampled_from([None, "0", "0-1", "1"])),
    st.tuples(st.just("add_pci"), st.sampled_from(PCI), st.booleans(), st.none() | st.integers(0, 3)),
    st.tuples(st.just("add_mdev"), st.sampled_from(MDEV), st.none() | st.integers(0, 3)),
    st.tuples(st.just("take"), st.sampled_from(["pci", "mdev"]), st.integers(0, 9)),
)


class Domains(dict[str, str]):
    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"<{len(self)} libvirt test domains>"


@pytest.fixture(scope="module")
def domains(shared_dir: Path) -> Domains:
    files = sorted((shared_dir / "libvirt-domains").glob("*.xml"))
    assert len(files) >= 31, "the libvirt test domains are missing from shared/libvirt-domains"
    return Domains({f.name: f.read_text(encoding="utf-8") for f in files})


def _span(xml: str, tag: str) -> tuple[int, int] | None:
    """Byte span of the domain's child `tag`, whole lines when it has its lines to itself."""
    data = xml.encode()
    el = scan(data).kid(tag)
    if el is None:
        return None
    start = data.rfind(b"\n", 0, el.start) + 1
    nl = data.find(b"\n", el.end)
    end = nl + 1 if nl >= 0 and not data[el.end:nl].strip() else el.end
    return (start, end) if not data[start:el.start].strip() else (el.start, el.end)


def _changed_only_inside(old: str, new: str, tag: str) -> None:
    """Outside the domain's child `tag` not one byte differs: the two documents, each without that
    element (with its lines), are the same bytes."""
    def without(xml: str) -> bytes:
        span = _span(xml, tag)
        data = xml.encode()
        return data if span is None else data[:span[0]] + data[span[1]:]
    assert without(old) == without(new), f"bytes outside <{tag}> changed"


def _attrs(xml: str, path: str, **match: str) -> list[dict[str, str]]:
    return [dict(e.attrib) for e in ET.fromstring(xml).findall(path)
            if all(e.get(k) == v for k, v in match.items())]


def _apply(xml: str, op: tuple) -> tuple[str, tuple | None, str]:
    """(new XML, the inverse op or None, the domain child the edit may touch); checks what it says."""
    kind = op[0]
    if kind == "vcpupin":
        _, v, cpuset = op
        old = [p["cpuset"] for p in _attrs(xml, "cputune/vcpupin", vcpu=str(v))]
        new = set_vcpupin(xml, v, cpuset)
        assert [p["cpuset"] for p in _attrs(new, "cputune/vcpupin", vcpu=str(v))] == ([cpuset] if cpuset else [])
        return new, ("vcpupin", v, old[0] if old else None), "cputune"
    if kind == "emulatorpin":
        old = [p["cpuset"] for p in _attrs(xml, "cputune/emulatorpin")]
        new = set_emulatorpin(xml, op[1])
        assert [p["cpuset"] for p in _attrs(new, "cputune/emulatorpin")] == ([op[1]] if op[1] else [])
        return new, ("emulatorpin", old[0] if old else None), "cputune"
    if kind == "numa":
        mem = _attrs(xml, "numatune/memory")
        if mem and ("placement" in mem[0] or "nodeset" not in mem[0]):
            return xml, None, "numatune"  # placement='auto' is replaced, not restorable: not drawn
        new = set_numa_memory(xml, op[1], op[2])
        got = _attrs(new, "numatune/memory")
        assert [(m.get("mode"), m.get("nodeset")) for m in got] == ([(op[1], op[2])] if op[2] else [])
        inverse = ("numa", mem[0].get("mode"), mem[0]["nodeset"]) if mem else ("numa", None, None)
        return new, inverse, "numatune"
    if kind in ("add_pci", "add_mdev"):
        before = parse_domain(xml).hostdevs
        new = add_pci_hostdev(xml, op[1], op[2], op[3]) if kind == "add_pci" else \
            add_mdev_hostdev(xml, op[1], index=op[2])
        key = {"pci": op[1], "mdev": op[1]}
        hk = "pci" if kind == "add_pci" else "mdev"
        assert any(h.type == hk and (h.address or h.uuid) == key[hk] for h in parse_domain(new).hostdevs)
        added = new != xml
        assert added or any((h.address or h.uuid) == op[1] for h in before)
        return new, ("take_key", hk, op[1]) if added else None, "devices"
    # take: the n-th hostdev of a kind (original ones included), put back exactly by the inverse
    hostdevs = [h for h in parse_domain(xml).hostdevs if h.type == op[1]]
    if not hostdevs:
        return xml, None, "devices"
    h = hostdevs[op[2] % len(hostdevs)]
    return _take(xml, op[1], h.address if op[1] == "pci" else h.uuid)


def _take(xml: str, kind: str, key: str | None) -> tuple[str, tuple | None, str]:
    assert key is not None
    taken = take_hostdev(xml, kind, key)
    if taken is None:  # an <interface type='hostdev'>: not a <hostdev> element
        return xml, None, "devices"
    ET.fromstring(taken.text)  # the element's exact text stands alone
    return taken.xml, ("put", taken.text, taken.child), "devices"


def _undo(xml: str, inverse: tuple) -> str:
    kind = inverse[0]
    if kind == "vcpupin":
        return set_vcpupin(xml, inverse[1], inverse[2])
    if kind == "emulatorpin":
        return set_emulatorpin(xml, inverse[1])
    if kind == "numa":
        return set_numa_memory(xml, inverse[1], inverse[2])
    if kind == "take_key":
        return _take(xml, inverse[1], inverse[2])[0]
    return put_hostdev(xml, inverse[1], child=inverse[2])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_edit_sequences_keep_the_rest_and_undo_exactly(domains, data):
    name = data.draw(st.sampled_from(sorted(domains)), label="domain")
    original = xml = domains[name]
    inverses = []
    for op in data.draw(st.lists(ops, min_size=1, max_size=8), label="ops"):
        new, inverse, tag = _apply(xml, op)
        ET.fromstring(new)  # parses
        Doc(new)  # and is a domain
        _changed_only_inside(xml, new, tag)
        if inverse is not None:
            inverses.append(inverse)
        xml = new
    for inverse in reversed(inverses):
        xml = _undo(xml, inverse)
    assert xml == original


def test_every_domain_round_trips_each_kind_of_edit(domains):
    for name, original in domains.items():
        for op in [("vcpupin", 0, "3"), ("vcpupin", 1, None), ("emulatorpin", "2-3"), ("numa", "interleave", "1"),
                   ("add_pci", PCI[0], True, 0), ("add_mdev", MDEV[0], None), ("take", "pci", 0),
                   ("take", "mdev", 0)]:
            new, inverse, tag = _apply(original, op)
            _changed_only_inside(original, new, tag)
            assert inverse is None or _undo(new, inverse) == original, (name, op)


def test_a_broken_splice_is_refused():
    doc = Doc("<domain><name>x</name></domain>")
    with pytest.raises(ValueError, match="not well formed"):
        doc.insert(doc.root, b"<broken>")
    assert doc.text == "<domain><name>x</name></domain>"
