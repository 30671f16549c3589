"""Comparing two sides of a diff (console/capture/diff.py): one function per topic, each adding the
`Change`s it finds; `compare` runs them in TOPICS order. Values that move with time are never compared;
health counters count only when they grew; events and audit records count when B has them and A not.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeconsole.console.capture.diff_model import TOPICS, Change, Diff, Side
from nodeconsole.console.capture.vm_facts import live_vm_facts

# Health counters: a change only when the count grew (a volatile counter resets at reboot).
HEALTH = ("ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "ecc_volatile_corrected",
          "ecc_aggregate_corrected", "retired_pages", "remapped_rows_pending", "remapped_rows_failure",
          "remapped_rows_uncorrectable", "remapped_rows_correctable", "pcie_replay_count")
HEALTH_PREFIXES = ("ecc_", "retired_", "remapped_")
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")  # each link's data-link error counters


def _unknown(value: Any) -> bool:
    return value is None or value == "N/A"


class _Changes:
    def __init__(self) -> None:
        self.out: list[Change] = []

    def add(self, topic: str, subject: str, what: str, before: Any, after: Any, note: str = "") -> None:
        self.out.append(Change(topic, subject, what, before, after, note))

    def fields(self, topic: str, subject: str, a: Mapping[str, Any], b: Mapping[str, Any],
               names: Iterable[tuple[str, str]]) -> None:
        """A change for every field (key, what) whose value differs."""
        for key, what in names:
            if a.get(key) != b.get(key):
                self.add(topic, subject, what, a.get(key), b.get(key))


def compare(a: Side, b: Side) -> Diff:
    """Everything that differs from `a` to `b`, in TOPICS order."""
    ch = _Changes()
    notes: list[str] = []
    for side in (a, b):
        if side.manifest.get("redacted"):
            notes.append(f"{side.label} is redacted: names, UUIDs and MAC addresses are pseudonyms, which "
                         "differ between captures")
    if (a.manifest.get("hostname") or "") != (b.manifest.get("hostname") or ""):
        notes.append(f"the captures are of different hosts: {a.manifest.get('hostname') or '?'} and "
                     f"{b.manifest.get('hostname') or '?'}")
    _sources(ch, a, b)
    _versions(ch, a, b)
    _kernel(ch, a, b)
    _files(ch, a, b)
    _gpus(ch, a, b)
    _devices(ch, a, b)
    _iommu(ch, a, b)
    _mig(ch, a, b)
    _vgpu(ch, a, b)
    _vms(ch, a, b, notes)
    _health(ch, a, b)
    _new_events(ch, a, b)
    _new_audit(ch, a, b)
    _doctor(ch, a, b)
    order = {t: i for i, t in enumerate(TOPICS)}
    changes = sorted(ch.out, key=lambda c: order[c.topic])  # stable: each topic keeps its own order
    return Diff(a, b, changes, notes)



def _status(value: Any) -> str | None:
    if isinstance(value, dict):
        status = str(value.get("status") or "")
        reason = str(value.get("reason") or "")
        return f"{status}: {reason}" if reason and status != "ok" else status or None
    return str(value) if value is not None else None


def _sources(ch: _Changes, a: Side, b: Side) -> None:
    """A source one capture read and the other could not (what follows lacks its part)."""
    sa, sb = a.manifest.get("sources") or {}, b.manifest.get("sources") or {}
    for name in sorted(set(sa) | set(sb)):
        before, after = _status(sa.get(name)), _status(sb.get(name))
        # "skipped" is what the host has (no audit log yet, no kernel log): only a failure is news
        if (before or "").startswith("failed") != (after or "").startswith("failed"):
            ch.add("capture", name, "status", before, after)


def _versions(ch: _Changes, a: Side, b: Side) -> None:
    va, vb = a.manifest.get("versions") or {}, b.manifest.get("versions") or {}
    for name in sorted(set(va) | set(vb)):
        if va.get(name) != vb.get(name):
            ch.add("versions", name, "version", va.get(name), vb.get(name))


def _kernel(ch: _Changes, a: Side, b: Side) -> None:
    if a.cmdline is not None and b.cmdline is not None and a.cmdline != b.cmdline:
        ch.add("kernel", "/proc/cmdline", "command line", a.cmdline, b.cmdline)
    if a.modules is not None and b.modules is not None:
        for name in sorted(b.modules - a.modules):
            ch.add("kernel", name, "module", "not loaded", "loaded")
        for name in sorted(a.modules - b.modules):
            ch.add("kernel", name, "module", "loaded", "not loaded")
    na = {n["id"]: dict(map(tuple, n.get("hugepages") or ())) for n in a.snapshot.get("numa_nodes") or ()}
    nb = {n["id"]: dict(map(tuple, n.get("hugepages") or ())) for n in b.snapshot.get("numa_nodes") or ()}
    for node in sorted(set(na) & set(nb)):
        for size in sorted(set(na[node]) | set(nb[node])):
            before, after = na[node].get(size, 0), nb[node].get(size, 0)
            if before != after:
                ch.add("kernel", f"NUMA node {node}", f"huge pages {_size(size)}", before, after)


def _files(ch: _Changes, a: Side, b: Side) -> None:
    for path in sorted(set(a.files) | set(b.files)):
        before, after = a.files.get(path), b.files.get(path)
        if before == after:
            continue
        what = "added" if before is None else "removed" if after is None else "content"
        ch.add("files", path, what, before, after)


def _by(items: Iterable[Mapping[str, Any]] | None, key: str) -> dict[Any, Mapping[str, Any]]:
    return {item[key]: item for item in items or () if item.get(key) is not None}


def _gpu_summary(gpu: Mapping[str, Any]) -> str:
    return f"{gpu.get('name') or '?'} on {gpu.get('driver') or 'no driver'}"


def _gpus(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    da, db = _by(a.snapshot.get("pci_devices"), "address"), _by(b.snapshot.get("pci_devices"), "address")
    for addr in sorted(set(ga) | set(gb)):
        x, y = ga.get(addr), gb.get(addr)
        if x is None or y is None:
            ch.add("gpus", addr, "added" if x is None else "removed", _gpu_summary(x) if x else None,
                   _gpu_summary(y) if y else None)
            continue
        ch.fields("gpus", addr, x, y, [("driver", "driver")])
        oa, ob = x.get("owner") or {}, y.get("owner") or {}
        ch.fields("gpus", addr, oa, ob, [("kind", "owner")])
        if sorted(oa.get("vms") or ()) != sorted(ob.get("vms") or ()):
            ch.add("gpus", addr, "VMs", sorted(oa.get("vms") or ()), sorted(ob.get("vms") or ()))
        if addr in da and addr in db:
            ch.fields("gpus", addr, da[addr], db[addr], [("driver_override", "driver_override")])


def _device_summary(dev: Mapping[str, Any]) -> str:
    name = " ".join(str(p) for p in (dev.get("vendor_name"), dev.get("device_name")) if p) or dev.get("class_name")
    return f"{name or '?'} on {dev.get('driver') or 'no driver'}"


def _devices(ch: _Changes, a: Side, b: Side) -> None:
    gpus = {g["address"] for s in (a, b) for g in s.snapshot.get("gpus") or ()}
    da, db = _by(a.snapshot.get("pci_devices"), "address"), _by(b.snapshot.get("pci_devices"), "address")
    for addr in sorted((set(da) | set(db)) - gpus):
        x, y = da.get(addr), db.get(addr)
        if x is None or y is None:
            ch.add("devices", addr, "added" if x is None else "removed", _device_summary(x) if x else None,
                   _device_summary(y) if y else None)
            continue
        ch.fields("devices", addr, x, y, [("driver", "driver"), ("driver_override", "driver_override"),
                                          ("sriov_numvfs", "SR-IOV VFs")])


def _iommu(ch: _Changes, a: Side, b: Side) -> None:
    ia, ib = a.snapshot.get("iommu") or {}, b.snapshot.get("iommu") or {}
    ga, gb = _by(ia.get("groups"), "id"), _by(ib.get("groups"), "id")
    if ia.get("enabled") != ib.get("enabled"):
        # the IOMMU turned on or off: every group came or went; their number says it
        ch.add("iommu", "IOMMU", "enabled", ia.get("enabled"), ib.get("enabled"))
        if len(ga) != len(gb):
            ch.add("iommu", "IOMMU", "groups", len(ga), len(gb))
        return
    for gid in sorted(set(ga) | set(gb)):
        x, y = ga.get(gid), gb.get(gid)
        subject = f"group {gid}"
        if x is None or y is None:
            ch.add("iommu", subject, "added" if x is None else "removed", list(x["devices"]) if x else None,
                   list(y["devices"]) if y else None)
            continue
        if sorted(x.get("devices") or ()) != sorted(y.get("devices") or ()):
            ch.add("iommu", subject, "devices", sorted(x.get("devices") or ()), sorted(y.get("devices") or ()))
        if x.get("viable") != y.get("viable"):
            ch.add("iommu", subject, "viable", x.get("viable"), y.get("viable"), note=str(y.get("reason") or ""))


def _mig_instances(mig: Mapping[str, Any]) -> list[str]:
    out = []
    for inst in mig.get("instances") or ():
        text = f"{inst.get('profile')} at slice {inst.get('start')}"
        cis = list(inst.get("compute_instances") or ())
        if cis and cis != [inst.get("profile")]:
            text += f" (compute instances {', '.join(map(str, cis))})"
        out.append(text)
    return sorted(out)


def _mig(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    for addr in sorted(set(ga) & set(gb)):
        ma, mb = ga[addr].get("mig") or {}, gb[addr].get("mig") or {}
        if _unknown(ma.get("mode")) or _unknown(mb.get("mode")):
            continue  # not read on one side (a GPU on vfio-pci, no NVML): nothing to compare
        ch.fields("mig", addr, ma, mb, [("mode", "mode"), ("pending_mode", "pending mode")])
        before, after = _mig_instances(ma), _mig_instances(mb)
        if before != after:
            ch.add("mig", addr, "instances", before, after)


def _vgpu_instances(gpu: Mapping[str, Any]) -> list[str]:
    return sorted(f"{i.get('type_name') or '?'} {i.get('uuid') or '?'}"
                  for i in (gpu.get("vgpu") or {}).get("instances") or ())


def _vgpu(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    for addr in sorted(set(ga) & set(gb)):
        before, after = _vgpu_instances(ga[addr]), _vgpu_instances(gb[addr])
        if before != after:
            ch.add("vgpu", addr, "instances", before, after)


VM_FIELDS = (("state", "state"), ("uuid", "uuid"), ("vcpus", "vCPUs"), ("memory_kib", "memory"),
             ("current_memory_kib", "current memory"), ("pins", "vCPU pins"), ("emulator_pins", "emulator pins"),
             ("numatune", "numatune"), ("hugepages_kib", "huge pages"), ("hostdevs", "hostdevs"))


def _libvirt_ok(side: Side) -> bool:
    return (side.snapshot.get("sources") or {}).get("libvirt") == "ok"


def _vm_summary(live: Mapping[str, Any] | None, config: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = {**(config or {}), **{k: v for k, v in (live or {}).items() if v is not None}}
    return {what: merged[key] for key, what in VM_FIELDS if merged.get(key) not in (None, [], {})}


def _vms(ch: _Changes, a: Side, b: Side, notes: list[str]) -> None:
    if not (_libvirt_ok(a) and _libvirt_ok(b)):
        notes.append("VM definitions are not compared: libvirt was not read on "
                     + " and ".join(s.label for s in (a, b) if not _libvirt_ok(s)))
        return
    la = {vm["name"]: live_vm_facts(vm) for vm in a.snapshot.get("vms") or ()}
    lb = {vm["name"]: live_vm_facts(vm) for vm in b.snapshot.get("vms") or ()}
    for name in sorted(set(la) | set(lb) | set(a.vm_config) | set(b.vm_config)):
        in_a = name in la or name in a.vm_config
        in_b = name in lb or name in b.vm_config
        if not (in_a and in_b):
            ch.add("vms", name, "added" if not in_a else "removed",
                   _vm_summary(la.get(name), a.vm_config.get(name)) if in_a else None,
                   _vm_summary(lb.get(name), b.vm_config.get(name)) if in_b else None)
            continue
        live_a, live_b = la.get(name, {}), lb.get(name, {})
        conf_a, conf_b = a.vm_config.get(name, {}), b.vm_config.get(name, {})
        for key, what in VM_FIELDS:
            live = (live_a.get(key), live_b.get(key)) if key in live_a or key in live_b else None
            conf = (conf_a.get(key), conf_b.get(key)) if key in conf_a or key in conf_b else None
            if live is not None and live[0] != live[1]:
                ch.add("vms", name, what, *live)
            # the persistent definition: named apart only when it changed otherwise than the live one
            # (a shut-off VM's live definition is its persistent one)
            if conf is not None and conf[0] != conf[1] and conf != live:
                ch.add("vms", name, what if live is None else f"{what} (next boot)", *conf)


def _health(ch: _Changes, a: Side, b: Side) -> None:
    ga, gb = _by(a.snapshot.get("gpus"), "address"), _by(b.snapshot.get("gpus"), "address")
    for addr in sorted(set(ga) & set(gb)):
        x, y = ga[addr], gb[addr]
        keys = [k for k in y if k in HEALTH or k.startswith(HEALTH_PREFIXES)]
        for key in sorted(keys, key=lambda k: (k not in HEALTH, HEALTH.index(k) if k in HEALTH else 0, k)):
            before, after = x.get(key), y.get(key)
            if _grew(before, after):
                ch.add("health", addr, key, before, after)
        la = {lk.get("link"): lk for lk in x.get("nvlinks") or () if isinstance(lk, dict)}
        for link in y.get("nvlinks") or ():
            if isinstance(link, dict) and link.get("link") in la:
                for key in NVLINK_COUNTERS:
                    if _grew(la[link["link"]].get(key), link.get(key)):
                        ch.add("health", addr, f"nvlink {link['link']} {key}", la[link["link"]].get(key), link.get(key))


def _grew(before: Any, after: Any) -> bool:
    return (isinstance(before, int) and isinstance(after, int) and not isinstance(before, bool)
            and not isinstance(after, bool) and after > before)


def _event_key(e: Mapping[str, Any]) -> tuple[Any, ...]:
    return (e.get("kind"), e.get("time"), e.get("gpu"), e.get("xid"), e.get("text"))


def _event_what(e: Mapping[str, Any]) -> str:
    return f"Xid {e['xid']}" if e.get("xid") is not None else str(e.get("kind") or "event")


def _new_events(ch: _Changes, a: Side, b: Side) -> None:
    seen = {_event_key(e) for e in a.events}
    for e in b.events:
        if _event_key(e) not in seen:
            ch.add("events", str(e.get("gpu") or "?"), _event_what(e), None,
                   {k: e.get(k) for k in ("time", "text", "severity", "vms")})


def _new_audit(ch: _Changes, a: Side, b: Side) -> None:
    seen = {r.id for r in a.audit}
    for r in b.audit:
        if r.id in seen:
            continue
        ch.add("audit", r.id, r.action or "change", None,
               {"title": r.title, "result": r.result, "when": r.when, "who": (r.who or {}).get("user"),
                **({"undoes": r.undoes} if r.undoes else {})})


def _doctor(ch: _Changes, a: Side, b: Side) -> None:
    if a.doctor is None or b.doctor is None:
        return
    ca, cb = _by(a.doctor.get("checks"), "id"), _by(b.doctor.get("checks"), "id")
    for cid in list(ca) + [c for c in cb if c not in ca]:
        x, y = ca.get(cid), cb.get(cid)
        before = x.get("status") if x else None
        after = y.get("status") if y else None
        if before != after:
            ch.add("doctor", str(cid), "status", before, after, note=str((y or x or {}).get("finding") or ""))



def _size(kib: int) -> str:
    for unit, n in (("T", 1 << 30), ("G", 1 << 20), ("M", 1 << 10)):
        if kib >= n and kib % n == 0:
            return f"{kib // n}{unit}"
    return f"{kib}K"
