"""Incident capture and replay: one compressed archive of what the console reads from a host, which the
console, `snapshot`, `doctor` and `events` open again offline (`--replay FILE`).

The archive (a gzip-compressed tar; entries sorted, mtime 0, uid/gid 0, fixed modes) holds:

    manifest.json            format, schema, time, host name, versions, what each source did
    root/…                   the sysfs/procfs/etc subset the sources and the doctor read, laid out as on
                             the host (symlinks kept as relative symlinks), plus the kernel-log lines
                             with GPU events at the log's own path (var/log/kern.log, .sim/kmsg)
    libvirt/node.xml         the libvirt test-driver node file: host CPU/memory, every domain's live
                             definition and run state (`test:///…/node.xml` opens it)
    libvirt/inactive/UUID.xml  every domain's inactive (persistent) definition
    libvirt/capabilities.xml the hypervisor's capabilities
    nvml.json                the NVML state in the simulated library's format (docs/demo-host.md)
    audit.jsonl              the host's audit log of changes
    doctor.json              the doctor's report at capture time

`capture.take_capture` writes one; `archive.extract` opens one safely (console/seams.py's replay_host
serves it); `live.blank_live` names the snapshot fields that move with time.
"""
from __future__ import annotations

FORMAT = "nodeconsole-capture"
SCHEMA = 1

MANIFEST = "manifest.json"
ROOT_DIR = "root"
NODE_FILE = "libvirt/node.xml"
INACTIVE_DIR = "libvirt/inactive"
CAPABILITIES = "libvirt/capabilities.xml"
NVML_STATE = "nvml.json"
AUDIT = "audit.jsonl"
DOCTOR = "doctor.json"
