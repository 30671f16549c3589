"""A VM's size and memory layout, in the VM backend's terms (console/vms/backend.py `shape`/`set_shape`):
vCPUs, memory, hugepage backing, the host NUMA policy, guest NUMA cells and threads per core.

`VmShape` is what `prepare` asks of a VM and what a `vm_shape` operation holds (`to_dict`/`from_dict`,
actions/shape_steps.py). Constructing one checks nothing (a definition read back may be odd); `problems`
says what makes it unfit to write and `from_dict`/`check` refuse it (ValueError, one line per problem).
CPU and node sets are libvirt's text ("0-7"); `from_dict` writes them the way libvirt does, and `key`
compares them as sets.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.libvirt_xml import NUMA_MODES, parse_libvirt_set

MAX_VCPUS = 4096  # libvirt's QEMU limit is lower (and per machine type); this only rejects nonsense


@dataclass(frozen=True)
class GuestCell:
    """One guest NUMA cell (<cpu><numa><cell id cpus memory>) and the host nodes its memory comes from
    (<numatune><memnode cellid mode='strict' nodeset>)."""
    id: int
    cpus: str  # guest vCPU list as libvirt writes it, "0-7"
    memory_kib: int
    host_nodes: str  # host nodeset; "": no (strict) <memnode> for the cell

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cpus": self.cpus, "memory_kib": self.memory_kib, "host_nodes": self.host_nodes}


@dataclass(frozen=True)
class VmShape:
    """A VM's size and memory layout (see the module docstring)."""
    vcpus: int  # <vcpu> (current = maximum)
    memory_kib: int  # <memory> and <currentMemory>
    hugepage_kib: int | None  # None: no <memoryBacking><hugepages>; else <page size=.. unit='KiB'/>
    numa: tuple[str, str] | None  # <numatune><memory mode nodeset>: (mode, nodeset); None: none
    cells: tuple[GuestCell, ...] = ()  # (): no guest NUMA cells (and no <memnode>s)
    threads_per_core: int = 1  # <cpu><topology sockets=1 dies=1 cores=vcpus/threads threads=..>

    def to_dict(self) -> dict[str, Any]:
        return {"vcpus": self.vcpus, "memory_kib": self.memory_kib, "hugepage_kib": self.hugepage_kib,
                "numa": {"mode": self.numa[0], "nodeset": self.numa[1]} if self.numa else None,
                "cells": [c.to_dict() for c in self.cells], "threads_per_core": self.threads_per_core}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VmShape:
        """The shape an operation holds, checked (ValueError saying what is wrong); sets as libvirt writes them."""
        if not isinstance(d, Mapping):
            raise ValueError("a VM shape must be a mapping")
        hp, numa, cells = d.get("hugepage_kib"), d.get("numa"), d.get("cells", [])
        if numa is not None and not (isinstance(numa, Mapping) and isinstance(numa.get("mode"), str)
                                     and isinstance(numa.get("nodeset"), str)):
            raise ValueError("shape 'numa' must be null or {mode, nodeset}")
        if not isinstance(cells, list) or not all(isinstance(c, Mapping) for c in cells):
            raise ValueError("shape 'cells' must be a list of {id, cpus, memory_kib, host_nodes}")
        shape = cls(vcpus=_int(d, "vcpus"), memory_kib=_int(d, "memory_kib"),
                    hugepage_kib=None if hp is None else _int(d, "hugepage_kib"),
                    numa=(numa["mode"], _set_text(numa["nodeset"], "numa nodeset")) if numa else None,
                    cells=tuple(_cell(c) for c in cells),
                    threads_per_core=_int(d, "threads_per_core") if "threads_per_core" in d else 1)
        return shape.check()

    def check(self) -> VmShape:
        """This shape when it can be written; ValueError naming every problem otherwise."""
        found = self.problems()
        if found:
            raise ValueError("; ".join(found))
        return self

    def problems(self) -> list[str]:
        """What makes this shape unfit to write (empty: nothing)."""
        out = []
        if not 1 <= self.vcpus <= MAX_VCPUS:
            out.append(f"vcpus must be 1 to {MAX_VCPUS}, not {self.vcpus}")
        if self.memory_kib < 1:
            out.append(f"memory must be at least 1 KiB, not {self.memory_kib} KiB")
        if self.hugepage_kib is not None and self.hugepage_kib < 4:
            out.append(f"the hugepage size must be at least 4 KiB, not {self.hugepage_kib} KiB")
        elif self.hugepage_kib and self.memory_kib % self.hugepage_kib:
            out.append(f"memory {self.memory_kib} KiB is not a whole number of {self.hugepage_kib} KiB pages")
        if self.threads_per_core < 1 or (self.vcpus >= 1 and self.vcpus % self.threads_per_core):
            out.append(f"{self.vcpus} vCPUs do not make whole cores of {self.threads_per_core} threads")
        if self.numa is not None:
            out += _numa_problems(self.numa)
        if self.cells:
            out += _cell_problems(self)
        return out

    def key(self) -> tuple[Any, ...]:
        """Comparable form: sets as sets, cells by id."""
        numa = (self.numa[0], _as_set(self.numa[1])) if self.numa else None
        cells = tuple(sorted((c.id, _as_set(c.cpus), c.memory_kib, _as_set(c.host_nodes)) for c in self.cells))
        return self.vcpus, self.memory_kib, self.hugepage_kib, numa, cells, self.threads_per_core

    def describe(self) -> str:
        """One line: what the shape says."""
        parts = [f"{self.vcpus} vCPU(s)" + (f" ({self.threads_per_core} threads/core)"
                                            if self.threads_per_core > 1 else ""),
                 f"{_size(self.memory_kib)} memory",
                 f"backed by {_size(self.hugepage_kib)} hugepages" if self.hugepage_kib
                 else "host-default hugepages" if self.hugepage_kib == 0 else "no hugepages",
                 f"memory {self.numa[0]} on host node {self.numa[1]}" if self.numa else "no memory policy"]
        if self.cells:
            parts.append("guest cells " + ", ".join(f"{c.id}: vCPU {c.cpus}, {_size(c.memory_kib)}"
                                                    f"{' on node ' + c.host_nodes if c.host_nodes else ''}"
                                                    for c in self.cells))
        return ", ".join(parts)


def _size(kib: int) -> str:
    for unit, n in (("GiB", 1 << 20), ("MiB", 1 << 10)):
        if kib >= n and kib % n == 0:
            return f"{kib // n} {unit}"
    return f"{kib} KiB"


def _int(d: Mapping[str, Any], key: str) -> int:
    value = d.get(key)
    if type(value) is not int:
        raise ValueError(f"shape {key!r} must be a whole number, not {value!r}")
    return value


def _set_text(text: str, what: str) -> str:
    try:
        nodes = parse_libvirt_set(text)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    return format_cpulist(nodes)


def _as_set(text: str) -> frozenset[int] | str:
    try:
        return frozenset(parse_libvirt_set(text))
    except ValueError:
        return text  # compares as the text it is


def _cell(c: Mapping[str, Any]) -> GuestCell:
    for key in ("cpus", "host_nodes"):
        if not isinstance(c.get(key), str):
            raise ValueError(f"guest cell {key!r} must be a CPU/node list text, not {c.get(key)!r}")
    return GuestCell(id=_int(c, "id"), cpus=_set_text(c["cpus"], "guest cell cpus"), memory_kib=_int(c, "memory_kib"),
                     host_nodes=_set_text(c["host_nodes"], "guest cell host_nodes") if c["host_nodes"] else "")


def _numa_problems(numa: tuple[str, str]) -> list[str]:
    out = []
    if numa[0] not in NUMA_MODES:
        out.append(f"unknown memory mode {numa[0]!r} (one of {', '.join(NUMA_MODES)})")
    if not isinstance(_as_set(numa[1]), frozenset) or not _as_set(numa[1]):
        out.append(f"memory nodeset {numa[1]!r} is not a list of host nodes")
    return out


def _cell_problems(shape: VmShape) -> list[str]:
    out = []
    ids = [c.id for c in shape.cells]
    if sorted(ids) != list(range(len(ids))):
        out.append(f"guest cell ids must be 0 to {len(ids) - 1}, each once, not {ids}")
    seen: set[int] = set()
    for c in shape.cells:
        cpus = _as_set(c.cpus)
        if not isinstance(cpus, frozenset) or not cpus:
            out.append(f"guest cell {c.id}: cpus {c.cpus!r} is not a list of vCPUs")
            continue
        if cpus & seen:
            out.append(f"guest cell {c.id}: vCPU {format_cpulist(cpus & seen)} is in another cell too")
        seen |= cpus
        if c.memory_kib < 1:
            out.append(f"guest cell {c.id}: memory must be at least 1 KiB, not {c.memory_kib} KiB")
        elif shape.hugepage_kib and c.memory_kib % shape.hugepage_kib:
            out.append(f"guest cell {c.id}: memory {c.memory_kib} KiB is not a whole number of "
                       f"{shape.hugepage_kib} KiB pages")
        nodes = _as_set(c.host_nodes)
        if c.host_nodes and (not isinstance(nodes, frozenset) or not nodes):
            out.append(f"guest cell {c.id}: host_nodes {c.host_nodes!r} is not a list of host nodes")
    every = frozenset(range(shape.vcpus))
    if seen != every:
        missing, extra = every - seen, seen - every
        out.append("the guest cells' cpus must cover vCPUs " + format_cpulist(every) + " exactly"
                   + (f" (missing {format_cpulist(missing)})" if missing else "")
                   + (f" (beyond them: {format_cpulist(extra)})" if extra else ""))
    total = sum(c.memory_kib for c in shape.cells)
    if total != shape.memory_kib:
        out.append(f"the guest cells' memory ({total} KiB) must add up to the VM's memory ({shape.memory_kib} KiB)")
    return out
