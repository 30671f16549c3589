"""A VM's facts as the diff compares them, in one form from either source: a domain definition (the
VMs' inactive XML a capture holds) or a snapshot's VM (its live definition when it runs).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

from nodeconsole.console.cpulist import format_cpulist

_UNITS = {"b": 1, "bytes": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1024 ** 2, "mib": 1024 ** 2,
          "mb": 1000 ** 2, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1000 ** 3, "t": 1024 ** 4,
          "tib": 1024 ** 4, "tb": 1000 ** 4}


def _kib(el: ET.Element | None) -> int | None:
    if el is None:
        return None
    try:
        value = int((el.text or "").strip())
    except ValueError:
        return None
    factor = _UNITS.get((el.get("unit") or "KiB").strip().lower())
    return value * factor // 1024 if factor is not None else None


def domain_facts(xml: str) -> tuple[str, dict[str, Any]]:
    """A domain definition's name and the facts the diff compares: vCPUs, memory, pins, emulator pins,
    numatune, huge pages and hostdevs (ValueError when the XML cannot be read)."""
    from nodeconsole.console.libvirt_xml import parse_domain

    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(str(e)) from None
    parsed = parse_domain(xml)
    name = (root.findtext("name") or "").strip()
    return name, {
        "uuid": (root.findtext("uuid") or "").strip().lower() or None,
        "vcpus": parsed.vcpus,
        "memory_kib": _kib(root.find("memory")),
        "current_memory_kib": _kib(root.find("currentMemory")),
        "pins": _pins((p.vcpu, p.cpus) for p in parsed.pins),
        "emulator_pins": format_cpulist(parsed.emulator_pins) or None,
        "numatune": _numatune(parsed.numa_mode, parsed.numa_nodeset),
        "hugepages_kib": parsed.hugepages_kib,
        "hostdevs": _hostdevs((h.type, h.address, h.uuid) for h in parsed.hostdevs),
    }


def _pins(pins: Iterable[tuple[int, Iterable[int]]]) -> dict[str, str]:
    return {str(vcpu): format_cpulist(cpus) for vcpu, cpus in sorted(pins, key=lambda p: p[0])}


def _numatune(mode: str | None, nodeset: Iterable[int]) -> str | None:
    return f"{mode} {format_cpulist(nodeset)}".strip() if mode else None


def _hostdevs(devs: Iterable[tuple[str, str | None, str | None]]) -> list[str]:
    return sorted(f"{kind} {address or uuid or '?'}" for kind, address, uuid in devs)


def live_vm_facts(vm: Mapping[str, Any]) -> dict[str, Any]:
    """A snapshot VM's facts (its live definition when it runs), in domain_facts' form."""
    return {
        "uuid": (vm.get("uuid") or "").lower() or None,
        "state": vm.get("state"),
        "vcpus": vm.get("vcpus"),
        "pins": _pins((int(p["vcpu"]), p.get("cpus") or ()) for p in vm.get("pins") or ()),
        "emulator_pins": format_cpulist(vm.get("emulator_pins") or ()) or None,
        "numatune": _numatune(vm.get("numa_mode"), vm.get("numa_nodeset") or ()),
        "hugepages_kib": vm.get("hugepages_kib"),
        "hostdevs": _hostdevs((h.get("type") or "?", h.get("address"), h.get("uuid")) for h in vm.get("hostdevs") or ()),
    }
