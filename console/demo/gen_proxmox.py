"""The demo host as a Proxmox VE host (`demo reset --proxmox`): the same hardware, its VMs as qemu-server
configs (etc/pve/qemu-server/<vmid>.conf, vmids from 100 in the preset's order), a resource mapping of its
GPUs (etc/pve/mapping/pci.cfg), and its running (and paused) VMs as QEMU processes with their pid files
(run/qemu-server/<vmid>.pid, /proc/<pid>/cmdline with that -pidfile), and pve-cluster running (its pmxcfs
process, /etc/pve mounted in /proc/mounts). The simulated `qm`
(console/demo/sim_qm.py) edits the configs.

How a libvirt VM of the preset becomes a Proxmox one: its vCPUs are `cores` (one socket: Proxmox has no
threads); its vCPU pins become `affinity` (their union: Proxmox pins the whole process); its numatune one
cell `numa0` over every vCPU with the host nodes and the policy (strict → bind); huge pages of 1 GiB or
2 MiB become `hugepages: 1024|2` (with `numa: 1`, as Proxmox needs); each PCI host device a `hostpciN`
(`pcie=1`: the machine is q35; a VF with an NVIDIA vGPU type adds `mdev=nvidia-TYPE`); each mdev vGPU
`hostpciN: GPU,mdev=TYPE`, its mdev renamed as Proxmox names the mdevs it creates (`proxmox_spec`).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.demo.gen_libvirt import vm_uuid
from nodeconsole.console.demo.spec import HostSpec, VmSpec
from nodeconsole.console.root import Root
from nodeconsole.console.vms.proxmox import CONF_DIR, mdev_uuid

FIRST_VMID = 100
PID_BASE = 20000  # a VM's QEMU process is PID_BASE + vmid
PMXCFS, PMXCFS_PID = "usr/bin/pmxcfs", 1234  # pve-cluster's cluster file system daemon
PVE_MOUNT = "/dev/fuse /etc/pve fuse rw,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,allow_other 0 0"
_POLICY = {"strict": "bind", "preferred": "preferred", "interleave": "interleave", "restrictive": "bind"}


def vmid_of(index: int) -> int:
    return FIRST_VMID + index


def proxmox_spec(spec: HostSpec) -> HostSpec:
    """The spec with each VM's mdevs renamed as Proxmox names the mdev of `hostpciN: …,mdev=` (its index N
    and the vmid), so the generated sysfs holds the mdevs Proxmox would have created."""
    renames = {h.mdev_uuid.lower(): mdev_uuid(n, vmid_of(i)) for i, vm in enumerate(spec.vms)
               for n, h in enumerate(vm.hostdevs) if h.mdev_uuid}
    out = _renamed(spec, renames)
    assert isinstance(out, HostSpec)
    return out


def _renamed(obj: Any, renames: dict[str, str]) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {f.name: new for f in dataclasses.fields(obj) if f.init
                   and (new := _renamed(getattr(obj, f.name), renames)) is not getattr(obj, f.name)}
        return dataclasses.replace(obj, **changed) if changed else obj
    if isinstance(obj, tuple):
        items = tuple(_renamed(x, renames) for x in obj)
        return items if any(a is not b for a, b in zip(items, obj)) else obj
    if isinstance(obj, str) and obj.lower() in renames:
        return renames[obj.lower()]
    return obj


def vm_conf(spec: HostSpec, vm: VmSpec, vmid: int, root: Root) -> str:
    """The VM's config as Proxmox writes it (keys sorted)."""
    opts = {"name": vm.name, "cores": str(vm.vcpus), "sockets": "1", "memory": str(vm.memory_mib),
            "machine": "q35", "ostype": "l26", "cpu": "host", "scsihw": "virtio-scsi-single",
            "scsi0": f"local-lvm:vm-{vmid}-disk-0,iothread=1,size=64G",
            "smbios1": f"uuid={vm_uuid(spec, vm)}", "boot": "order=scsi0"}
    cpus = sorted({c for pin in vm.pins for c in pin})
    if cpus:
        opts["affinity"] = format_cpulist(cpus)
    if vm.numatune is not None or vm.hugepages_kib is not None:
        opts["numa"] = "1"
    if vm.numatune is not None:
        mode, nodes = vm.numatune
        opts["numa0"] = (f"cpus=0-{vm.vcpus - 1},hostnodes={';'.join(map(str, nodes))},memory={vm.memory_mib},"
                         f"policy={_POLICY.get(mode, 'bind')}")
    if vm.hugepages_kib is not None:
        opts["hugepages"] = "2" if vm.hugepages_kib == 2048 else "1024"
    for n, h in enumerate(vm.hostdevs):
        opts[f"hostpci{n}"] = _hostpci(h.address, h.mdev_uuid, root)
    return "".join(f"{k}: {opts[k]}\n" for k in sorted(opts))


def _hostpci(address: str | None, uuid: str | None, root: Root) -> str:
    if uuid is not None:
        parent = root.link_target(f"sys/bus/mdev/devices/{uuid}")
        gpu = os.path.basename(os.path.dirname(parent)) if parent else "0000:00:00.0"
        kind = root.link_name(f"sys/bus/mdev/devices/{uuid}/mdev_type") or "nvidia-0"
        return f"{gpu},mdev={kind}"
    vgpu = root.read(f"sys/bus/pci/devices/{address}/nvidia/current_vgpu_type")
    return f"{address},pcie=1" + (f",mdev=nvidia-{vgpu}" if vgpu and vgpu != "0" else "")


def gpu_mapping(root: Root, node: str) -> str:
    """pci.cfg: one mapping of every NVIDIA GPU (a physical display or 3D controller) on this node."""
    lines = ["gpus"]
    for addr in root.listdir("sys/bus/pci/devices"):
        base = f"sys/bus/pci/devices/{addr}"
        cls = root.read(f"{base}/class") or ""
        if root.read(f"{base}/vendor") != "0x10de" or not cls.startswith(("0x0300", "0x0302")) or \
                root.exists(f"{base}/physfn"):
            continue
        ids = f"{(root.read(f'{base}/vendor') or '')[2:]}:{(root.read(f'{base}/device') or '')[2:]}"
        group = root.link_name(f"{base}/iommu_group")
        lines.append(f"\tmap id={ids}" + (f",iommugroup={group}" if group else "") + f",node={node},path={addr}")
    lines.append("\tdescription every GPU of the demo host")
    return "\n".join(lines) + "\n"


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def write_proxmox(spec: HostSpec, root_dir: Path, configs: bool = True) -> None:
    """The Proxmox VE parts of a generated demo tree (the module's doc); without `configs` (a reboot, which
    keeps the disk: /etc/pve) only the running VMs' processes."""
    root = Root(root_dir)
    node = spec.hostname.split(".")[0]
    (root_dir / "etc/pve/nodes" / node).mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(root_dir / "etc/pve/local"):
        os.symlink(f"nodes/{node}", root_dir / "etc/pve/local")
    if configs:
        _write(root_dir / "etc/pve/mapping/pci.cfg", gpu_mapping(root, node))
    if not os.path.lexists(root_dir / "var/run"):
        (root_dir / "var").mkdir(exist_ok=True)
        os.symlink("../run", root_dir / "var/run")
    (root_dir / CONF_DIR).mkdir(parents=True, exist_ok=True)
    _cluster_fs(root_dir)
    for i, vm in enumerate(spec.vms):
        vmid = vmid_of(i)
        if configs:
            _write(root_dir / CONF_DIR / f"{vmid}.conf", vm_conf(spec, vm, vmid, root))
        if vm.state in ("running", "paused"):
            _process(root_dir, vmid, vm)


def _cluster_fs(root_dir: Path) -> None:
    """pve-cluster running: its pmxcfs process, the program on the disk and /etc/pve mounted (FUSE)."""
    _write(root_dir / PMXCFS, "")
    proc = root_dir / f"proc/{PMXCFS_PID}"
    _write(proc / "cmdline", b"/usr/bin/pmxcfs\0")
    _write(proc / "comm", "pmxcfs\n")
    mounts = root_dir / "proc/mounts"
    text = mounts.read_text() if mounts.is_file() else ""
    if " /etc/pve " not in text:
        _write(mounts, text + PVE_MOUNT + "\n")


def _process(root_dir: Path, vmid: int, vm: VmSpec) -> None:
    """The VM's QEMU process: its pid file and /proc/<pid> (cmdline with -pidfile, stat, status, comm)."""
    pid = PID_BASE + vmid
    pidfile = f"/var/run/qemu-server/{vmid}.pid"
    _write(root_dir / f"run/qemu-server/{vmid}.pid", f"{pid}\n")
    args = ["/usr/bin/kvm", "-id", str(vmid), "-name", f"{vm.name},debug-threads=on", "-pidfile", pidfile,
            "-daemonize", "-smp", f"{vm.vcpus},sockets=1,cores={vm.vcpus},maxcpus={vm.vcpus}", "-m", str(vm.memory_mib)]
    proc = root_dir / f"proc/{pid}"
    _write(proc / "cmdline", "\0".join(args).encode() + b"\0")
    _write(proc / "comm", "kvm\n")
    _write(proc / "stat", f"{pid} (kvm) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 {vmid * 100} {vmid * 10} 0 0 20 0 "
           f"{vm.vcpus + 4} 0 100 0 0\n")
    _write(proc / "status", f"Name:\tkvm\nPid:\t{pid}\nVmRSS:\t{vm.memory_mib * 1024 // 2} kB\n")
