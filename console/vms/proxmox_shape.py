"""A Proxmox VE VM's size and memory layout in the backend's terms (console/vms/shape.py's VmShape), the
`qm set` arguments that make a config so, and those that bring a config back to a saved one's bytes.

Read from the config as the next start takes it (the main section with [PENDING] over it): vCPUs as
Proxmox counts them (`vcpus`, else sockets × cores), `memory` (MiB), `hugepages` (2 → 2 MiB pages, 1024 →
1 GiB, any → 0: the host's choice), the NUMA cells. One `numaN` cell over every vCPU with all the memory is a
one-node shape (`numa` = its policy and host nodes, no guest cells); several cells are guest cells, `numa`
the union of their host nodes under their policy (libvirt's strict is Proxmox's bind).

Written: `--sockets 1 --cores N` (or `--cores N/sockets` when the sockets divide N; a `vcpus` line follows),
`--memory MiB` (and `--balloon` lowered when it would exceed it), `--hugepages 2|1024|any` or its delete,
`--numa 1` with `--numaN cpus=…,hostnodes=…,memory=…,policy=…` (the cells beyond deleted), or every cell
deleted and `numa` too unless huge pages need it. Refused (VmConfigError, nothing written): more than one
thread per core (Proxmox's config has sockets and cores, no threads), memory not whole MiB, a page size
other than 2 MiB or 1 GiB.

A restore (`restore_args`) sets or deletes each main-section key that differs from the saved config (its
value as written there) on a stopped VM, or each pending key on a running one (whose main section a `qm
set` cannot change); a difference in the description, the snapshots or cloud-init's section, or one `qm
set` cannot reach, is refused, saying what to do by hand.
"""
from __future__ import annotations

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.libvirt_xml import parse_libvirt_set
from nodeconsole.console.vms.backend import GuestCell, VmConfigError, VmShape
from nodeconsole.console.vms.proxmox_conf import QemuConf, Section, VmSettings, settings, with_pending

PAGE_KIB = {"2": 2048, "1024": 1048576, "any": 0}
_PAGES = {kib: text for text, kib in PAGE_KIB.items()}
_MODE = {"bind": "strict", "preferred": "preferred", "interleave": "interleave"}
_POLICY = {"strict": "bind", "restrictive": "bind", "preferred": "preferred", "interleave": "interleave"}


def read_shape(conf: QemuConf) -> VmShape:
    """The VM's shape as its next start takes it (the module's doc)."""
    s = settings(with_pending(conf), conf.path)
    bound = [c for c in s.cells if c.hostnodes]
    numa = (_MODE.get(bound[0].policy or "bind", "strict"),
            format_cpulist(sorted({n for c in bound for n in c.hostnodes}))) if bound else None
    whole = len(s.cells) == 1 and set(s.cells[0].cpus) == set(range(s.vcpus)) \
        and s.cells[0].memory_mib in (None, s.memory_mib)
    cells = () if whole else tuple(
        GuestCell(id=c.index, cpus=format_cpulist(c.cpus),
                  memory_kib=(c.memory_mib or 0) * 1024, host_nodes=format_cpulist(c.hostnodes))
        for c in s.cells)
    page = PAGE_KIB.get(s.hugepages) if s.hugepages is not None else None
    return VmShape(vcpus=s.vcpus, memory_kib=s.memory_mib * 1024, hugepage_kib=page, numa=numa, cells=cells)


def _mib(kib: int, what: str, vm: str) -> int:
    if kib % 1024:
        raise VmConfigError(f"VM {vm}: Proxmox writes {what} in whole MiB, not {kib} KiB")
    return kib // 1024


def _cpu_args(section: Section, s: VmSettings, vcpus: int) -> list[str]:
    if s.vcpus == vcpus and s.sockets * s.cores == vcpus:
        return []
    out = ["--cores", str(vcpus // s.sockets)] if vcpus % s.sockets == 0 else ["--sockets", "1", "--cores", str(vcpus)]
    if section.get("vcpus") is not None:
        out += ["--vcpus", str(vcpus)]
    return out


def _memory_args(section: Section, s: VmSettings, shape: VmShape, vm: str) -> list[str]:
    mib = _mib(shape.memory_kib, "memory", vm)
    out = ["--memory", str(mib)] if mib != s.memory_mib else []
    if s.balloon_mib and s.balloon_mib > mib:
        out += ["--balloon", str(mib)]
    if shape.hugepage_kib is not None and shape.hugepage_kib not in _PAGES:
        raise VmConfigError(f"VM {vm}: Proxmox backs memory with 2 MiB or 1 GiB pages (hugepages: 2|1024|any), "
                            f"not {shape.hugepage_kib} KiB ones")
    want = _PAGES.get(shape.hugepage_kib) if shape.hugepage_kib is not None else None
    now = section.get("hugepages")
    if want is not None and (now is None or now.value != want):
        out += ["--hugepages", want]
    return out


def _cell_values(shape: VmShape, vm: str) -> list[str]:
    """The numaN values the shape's NUMA layout needs (index = N)."""
    policy = _POLICY.get(shape.numa[0], "bind") if shape.numa else "bind"
    if not shape.cells:
        if shape.numa is None:
            return []
        nodes = ";".join(format_cpulist(parse_libvirt_set(shape.numa[1])).split(","))
        return [f"cpus=0-{shape.vcpus - 1},hostnodes={nodes},memory={_mib(shape.memory_kib, 'memory', vm)},"
                f"policy={policy}"]
    out = []
    for c in sorted(shape.cells, key=lambda c: c.id):
        cpus = ";".join(format_cpulist(parse_libvirt_set(c.cpus)).split(","))
        host = c.host_nodes or (shape.numa[1] if shape.numa else "")
        nodes = ";".join(format_cpulist(parse_libvirt_set(host)).split(",")) if host else ""
        out.append(f"cpus={cpus}" + (f",hostnodes={nodes}" if nodes else "")
                   + f",memory={_mib(c.memory_kib, 'a guest cell memory', vm)}" + (f",policy={policy}" if nodes else ""))
    return out


def shape_args(section: Section, s: VmSettings, shape: VmShape, vm: str) -> list[str]:
    """The `qm set` arguments that make the section's shape `shape` ([] when it already is)."""
    if shape.threads_per_core > 1:
        raise VmConfigError(f"VM {vm}: a Proxmox config has sockets and cores, no threads per core: "
                            f"{shape.threads_per_core} threads per core cannot be written (plan one per core)")
    sets = _cpu_args(section, s, shape.vcpus) + _memory_args(section, s, shape, vm)
    deletes = ["hugepages"] if shape.hugepage_kib is None and section.get("hugepages") is not None else []
    cells = _cell_values(shape, vm)
    for i, value in enumerate(cells):
        line = section.get(f"numa{i}")
        if line is None or line.value != value:
            sets += [f"--numa{i}", value]
    deletes += [k for k in section.keys() if k.startswith("numa") and k[4:].isdigit() and int(k[4:]) >= len(cells)]
    if (cells or shape.hugepage_kib is not None) and not s.numa:
        sets += ["--numa", "1"]
    elif not cells and shape.hugepage_kib is None and section.get("numa") is not None:
        deletes.append("numa")
    return sets + (["--delete", ",".join(deletes)] if deletes else [])


def restore_args(now: QemuConf, saved: QemuConf, running: bool, vm: str) -> list[str]:
    """The `qm set` arguments that bring `now` back to `saved` (the module's doc); VmConfigError when a
    difference cannot be made through qm set."""
    by_hand = (f"put the saved config back by hand (compare `qm config {now.vmid} --current 0`; `qm set`/`qm "
               "revert` the keys that differ)")
    if (now.main.description != saved.main.description or _rest(now) != _rest(saved)):
        raise VmConfigError(f"VM {vm}: its description, snapshots or cloud-init section differ from the saved "
                            f"config: qm set cannot put those back here; {by_hand}")
    main_now, main_saved = _table(now.main), _table(saved.main)
    if not running:
        if saved.pending is not None:
            raise VmConfigError(f"VM {vm} is stopped and the saved config has a [PENDING] section: a stopped VM "
                                f"takes every change at once; {by_hand}")
        return _diff(main_now, main_saved)
    if main_now != main_saved:
        raise VmConfigError(f"VM {vm} is running and its config's main section differs from the saved one: qm set "
                            f"changes only [PENDING] of a running VM; {by_hand}")
    return _pending_args(now, saved, main_now)


def _pending_args(now: QemuConf, saved: QemuConf, main: dict[str, str]) -> list[str]:
    pend_now = _table(now.pending) if now.pending else {}
    pend_saved = _table(saved.pending) if saved.pending else {}
    del_now = set(now.pending.delete) if now.pending else set()
    del_saved = set(saved.pending.delete) if saved.pending else set()
    sets: list[str] = []
    deletes: list[str] = []
    for k in sorted(set(pend_now) | set(pend_saved) | del_now | del_saved):
        if (pend_now.get(k), k in del_now) == (pend_saved.get(k), k in del_saved):
            continue
        if k in pend_saved:
            sets += [f"--{k}", pend_saved[k]]
        elif k in del_saved or k not in main:
            deletes.append(k)
        else:
            sets += [f"--{k}", main[k]]  # the main value again: the pending change (or delete) goes
    order = list(saved.pending.delete) if saved.pending else []  # qm appends deletes in the order given
    deletes.sort(key=lambda k: order.index(k) if k in order else len(order))
    return sets + (["--delete", ",".join(deletes)] if deletes else [])


def _diff(now: dict[str, str], saved: dict[str, str]) -> list[str]:
    sets = [a for k in sorted(saved) if now.get(k) != saved[k] for a in (f"--{k}", saved[k])]
    deletes = [k for k in sorted(now) if k not in saved]
    return sets + (["--delete", ",".join(deletes)] if deletes else [])


def _table(section: Section) -> dict[str, str]:
    return {ln.key: ln.value for ln in section.lines}


def _rest(conf: QemuConf) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """The sections a `qm set` does not touch, comparable."""
    others = [*conf.snapshots, *([conf.cloudinit] if conf.cloudinit else [])]
    return [(s.name, s.description, tuple((ln.key, ln.value) for ln in s.lines)) for s in others]
