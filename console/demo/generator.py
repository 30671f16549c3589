"""Synthetic hosts from a `HostSpec`: a sysfs/procfs root, a libvirt test-driver node file and the
simulated NVML library's state. The demo host, test hosts and benchmark hosts are presets of it
(`presets.py`); the layout is described in docs/demo-host.md.

The same spec always produces byte-identical files (UUIDs and serials are derived from names)."""
from __future__ import annotations

import os
from pathlib import Path

from nodeconsole.console.demo import sysfs_ops
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.gen_cpu import cpu_layout, write_cpus, write_nodes, write_proc
from nodeconsole.console.demo.gen_libvirt import libvirt_xml, validate_vms
from nodeconsole.console.demo.gen_nvml import nvml_json
from nodeconsole.console.demo.gen_pci import build_layout, write_pci
from nodeconsole.console.demo.presets import demo_spec, large_spec, small_spec
from nodeconsole.console.demo.spec import (
    CpuSpec,
    GpuProcessSpec,
    GpuSpec,
    HostBridge,
    HostdevSpec,
    HostSpec,
    Link,
    MdevSpec,
    MigInstanceSpec,
    PciDev,
    SriovSpec,
    VfSpec,
    VgpuTypeSpec,
    VmSpec,
)

__all__ = ["GeneratedHost", "generate", "demo_spec", "small_spec", "large_spec", "HostSpec", "CpuSpec",
           "HostBridge", "PciDev", "Link", "GpuSpec", "MigInstanceSpec", "VgpuTypeSpec", "MdevSpec",
           "GpuProcessSpec", "SriovSpec", "VfSpec", "VmSpec", "HostdevSpec"]

from nodeconsole.console.demo.host import ROOT, GeneratedHost


def generate(spec: HostSpec, dest: str | os.PathLike[str]) -> GeneratedHost:
    """Write the host described by `spec` into `dest` (created if needed; a previous host there is
    replaced). Raises ValueError, before writing anything, for a spec no real host could have."""
    lay = cpu_layout(spec)
    pci = build_layout(spec)
    validate_vms(spec, lay, pci)
    xml = libvirt_xml(spec, lay)
    nvml = nvml_json(spec, pci)
    host = GeneratedHost.at(dest)
    dest_dir = host.dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    # Build the tree beside the old one and swap it in, so an interrupted run never leaves half a host.
    tmp = dest_dir / (ROOT + ".partial")
    sysfs_ops.remove_tree(tmp)
    w = TreeWriter(tmp)
    write_cpus(w, spec, lay)
    write_nodes(w, spec, lay)
    write_proc(w, spec, lay)
    write_pci(w, spec, lay, pci)
    sysfs_ops.remove_tree(host.root)
    os.rename(tmp, host.root)
    _write_atomic(host.libvirt_xml, xml)
    _write_atomic(host.nvml_state, nvml)
    return host


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
