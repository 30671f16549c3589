"""Take a capture: read the host once through a recording root (one snapshot, the doctor, the kernel
log), dump NVML and libvirt, and pack what was read with a manifest (console/capture/__init__.py has
the layout). A source that fails is recorded as failed with its reason; the capture goes on.
"""
from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nodeconsole.console import __version__
from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.console.capture import (
    AUDIT,
    CAPABILITIES,
    DOCTOR,
    FORMAT,
    INACTIVE_DIR,
    MANIFEST,
    NODE_FILE,
    NVML_STATE,
    ROOT_DIR,
    SCHEMA,
)
from nodeconsole.console.capture.archive import archive_bytes
from nodeconsole.console.capture.recording import FILE, LINK, Entry, RecordingRoot, Tree
from nodeconsole.console.collector import describe_error
from nodeconsole.console.seams import Seams, simulated_nvml_state

# Read for the host's load: psutil reads them on a live host, outside the root seam.
LOAD_FILES = ("proc/stat", "proc/meminfo", "proc/loadavg")
NVIDIA_VERSION = "sys/module/nvidia/version"
# What plans look at beyond the snapshot (so a replay shows the plan the host would have got): which
# drivers and modules are loaded, the vfio device nodes, driverctl's overrides, mdev devices, the NVIDIA
# driver's GPUs (their minor numbers), every process's name (a daemon holding a GPU stops a plan) and
# the boot loader's files (the doctor's fixes edit them).
CONTEXT_DIRS = ("sys/bus/pci/drivers", "sys/module", "dev/vfio", "etc/driverctl.d", "sys/bus/mdev/devices",
                "sys/class/mdev_bus", "proc/driver/nvidia/gpus", "etc/pve/qemu-server", "etc/pve/mapping",
                "run/qemu-server")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Capture:
    data: bytes  # the archive
    manifest: dict[str, Any]
    entries: int  # members in the archive


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _failed(exc: BaseException) -> dict[str, Any]:
    return {"status": "failed", "reason": describe_error(exc)}


def origin_of(seams: Seams) -> str:
    """What the capture was taken from; a capture of a replay is a copy of the capture replayed."""
    return seams.origin


def take_capture(seams: Seams, *, changes: Sequence[AuditRecord] = (), audit: bytes | None = None,
                 programs: Mapping[str, str | None] | None = None, redact: bool = False, progress: Progress = lambda _line: None,
                 clock: Callable[[], float] = time.time) -> Capture:
    """Capture the host behind `seams`. `changes` are the audit log's records (the doctor marks pending
    fixes from them) and `audit` the log's bytes, both read by the caller; `programs`: where the host's
    command seam finds each program plans look for (replay.PLAN_PROGRAMS)."""
    started = clock()
    rec = RecordingRoot(seams.root.path)
    sources: dict[str, Any] = {}
    versions: dict[str, str] = {"nodeconsole": __version__}
    entries: dict[str, Entry] = {}

    progress("reading the host (sysfs, NVML, libvirt, load)")
    hypervisor: list[Any] = []  # what the VM source's connection said of itself (the doctor names it)
    snap = _read_host(replace(seams, root=rec), rec, sources, versions, hypervisor)
    progress("running the doctor")
    _doctor(snap, rec, changes, entries, sources, hypervisor[0] if hypervisor else None)
    progress("reading the kernel log")
    _tree(seams, rec, entries, sources)
    progress("dumping the NVML state")
    nvml_clock = _nvml(seams, entries, sources)

    hostnames = _hostnames(snap, rec)
    vm_names: list[str] = []
    if seams.hypervisor == "proxmox":  # its VMs are files of the tree, carried as the snapshot read them
        sources["libvirt"] = {"status": "skipped", "reason": "a Proxmox VE host: its VMs are /etc/pve/qemu-server"}
        vm_names += [v.name for v in snap.vms] if snap is not None else []
    elif seams.libvirt_uri is None:
        sources["libvirt"] = {"status": "skipped", "reason": "no libvirt URI for this host"}
    else:
        progress("reading libvirt's domains")
        vm_names, libvirt_host = _libvirt(seams.libvirt_uri, entries, sources, versions)
        if libvirt_host:
            hostnames.append(libvirt_host)
    vm_names += _audit(audit, changes, entries, sources)

    manifest = {
        "format": FORMAT,
        "schema": SCHEMA,
        "captured_at": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(timespec="seconds"),
        "hostname": snap.host.hostname if snap is not None else "",
        "origin": origin_of(seams),
        "redacted": redact,
        "nvml_clock": nvml_clock,
        "snapshot_sources": dict(vars(snap.sources)) if snap is not None else {},
        "sources": sources,
        "versions": versions,
        "programs": dict(sorted((programs or {}).items())),
    }
    entries[MANIFEST] = Entry(FILE, _json(manifest))
    if redact:
        progress("redacting names, UUIDs, MAC addresses and who made the changes")
        from nodeconsole.console.capture.redact_members import redact_entries

        entries = redact_entries(entries, hostnames, vm_names, primary=str(manifest["hostname"]))
        manifest = json.loads(entries[MANIFEST].data)
    progress("writing the archive")
    return Capture(archive_bytes(entries), manifest, len(entries))


def _read_host(rseams: Seams, rec: RecordingRoot, sources: dict[str, Any], versions: dict[str, str],
               hypervisor: list[Any]) -> Any:
    """One snapshot through the recording root, what plans read beyond it, and the kernel's and the
    driver's versions (the NVIDIA module's own when NVML gave none). The snapshot, or None."""
    snap = _snapshot(rseams, sources, hypervisor)
    _context(rec)
    if snap is not None:
        versions["kernel"] = snap.host.kernel
        if snap.nvml_driver_version:
            versions["driver"] = snap.nvml_driver_version
    try:
        module_version = rec.read(NVIDIA_VERSION)
    except PermissionError:
        module_version = None
    if module_version and "driver" not in versions:
        versions["driver"] = module_version
    return snap


def _doctor(snap: Any, rec: RecordingRoot, changes: Sequence[AuditRecord], entries: dict[str, Entry],
            sources: dict[str, Any], hypervisor: Any = None) -> None:
    """The doctor's report over the snapshot (skipped without one; a failure never costs the capture)."""
    if snap is None:
        sources["doctor"] = {"status": "skipped", "reason": "no snapshot"}
        return
    try:
        from nodeconsole.console.doctor.run import run_doctor

        report = run_doctor(snap, rec, changes=changes, hypervisor=hypervisor)
        entries[DOCTOR] = Entry(FILE, _json(report.to_dict()))
        sources["doctor"] = {"status": "ok", **report.counts()}
    except Exception as e:  # the doctor must never cost the capture
        sources["doctor"] = _failed(e)


def _tree(seams: Seams, rec: RecordingRoot, entries: dict[str, Entry], sources: dict[str, Any]) -> None:
    """Every file and link read so far, and the kernel logs kept, as the archive's root/ members."""
    tree = Tree(seams.root)
    tree.add_recording(rec)
    _kernel_log(seams, tree, sources)
    for path, entry in tree.entries.items():
        entries[f"{ROOT_DIR}/{path}"] = entry
    files = sum(1 for e in tree.entries.values() if e.kind == FILE)
    links = sum(1 for e in tree.entries.values() if e.kind == LINK)
    sources["tree"] = {"status": "ok", "files": files, "links": links, "entries": len(tree.entries),
                       "links_out_of_root": tree.links_out}


def _hostnames(snap: Any, rec: RecordingRoot) -> list[str]:
    """The host's names as read (the snapshot's, /proc's and /etc/hostname's: both when they differ, an
    FQDN), for redaction."""
    hostnames = [snap.host.hostname] if snap is not None and snap.host.hostname else []
    for rel in ("proc/sys/kernel/hostname", "etc/hostname"):  # both, when they differ (an FQDN)
        text = (rec.files.get(rel) or b"").decode("utf-8", "replace").strip()
        hostnames += text.split()[:1]
    return hostnames


def _audit(audit: bytes | None, changes: Sequence[AuditRecord], entries: dict[str, Entry],
           sources: dict[str, Any]) -> list[str]:
    """The audit log's bytes as a member; the VM names its records' requests name (for redaction)."""
    if audit is None:
        sources["audit"] = {"status": "skipped", "reason": "no audit log on this host"}
        return []
    entries[AUDIT] = Entry(FILE, audit)
    sources["audit"] = {"status": "ok", "records": len(changes)}
    return [str(r.request["vm"]) for r in changes if r.request is not None and r.request.get("vm")]


def _context(rec: RecordingRoot) -> None:
    """Read what plans and the load need beyond the snapshot (module comment above)."""
    def read(rel: str) -> None:
        try:
            rec.read_bytes(rel)
        except OSError:  # permission, or a process that exited
            pass

    def listdir(rel: str) -> list[str]:
        try:
            return rec.listdir(rel)
        except OSError:
            return []
    for rel in (*LOAD_FILES, "etc/hostname"):
        read(rel)
    for rel in CONTEXT_DIRS:
        listdir(rel)
    for gpu in listdir("proc/driver/nvidia/gpus"):
        read(f"proc/driver/nvidia/gpus/{gpu}/information")
    for pid in listdir("proc"):
        if pid.isdigit():
            read(f"proc/{pid}/comm")
    # the boot loader and its files: the doctor's fixes edit them
    from nodeconsole.console.doctor.bootloader import detect

    try:
        loader = detect(rec)
    except OSError:
        return
    for path in (loader.config or "", *loader.entries, *(f.lstrip("/") for f in loader.found)):
        if path.startswith(("usr/sbin/", "sbin/", "usr/bin/", "bin/")):
            rec.exists(path)  # a program: its presence is what counts
        elif path:
            read(path)


def _snapshot(seams: Seams, sources: dict[str, Any], hypervisor: list[Any]) -> Any:
    from nodeconsole.console.collector import Collector

    collector = Collector(seams)
    try:
        snap = collector.collect()
        hypervisor.append(collector.hypervisor)
    except Exception as e:
        sources["snapshot"] = _failed(e)
        return None
    finally:
        collector.close()
    for name in ("sysfs", "psutil"):
        status = getattr(snap.sources, name)
        sources[name] = {"status": "ok"} if status == "ok" else {"status": "failed", "reason": status}
    return snap


def _kernel_log(seams: Seams, tree: Tree, sources: dict[str, Any]) -> None:
    from nodeconsole.console.capture.kernel_events import kept_logs

    try:
        logs = kept_logs(seams.root, seams.live_kernel_log)
    except OSError as e:
        sources["kernel_log"] = _failed(e)
        return
    for log in logs:
        tree.add_file(log.rel, log.data)
    sources["kernel_log"] = {"status": "ok" if logs else "skipped", "logs": [log.source for log in logs],
                             "stored_as": [f"{ROOT_DIR}/{log.rel}" for log in logs],
                             "events": sum(log.events for log in logs)}
    if not logs:
        sources["kernel_log"]["reason"] = "no kernel log on this host"


def _nvml(seams: Seams, entries: dict[str, Entry], sources: dict[str, Any]) -> float | None:
    """The NVML state (the simulated library's own, or read through pynvml); the clock its moving
    values were read at."""
    simulated = simulated_nvml_state(seams.nvml_lib)
    if simulated is not None:
        state, clock = simulated
        entries[NVML_STATE] = Entry(FILE, _json(state))
        sources["nvml"] = {"status": "ok", "via": "simulated library", "gpus": len(state.get("gpus", []))}
        return clock
    if not seams.use_real_nvml:
        sources["nvml"] = {"status": "skipped", "reason": "not read for a captured tree"}
        return None
    try:
        from nodeconsole.console.capture.nvml_dump import dump_nvml

        state = dump_nvml(seams.nvml_lib)
    except Exception as e:
        sources["nvml"] = _failed(e)
        return None
    entries[NVML_STATE] = Entry(FILE, _json(state))
    sources["nvml"] = {"status": "ok", "via": "pynvml", "gpus": len(state["gpus"])}
    return None


def _libvirt(uri: str, entries: dict[str, Entry], sources: dict[str, Any],
             versions: dict[str, str]) -> tuple[list[str], str]:
    from nodeconsole.console.capture.libvirt_dump import dump_libvirt, node_file

    try:
        dump = dump_libvirt(uri)
        node = node_file(dump)
    except Exception as e:
        sources["libvirt"] = _failed(e)
        return [], ""
    entries[NODE_FILE] = Entry(FILE, node.encode())
    entries[CAPABILITIES] = Entry(FILE, dump.capabilities.encode())
    for d in dump.domains:
        entries[f"{INACTIVE_DIR}/{d.uuid}.xml"] = Entry(FILE, d.inactive_xml.encode())
    versions.update(dump.versions)
    sources["libvirt"] = {"status": "ok", "domains": len(dump.domains)}
    return [d.name for d in dump.domains], dump.hostname

