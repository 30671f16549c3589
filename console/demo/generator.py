"""Synthetic hosts from a `HostSpec`: a sysfs/procfs root, a libvirt test-driver node file and the
simulated NVML library's state. The demo host, test hosts and benchmark hosts are presets of it
(`presets.py`); the layout is described in docs/demo-host.md.

The same spec always produces byte-identical files (UUIDs and serials are derived from names)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from nodeconsole.console.demo import sysfs_ops
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.gen_config import write_config
from nodeconsole.console.demo.gen_cpu import cpu_layout, write_cpus, write_nodes, write_proc
from nodeconsole.console.demo.gen_etc import write_etc
from nodeconsole.console.demo.gen_kernel import validate_kernel, write_kernel
from nodeconsole.console.demo.gen_libvirt import libvirt_xml, validate_vms
from nodeconsole.console.demo.gen_nvml import nvml_state
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

from nodeconsole.console.demo.host import LIBVIRT, NVML, ROOT, STATE_FILE_MODE, GeneratedHost, write_nvml_state
from nodeconsole.console.outfile import write_atomic

# What a reboot loses: the kernel's own trees and the simulator's notes. Everything else under the root
# is the disk (/etc, /boot, /usr …) and survives it.
VOLATILE = ("sys", "proc", "dev", "run", "tmp", ".sim")


def generate(spec: HostSpec, dest: str | os.PathLike[str], *, keep_disk: bool = False) -> GeneratedHost:
    """Write the host described by `spec` into `dest` (created if needed; a previous host there is
    replaced). Raises ValueError, before writing anything, for a spec no real host could have.

    `keep_disk` (a reboot): the previous host's disk — every top-level entry of its root but the
    VOLATILE ones — and its VM definitions (libvirt.xml) are kept byte for byte instead of the
    generated ones."""
    lay = cpu_layout(spec)
    pci = build_layout(spec)
    validate_vms(spec, lay, pci)
    validate_kernel(spec, pci)
    xml = libvirt_xml(spec, lay)
    nvml = nvml_state(spec, pci)
    host = GeneratedHost.at(dest)
    dest_dir = host.dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    # Build the tree beside the old one and swap it in, so an interrupted run never leaves half a host.
    tmp = dest_dir / (ROOT + ".partial")
    for stale in (tmp, host.nvml_state.with_name(NVML + ".partial"), host.libvirt_xml.with_name(LIBVIRT + ".partial")):
        sysfs_ops.remove_tree(stale)
    w = TreeWriter(tmp)
    write_cpus(w, spec, lay)
    write_nodes(w, spec, lay)
    write_proc(w, spec, lay)
    write_pci(w, spec, lay, pci)
    write_config(w, spec, pci)
    write_kernel(w, spec, pci)
    write_etc(w, spec)
    if keep_disk and host.root.is_dir():
        _carry_disk(host.root, tmp)
    _swap_root(host.root, tmp)
    write_nvml_state(host.nvml_state, nvml)
    if not (keep_disk and host.libvirt_xml.is_file()):
        write_atomic(host.libvirt_xml, xml.encode("utf-8"), STATE_FILE_MODE)
    return host


def _carry_disk(old_root: Path, new_root: Path) -> None:
    """Replace the generated disk of `new_root` with the old root's, links and modes as they are."""
    for name in os.listdir(new_root):
        if name not in VOLATILE:
            sysfs_ops.remove_tree(new_root / name)
    for entry in os.scandir(old_root):
        if entry.name in VOLATILE:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.copytree(entry.path, new_root / entry.name, symlinks=True)
        else:
            shutil.copy2(entry.path, new_root / entry.name, follow_symlinks=False)


def _swap_root(root: Path, new: Path) -> None:
    """Put `new` in the place of `root`: the old one is first moved aside (root.old), so a run cut
    short leaves either host whole (state.py puts root.old back when root is missing)."""
    old = root.with_name(root.name + ".old")
    sysfs_ops.remove_tree(old)
    if os.path.lexists(root):
        os.rename(root, old)
    os.rename(new, root)
    sysfs_ops.remove_tree(old)
