"""The pieces of sysfs the kernel adds and removes at run time (driver links, mdev devices and types,
SR-IOV vGPU files, /dev/vfio nodes), shared by the generator (initial state) and the simulated kernel
(changes), so both produce the same layout."""
from __future__ import annotations

import json
import os
from pathlib import Path

from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.demo.host import STATE_FILE_MODE
from nodeconsole.console.outfile import write_atomic

PCI_DEVICES = "sys/bus/pci/devices"
PCI_DRIVERS = "sys/bus/pci/drivers"
MDEV_DEVICES = "sys/bus/mdev/devices"
MDEV_DRIVER = "nvidia-vgpu-vfio"
GROUPS = "sys/kernel/iommu_groups"
SIM = ".sim"  # the simulator's own notes (default drivers, type templates); Linux has no such thing
VFIO_OK = ("vfio-pci", "pci-stub", None)  # drivers a viable group may hold (kernel vfio.rst)
VGPU_HEADER = "ID    : vGPU Name"


def resolve(base: Path, rel: str, max_hops: int = 40) -> str:
    """Root-relative path with every symlink component resolved textually inside `base` (a link's
    absolute target is taken as root-relative). Raises OSError(ELOOP) past `max_hops` links."""
    parts = [p for p in rel.split("/") if p and p != "."]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        cur = "/".join(done + [part])
        try:
            target = os.readlink(base / cur)
        except OSError:  # not a link (or absent): keep it as is
            done.append(part)
            continue
        hops += 1
        if hops > max_hops:
            raise OSError(40, "Too many levels of symbolic links", rel)
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p and p != "."] + parts
    return "/".join(done)


def read(base: Path, rel: str) -> str | None:
    try:
        return (base / rel).read_text().strip()
    except OSError:
        return None


def link_name(base: Path, rel: str) -> str | None:
    try:
        return os.path.basename(os.readlink(base / rel))
    except OSError:
        return None


def device_dir(base: Path, addr: str) -> str | None:
    """The device's directory under sys/devices, or None when no such PCI device exists."""
    if not os.path.lexists(base / PCI_DEVICES / addr):
        return None
    return resolve(base, f"{PCI_DEVICES}/{addr}")


def write_uevent(w: TreeWriter, dev_dir: str, addr: str, vendor: int, device: int, class_id: int,
                 sub_vendor: int, sub_device: int, driver: str | None) -> None:
    lines = [f"DRIVER={driver}"] if driver else []
    lines += [f"PCI_CLASS={class_id:X}", f"PCI_ID={vendor:04X}:{device:04X}",
              f"PCI_SUBSYS_ID={sub_vendor:04X}:{sub_device:04X}", f"PCI_SLOT_NAME={addr}",
              f"MODALIAS={modalias(vendor, device, class_id, sub_vendor, sub_device)}"]
    w.raw(f"{dev_dir}/uevent", "\n".join(lines) + "\n")


def modalias(vendor: int, device: int, class_id: int, sub_vendor: int, sub_device: int) -> str:
    return (f"pci:v{vendor:08X}d{device:08X}sv{sub_vendor:08X}sd{sub_device:08X}"
            f"bc{class_id >> 16:02X}sc{(class_id >> 8) & 0xFF:02X}i{class_id & 0xFF:02X}")


def set_uevent_driver(base: Path, dev_dir: str, driver: str | None) -> None:
    text = read(base, f"{dev_dir}/uevent") or ""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("DRIVER=")]
    if driver:
        lines.insert(0, f"DRIVER={driver}")
    (base / dev_dir / "uevent").write_text("\n".join(lines) + "\n")


def write_driver_dir(w: TreeWriter, name: str) -> None:
    d = f"{PCI_DRIVERS}/{name}"
    for f in ("bind", "unbind", "new_id", "remove_id"):
        w.raw(f"{d}/{f}", "")
    w.raw(f"{d}/uevent", "")


def bind_links(w: TreeWriter, dev_dir: str, addr: str, driver: str) -> None:
    w.link(f"{dev_dir}/driver", f"{PCI_DRIVERS}/{driver}")
    w.link(f"{PCI_DRIVERS}/{driver}/{addr}", dev_dir)


def unbind_links(base: Path, dev_dir: str, addr: str, driver: str) -> None:
    for rel in (f"{dev_dir}/driver", f"{PCI_DRIVERS}/{driver}/{addr}"):
        if os.path.lexists(base / rel):
            os.unlink(base / rel)


# -- mediated devices (time-sliced vGPU) --

def mdev_description(framebuffer_mib: int, max_instances: int) -> str:
    return (f"num_heads=1, frl_config=60, framebuffer={framebuffer_mib}M, max_resolution=4096x2160, "
            f"max_instance={max_instances}")


def write_mdev_types(w: TreeWriter, dev_dir: str, addr: str, types: dict[str, dict],
                     available: dict[str, int]) -> None:
    """`types`: mdev type name → {"name", "description", "max"}; the GPU becomes an mdev parent."""
    for tname, t in sorted(types.items()):
        d = f"{dev_dir}/mdev_supported_types/{tname}"
        w.attr(f"{d}/name", t["name"])
        w.attr(f"{d}/description", t["description"])
        w.attr(f"{d}/available_instances", available.get(tname, t["max"]))
        w.attr(f"{d}/device_api", "vfio-pci")
        w.raw(f"{d}/create", "")
        w.mkdir(f"{d}/devices")
    w.link(f"sys/class/mdev_bus/{addr}", dev_dir)


def remove_tree(path: Path) -> None:
    """rm -r without following links (shutil.rmtree refuses symlinked roots, which is what we want)."""
    if os.path.islink(path) or not path.is_dir():
        if os.path.lexists(path):
            os.unlink(path)
        return
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            remove_tree(Path(entry.path))
        else:
            os.unlink(entry.path)
    os.rmdir(path)


def remove_mdev_types(base: Path, dev_dir: str, addr: str) -> None:
    remove_tree(base / dev_dir / "mdev_supported_types")
    link = base / "sys/class/mdev_bus" / addr
    if os.path.lexists(link):
        os.unlink(link)


def write_mdev(w: TreeWriter, dev_dir: str, type_name: str, uuid: str, group: int | None) -> None:
    """An mdev device under its parent, with the links Linux makes (type, bus, group, driver)."""
    d = f"{dev_dir}/{uuid}"
    w.link(f"{d}/mdev_type", f"{dev_dir}/mdev_supported_types/{type_name}")
    w.raw(f"{d}/remove", "")
    w.raw(f"{d}/uevent", f"DRIVER={MDEV_DRIVER}\nMDEV_TYPE={type_name}\n")
    w.link(f"{d}/driver", f"sys/bus/mdev/drivers/{MDEV_DRIVER}")
    w.mkdir(f"sys/bus/mdev/drivers/{MDEV_DRIVER}")
    w.link(f"{dev_dir}/mdev_supported_types/{type_name}/devices/{uuid}", d)
    w.link(f"{MDEV_DEVICES}/{uuid}", d)
    if group is not None:
        join_group(w, d, uuid, group)


def join_group(w: TreeWriter, dev_dir: str, name: str, group: int, group_type: str = "DMA") -> None:
    w.link(f"{dev_dir}/iommu_group", f"{GROUPS}/{group}")
    w.link(f"{GROUPS}/{group}/devices/{name}", dev_dir)
    if not os.path.exists(w.base / GROUPS / str(group) / "type"):
        w.attr(f"{GROUPS}/{group}/type", group_type)


def free_group(base: Path) -> int:
    """The lowest unused IOMMU group number (the kernel allocates them from an IDA)."""
    used = {int(n) for n in os.listdir(base / GROUPS) if n.isdigit()} if (base / GROUPS).is_dir() else set()
    n = 0
    while n in used:
        n += 1
    return n


# -- SR-IOV vGPU (vGPU 17+: VF/nvidia/{creatable_vgpu_types,current_vgpu_type}) --

def creatable_text(types: list[tuple[int, str]]) -> str:
    return "".join([VGPU_HEADER + "\n"] + [f"{tid:<5} : {name}\n" for tid, name in types])


def write_vgpu_vf(w: TreeWriter, vf_dir: str, creatable: str, current: int) -> None:
    w.raw(f"{vf_dir}/nvidia/creatable_vgpu_types", creatable if current == 0 else VGPU_HEADER + "\n")
    w.attr(f"{vf_dir}/nvidia/current_vgpu_type", current)


# -- /dev/vfio --

def group_members(base: Path, group: int) -> list[str]:
    d = base / GROUPS / str(group) / "devices"
    return sorted(os.listdir(d)) if d.is_dir() else []


def group_vfio_ready(base: Path, group: int) -> bool:
    """True when the group can be opened through vfio: some member is on vfio-pci (or is an mdev) and
    every other non-bridge member is on vfio-pci, pci-stub or no driver."""
    any_vfio = False
    for name in group_members(base, group):
        rel = f"{GROUPS}/{group}/devices/{name}"
        dev_dir = resolve(base, rel)
        if os.path.lexists(base / dev_dir / "mdev_type"):
            any_vfio = True
            continue
        cls = read(base, f"{dev_dir}/class") or "0x0"
        if int(cls, 16) >> 8 == 0x0604:  # PCI bridges and ports are exempt
            continue
        drv = link_name(base, f"{dev_dir}/driver")
        if drv not in VFIO_OK:
            return False
        any_vfio = any_vfio or drv == "vfio-pci"
    return any_vfio


def refresh_vfio(base: Path, group: int) -> None:
    """Create or remove /dev/vfio/GROUP to match the group's drivers (regular files stand for the
    character devices: a generated tree cannot mknod)."""
    node = base / "dev/vfio" / str(group)
    if group_vfio_ready(base, group):
        node.parent.mkdir(parents=True, exist_ok=True)
        if not node.exists():
            node.write_text("")
    elif os.path.lexists(node):
        os.unlink(node)


def load_sim(base: Path, name: str) -> dict:
    try:
        return json.loads((base / SIM / name).read_text())
    except (OSError, ValueError):
        return {}


def save_sim(base: Path, name: str, data: dict) -> None:
    (base / SIM).mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    write_atomic(base / SIM / name, text.encode("utf-8"), STATE_FILE_MODE)  # whole, never through a link
