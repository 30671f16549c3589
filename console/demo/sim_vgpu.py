"""The simulated kernel's vGPU and SR-IOV reactions: mdev create/remove, VF `current_vgpu_type`,
`sriov_numvfs`, and what binding or unbinding nvidia adds or removes (mdev types, VF nvidia/ files)."""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Protocol

from nodeconsole.console.demo import sim_rdma
from nodeconsole.console.demo import sysfs_ops as ops
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.spec import vf_address_at


class SimulatedKernel(Protocol):
    """What these reactions need of the simulated kernel (console/demo/kernel.py, which calls them): its
    tree's base directory and driver probing. A protocol, so this module does not import the kernel back."""
    base: Path

    def probe(self, addr: str) -> None: ...


_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _err(code: int, detail: str) -> OSError:
    return OSError(code, f"{os.strerror(code)}: {detail}")


def _int(value: str) -> int:
    try:
        return int(value, 0)
    except ValueError:
        raise _err(errno.EINVAL, f"expected a number, got {value!r}") from None


def _mdev_children(k: SimulatedKernel, dev_dir: str) -> list[str]:
    d = k.base / dev_dir
    return sorted(e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False)
                  and os.path.islink(os.path.join(e.path, "mdev_type")))


def _set_available(k: SimulatedKernel, dev_dir: str, addr: str) -> None:
    """available_instances of every type: homogeneous time-sliced vGPU, so once instances exist only
    their type has room (max minus the instances), and with none every type offers its maximum."""
    types = ops.load_sim(k.base, "mdev_types.json").get(addr, {})
    used: dict[str, int] = {}
    for u in _mdev_children(k, dev_dir):
        t = ops.link_name(k.base, f"{dev_dir}/{u}/mdev_type") or ""
        used[t] = used.get(t, 0) + 1
    for name, t in types.items():
        avail = (t["max"] - used[name] if name in used else 0) if used else t["max"]
        path = k.base / dev_dir / "mdev_supported_types" / name / "available_instances"
        if path.parent.is_dir():
            path.write_text(f"{max(0, avail)}\n")


def mdev_create(k: SimulatedKernel, dev_dir: str, type_name: str, value: str) -> None:
    if not _UUID.match(value):
        raise _err(errno.EINVAL, f"{value!r} is not a UUID")
    uuid = value.lower()
    if os.path.lexists(k.base / ops.MDEV_DEVICES / uuid):
        raise _err(errno.EEXIST, f"mdev {uuid} already exists")
    avail = int(ops.read(k.base, f"{dev_dir}/mdev_supported_types/{type_name}/available_instances") or 0)
    if avail <= 0:
        raise _err(errno.EUSERS, f"{type_name} has no instance left on this GPU")
    group = ops.free_group(k.base)
    ops.write_mdev(TreeWriter(k.base), dev_dir, type_name, uuid, group)
    _set_available(k, dev_dir, os.path.basename(dev_dir))
    ops.refresh_vfio(k.base, group)


def mdev_remove(k: SimulatedKernel, mdev_dir: str, value: str) -> None:
    if _int(value) == 0:
        return
    uuid, dev_dir = os.path.basename(mdev_dir), os.path.dirname(mdev_dir)
    type_name = ops.link_name(k.base, f"{mdev_dir}/mdev_type") or ""
    group = ops.link_name(k.base, f"{mdev_dir}/iommu_group")
    for rel in (f"{ops.MDEV_DEVICES}/{uuid}", f"{dev_dir}/mdev_supported_types/{type_name}/devices/{uuid}"):
        if os.path.lexists(k.base / rel):
            os.unlink(k.base / rel)
    ops.remove_tree(k.base / mdev_dir)
    if group is not None:
        ops.remove_tree(k.base / ops.GROUPS / group)
        ops.refresh_vfio(k.base, int(group))
    _set_available(k, dev_dir, os.path.basename(dev_dir))


def set_vgpu_type(k: SimulatedKernel, vf_dir: str, value: str) -> None:
    new = _int(value)
    cur_path = k.base / vf_dir / "nvidia" / "current_vgpu_type"
    current = int(ops.read(k.base, f"{vf_dir}/nvidia/current_vgpu_type") or 0)
    template = ops.load_sim(k.base, "vgpu_vfs.json").get(os.path.basename(vf_dir), ops.VGPU_HEADER + "\n")
    if new == 0:
        if current:
            ops.write_vgpu_vf(TreeWriter(k.base), vf_dir, template, 0)
        return
    if current:
        raise _err(errno.EBUSY, f"the VF already holds vGPU type {current}; write 0 first")
    creatable = ops.read(k.base, f"{vf_dir}/nvidia/creatable_vgpu_types") or ""
    ids = {int(ln.split(":")[0]) for ln in creatable.splitlines() if ln.split(":")[0].strip().isdigit()}
    if new not in ids:
        raise _err(errno.EINVAL, f"vGPU type {new} is not creatable on this VF")
    cur_path.write_text(f"{new}\n")
    (k.base / vf_dir / "nvidia" / "creatable_vgpu_types").write_text(ops.VGPU_HEADER + "\n")


def nvidia_bound(k: SimulatedKernel, addr: str, dev_dir: str) -> None:
    """nvidia's probe registers the GPU as an mdev parent, or a VF's vGPU files."""
    types = ops.load_sim(k.base, "mdev_types.json").get(addr)
    w = TreeWriter(k.base)
    if types:
        ops.write_mdev_types(w, dev_dir, addr, types, {})
    creatable = ops.load_sim(k.base, "vgpu_vfs.json").get(addr)
    if creatable:
        ops.write_vgpu_vf(w, dev_dir, creatable, 0)


def nvidia_unbinding(k: SimulatedKernel, addr: str, dev_dir: str) -> None:
    """nvidia refuses to let go of a GPU that still carries vGPUs; otherwise its vGPU files go away."""
    if _mdev_children(k, dev_dir):
        raise _err(errno.EBUSY, f"{addr} still has mediated devices; remove them first")
    if int(ops.read(k.base, f"{dev_dir}/nvidia/current_vgpu_type") or 0):
        raise _err(errno.EBUSY, f"VF {addr} still holds a vGPU; write 0 to current_vgpu_type first")
    ops.remove_mdev_types(k.base, dev_dir, addr)
    ops.remove_tree(k.base / dev_dir / "nvidia")


def set_numvfs(k: SimulatedKernel, pf_dir: str, value: str) -> None:
    n = _int(value)
    pf = os.path.basename(pf_dir)
    tmpl = ops.load_sim(k.base, "sriov.json").get(pf)
    total = int(ops.read(k.base, f"{pf_dir}/sriov_totalvfs") or 0)
    current = int(ops.read(k.base, f"{pf_dir}/sriov_numvfs") or 0)
    if n < 0 or n > total:
        raise _err(errno.ERANGE, f"{n} VFs asked, the device has {total}")
    if n == current:
        return
    if tmpl is None or not os.path.islink(k.base / pf_dir / "driver"):
        raise _err(errno.ENOENT, f"{pf} has no driver that can enable SR-IOV")
    if n and current:
        raise _err(errno.EBUSY, f"{current} VFs already enabled; disable them before enabling {n}")
    if n == 0:
        _disable_vfs(k, pf_dir, current)
    else:
        _enable_vfs(k, pf_dir, pf, tmpl, n)
    (k.base / pf_dir / "sriov_numvfs").write_text(f"{n}\n")


def _disable_vfs(k: SimulatedKernel, pf_dir: str, count: int) -> None:
    vfs = [ops.link_name(k.base, f"{pf_dir}/virtfn{i}") for i in range(count)]
    for va in vfs:
        if va and int(ops.read(k.base, f"{ops.device_dir(k.base, va)}/nvidia/current_vgpu_type") or 0):
            raise _err(errno.EBUSY, f"VF {va} still holds a vGPU")
    defaults = ops.load_sim(k.base, "default_drivers.json")
    for i, va in enumerate(vfs):
        if va is None:
            continue
        vf_dir = ops.device_dir(k.base, va)
        assert vf_dir is not None, f"VF {va} is listed by {pf_dir}/virtfn{i} but is no PCI device"
        drv = ops.link_name(k.base, f"{vf_dir}/driver")
        if drv:
            sim_rdma.unbinding(k.base, vf_dir, drv)
            ops.unbind_links(k.base, vf_dir, va, drv)
        group = ops.link_name(k.base, f"{vf_dir}/iommu_group")
        if group is not None:
            os.unlink(k.base / ops.GROUPS / group / "devices" / va)
            if not ops.group_members(k.base, int(group)):
                ops.remove_tree(k.base / ops.GROUPS / group)
            ops.refresh_vfio(k.base, int(group))
        ops.remove_tree(k.base / vf_dir)
        os.unlink(k.base / ops.PCI_DEVICES / va)
        os.unlink(k.base / pf_dir / f"virtfn{i}")
        defaults.pop(va, None)
    ops.save_sim(k.base, "default_drivers.json", defaults)


def _enable_vfs(k: SimulatedKernel, pf_dir: str, pf: str, tmpl: dict, n: int) -> None:
    w = TreeWriter(k.base)
    parent = os.path.dirname(pf_dir)
    attrs = {a: ops.read(k.base, f"{pf_dir}/{a}") or "" for a in
             ("vendor", "subsystem_vendor", "subsystem_device", "class", "numa_node", "local_cpus",
              "local_cpulist")}
    vendor, device, cls = int(attrs["vendor"], 16), tmpl["vf_device"], int(attrs["class"], 16)
    sv, sd = int(attrs["subsystem_vendor"], 16), int(attrs["subsystem_device"], 16)
    defaults = ops.load_sim(k.base, "default_drivers.json")
    creatable = ops.load_sim(k.base, "vgpu_vfs.json")
    group_type = "identity" if "iommu=pt" in (ops.read(k.base, "proc/cmdline") or "").split() else "DMA"
    iommu = os.path.islink(k.base / pf_dir / "iommu_group")
    autoprobe = ops.read(k.base, f"{pf_dir}/sriov_drivers_autoprobe") != "0"
    for i in range(n):
        va = vf_address_at(pf, tmpl["offset"], tmpl["stride"], i)
        d = f"{parent}/{va}"
        for a, v in attrs.items():
            w.attr(f"{d}/{a}", v)
        w.attr(f"{d}/device", f"0x{device:04x}")
        for a, value in (("driver_override", "(null)"), ("enable", 1), ("reset_method", "flr"),
                         ("modalias", ops.modalias(vendor, device, cls, sv, sd))):
            w.attr(f"{d}/{a}", value)
        w.raw(f"{d}/reset", "")
        w.raw(f"{d}/remove", "")
        w.link(f"{d}/subsystem", "sys/bus/pci")
        w.link(f"{d}/physfn", pf_dir)
        w.link(f"{pf_dir}/virtfn{i}", d)
        w.link(f"{ops.PCI_DEVICES}/{va}", d)
        ops.write_uevent(w, d, va, vendor, device, cls, sv, sd, None)
        if iommu:
            ops.join_group(w, d, va, ops.free_group(k.base), group_type)
        defaults[va] = tmpl["vf_driver"]
        if tmpl.get("vgpu_creatable"):
            creatable[va] = tmpl["vgpu_creatable"]
    ops.save_sim(k.base, "default_drivers.json", defaults)
    ops.save_sim(k.base, "vgpu_vfs.json", creatable)
    if autoprobe:
        for i in range(n):
            k.probe(vf_address_at(pf, tmpl["offset"], tmpl["stride"], i))
