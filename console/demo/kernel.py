"""The demo host's kernel writer: `SimulatedKernel` writes kernel attribute files (sysfs/procfs) on a
generated host and then changes the tree the way Linux would (driver links, /dev/vfio nodes, mdev devices,
SR-IOV VFs), validating every write as the kernel does. It satisfies the `KernelWriter` protocol
(console/host_seams.py) that the real host's `Kernel` (console/kernel_writer.py) implements.

Failure injection (`fail_on`) lets tests make the k-th matching write fail with any error."""
from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from nodeconsole.console.demo import sim_rdma, sim_vgpu
from nodeconsole.console.demo import sysfs_ops as ops
from nodeconsole.console.demo.fstree import TreeWriter
from nodeconsole.console.root import Root

Match = str | Callable[[str, str], bool]
_DRIVER_FILE = re.compile(r"^sys/bus/pci/drivers/([^/]+)/(bind|unbind|new_id|remove_id)$")
_MODULES = "sys/module"
# What loading a module loads first (modprobe follows depends and softdeps)
_DEPENDS: dict[str, tuple[str, ...]] = {"vfio_pci": ("vfio", "vfio_iommu_type1", "vfio_pci_core"),
                                        "vfio_pci_core": ("vfio", "vfio_iommu_type1"),
                                        "vfio_iommu_type1": ("vfio",), "vfio": ("vfio_iommu_type1",),
                                        "vhost_net": ("vhost", "vhost_iotlb", "tap"), "vhost": ("vhost_iotlb",)}
_PARAMETERS = {"vfio_iommu_type1": {"allow_unsafe_interrupts": "N", "dma_entry_limit": "65535"}}
_DRIVERS = {"vfio_pci": "vfio-pci", "pci_stub": "pci-stub"}  # module → the PCI driver it registers
_NOT_PCI = {"vfio", "vfio_iommu_type1", "vfio_pci_core", "kvm", "kvm_intel", "kvm_amd", "vhost_net", "vhost",
            "vhost_iotlb", "tap", "tun"}  # no PCI driver
_NODES = {"vhost_net": "dev/vhost-net", "tun": "dev/net/tun"}  # the device node a module makes
_HUGEPAGES = re.compile(r"^sys/(devices/system/node/node\d+|kernel/mm)/hugepages/hugepages-\d+kB/nr_hugepages$")


def _err(code: int, detail: str, path: str = "") -> OSError:
    return OSError(code, f"{os.strerror(code)}: {detail}", path or None)


@dataclass
class FailRule:
    """Fail the matching writes after the first `after` of them, `times` times (None: always)."""
    match: Match
    error: BaseException
    after: int = 0
    times: int | None = 1
    seen: int = 0
    fired: int = 0

    def matches(self, given: str, resolved: str, text: str) -> bool:
        if callable(self.match):
            return bool(self.match(given, text))
        suffix = self.match.lstrip("/")
        return given.endswith(suffix) or resolved.endswith(suffix)


@dataclass(frozen=True)
class WriteRecord:
    path: str
    text: str
    error: str | None = None  # repr of the error raised, None when the write succeeded


class SimulatedKernel:
    """A kernel over a generated host root. Reacts to: driver_override, drivers/NAME/{bind,unbind,
    new_id,remove_id}, drivers_probe, mdev create/remove, VF nvidia/current_vgpu_type, sriov_numvfs,
    sriov_drivers_autoprobe, reset, nr_hugepages and /proc/sys/kernel/numa_balancing; `load_module` / `unload_module` stand for
    modprobe / modprobe -r. Any other existing attribute is read-only (PermissionError, as for a sysfs
    file without a store method)."""

    def __init__(self, root: Root | str | os.PathLike[str]) -> None:
        self.root = root if isinstance(root, Root) else Root(root)
        self.base = self.root.path
        self.log: list[WriteRecord] = []
        self.rules: list[FailRule] = []

    def read(self, path: str) -> str | None:
        return self.root.read(path)

    # -- failure injection --
    def fail_on(self, match: Match, error: BaseException | None = None, after: int = 0,
                times: int | None = 1) -> FailRule:
        """Make writes fail: `match` is a path suffix (compared with the path as given and as resolved
        through links) or a predicate (path, text) → bool. The first `after` matching writes succeed;
        the next `times` ones raise `error` (default EIO) without changing anything."""
        rule = FailRule(match, error or _err(errno.EIO, "injected failure"), after, times)
        self.rules.append(rule)
        return rule

    def clear_failures(self) -> None:
        self.rules.clear()

    @property
    def writes(self) -> list[tuple[str, str]]:
        """(path, text) of the writes that succeeded, in order."""
        return [(r.path, r.text) for r in self.log if r.error is None]

    def write(self, path: str, text: str) -> None:
        given = path.lstrip("/")
        try:
            resolved = ops.resolve(self.base, given)
            self._contained(resolved)
            self._inject(given, resolved, text)
            target = self.base / resolved
            if not os.path.lexists(target):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/" + given)
            if target.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), "/" + given)
            self._dispatch(resolved, text.strip(), "/" + given)
        except BaseException as e:
            self.log.append(WriteRecord(path, text, repr(e)))
            raise
        self.log.append(WriteRecord(path, text))

    # where the simulated kernel itself writes, besides the device directory of the write
    _TREES = ("sys/devices", ops.PCI_DEVICES, ops.PCI_DRIVERS, ops.GROUPS, "sys/bus/mdev", "sys/class/mdev_bus",
              "dev", "dev/vfio", ops.SIM, sim_rdma.IB_CLASS, sim_rdma.NET_CLASS)

    def _contained(self, resolved: str) -> None:
        """Every directory a write changes resolves inside the demo root (a link planted in the tree,
        `ln -s /elsewhere ROOT/sys/bus/pci/drivers`, must not carry the simulation's writes out)."""
        for rel in (os.path.dirname(resolved),) + self._TREES:
            if self.root.resolve(rel) is None:
                raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)}: /{rel} leads out of the "
                                      f"demo root {self.base}", "/" + rel)

    def _inject(self, given: str, resolved: str, text: str) -> None:
        for rule in self.rules:
            if rule.times is not None and rule.fired >= rule.times:
                continue
            if not rule.matches(given, resolved, text):
                continue
            rule.seen += 1
            if rule.seen > rule.after:
                rule.fired += 1
                raise rule.error

    # -- dispatch --
    def _dispatch(self, rel: str, value: str, shown: str) -> None:
        name = os.path.basename(rel)
        parent = os.path.dirname(rel)
        m = _DRIVER_FILE.match(rel)
        if rel == "sys/bus/pci/drivers_probe":
            self.probe(value)
        elif rel == "sys/bus/pci/drivers_autoprobe":
            self._store_bool(rel, value)
        elif m:
            getattr(self, "_drv_" + m.group(2))(m.group(1), value)
        elif name == "driver_override" and self._is_pci_dir(parent):
            (self.base / rel).write_text((value or "(null)") + "\n")
        elif rel.endswith("/create") and "/mdev_supported_types/" in rel:
            sim_vgpu.mdev_create(self, rel.split("/mdev_supported_types/")[0], os.path.basename(parent), value)
        elif name == "remove" and os.path.islink(self.base / parent / "mdev_type"):
            sim_vgpu.mdev_remove(self, parent, value)
        elif rel.endswith("/nvidia/current_vgpu_type"):
            sim_vgpu.set_vgpu_type(self, os.path.dirname(parent), value)
        elif name == "sriov_numvfs" and self._is_pci_dir(parent):
            sim_vgpu.set_numvfs(self, parent, value)
        elif name == "sriov_drivers_autoprobe" and self._is_pci_dir(parent):
            self._store_bool(rel, value)
        elif name == "reset" and self._is_pci_dir(parent):
            self._reset(parent, value)
        elif _HUGEPAGES.match(rel):
            self._hugepages(rel, value)
        elif rel == "proc/sys/kernel/numa_balancing":
            if value not in ("0", "1", "2", "3"):  # bits: 1 normal balancing, 2 memory tiering
                raise _err(errno.EINVAL, f"numa_balancing takes 0-3, not {value!r}")
            (self.base / rel).write_text(value + "\n")
        else:
            raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)}: read-only attribute", shown)

    def _is_pci_dir(self, rel_dir: str) -> bool:
        addr = os.path.basename(rel_dir)
        return ops.device_dir(self.base, addr) == rel_dir

    def _store_bool(self, rel: str, value: str) -> None:
        if value not in ("0", "1"):
            raise _err(errno.EINVAL, f"expected 0 or 1, got {value!r}")
        (self.base / rel).write_text(value + "\n")

    def _dev(self, addr: str) -> str:
        d = ops.device_dir(self.base, addr) if addr else None
        if d is None:
            raise _err(errno.ENODEV, f"no PCI device {addr!r}")
        return d

    # -- drivers --
    def driver_of(self, addr: str) -> str | None:
        return ops.link_name(self.base, f"{self._dev(addr)}/driver")

    def override_of(self, addr: str) -> str | None:
        text = ops.read(self.base, f"{self._dev(addr)}/driver_override")
        return None if text in (None, "", "(null)") else text

    def default_driver(self, addr: str) -> str | None:
        return ops.load_sim(self.base, "default_drivers.json").get(addr)

    def _driver_exists(self, name: str) -> bool:
        return (self.base / ops.PCI_DRIVERS / name).is_dir()

    def _id_matches(self, driver: str, addr: str) -> bool:
        dev_dir = self._dev(addr)
        ids = ops.load_sim(self.base, "new_ids.json").get(driver, [])
        vd = [int(ops.read(self.base, f"{dev_dir}/{f}") or "0", 16) for f in ("vendor", "device")]
        return vd in ids

    def _matches(self, driver: str, addr: str) -> bool:
        """PCI core matching: an override names the only driver that may bind; without one, the
        device's own driver or a dynamic id added through new_id."""
        override = self.override_of(addr)
        if override is not None:
            return override == driver
        return self.default_driver(addr) == driver or self._id_matches(driver, addr)

    def probe(self, addr: str) -> None:
        """`echo ADDR > /sys/bus/pci/drivers_probe`: bind to the override, else the default driver."""
        self._dev(addr)
        if self.driver_of(addr):
            return
        override = self.override_of(addr)
        if override is not None:
            if not self._driver_exists(override):
                raise _err(errno.ENODEV, f"driver_override names {override!r}, which is not loaded")
            self.attach(addr, override, quiet=True)
            return
        for name in [self.default_driver(addr)] + sorted(os.listdir(self.base / ops.PCI_DRIVERS)):
            if name and self._driver_exists(name) and self._matches(name, addr):
                self.attach(addr, name, quiet=True)
                return

    def attach(self, addr: str, driver: str, quiet: bool = False) -> None:
        """Bind `addr` to `driver` and apply what the driver's probe creates. `quiet`: a failing probe
        leaves the device unbound without an error, as drivers_probe does."""
        dev_dir = self._dev(addr)
        if driver == "vfio-pci" and not os.path.islink(self.base / dev_dir / "iommu_group"):
            if quiet:
                return
            raise _err(errno.EINVAL, f"vfio-pci cannot take {addr}: it has no IOMMU group")
        ops.bind_links(TreeWriter(self.base), dev_dir, addr, driver)
        ops.set_uevent_driver(self.base, dev_dir, driver)
        if driver == "nvidia":
            sim_vgpu.nvidia_bound(self, addr, dev_dir)
        sim_rdma.bound(self.base, dev_dir, addr, driver)
        self._refresh_group(dev_dir)

    def detach(self, addr: str, driver: str) -> None:
        dev_dir = self._dev(addr)
        if self.driver_of(addr) != driver:
            raise _err(errno.ENODEV, f"{addr} is not bound to {driver}")
        if driver == "nvidia":
            sim_vgpu.nvidia_unbinding(self, addr, dev_dir)  # raises EBUSY while vGPUs exist
        sim_rdma.unbinding(self.base, dev_dir, driver)
        ops.unbind_links(self.base, dev_dir, addr, driver)
        ops.set_uevent_driver(self.base, dev_dir, None)
        self._refresh_group(dev_dir)

    def load_module(self, name: str) -> None:
        """`modprobe NAME`: the module and what it depends on appear under /sys/module, its driver under
        bus/pci/drivers and, as its registration runs driver_attach, takes every unbound device it
        matches (by override or default driver)."""
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise _err(errno.EINVAL, f"{name!r} is not a module name")
        mod = name.replace("-", "_")
        self._contained(f"{_MODULES}/{mod}")
        w = TreeWriter(self.base)
        for dep in _DEPENDS.get(mod, ()) + (mod,):
            if not (self.base / _MODULES / dep).is_dir():
                w.attr(f"{_MODULES}/{dep}/initstate", "live")
                for param, value in _PARAMETERS.get(dep, {}).items():
                    w.attr(f"{_MODULES}/{dep}/parameters/{param}", value)
        if (self.base / _MODULES / "vfio").is_dir() and not os.path.lexists(self.base / "dev/vfio/vfio"):
            w.raw("dev/vfio/vfio", "")
        if mod in _NODES and not os.path.lexists(self.base / _NODES[mod]):
            w.raw(_NODES[mod], "")
        if mod in _NOT_PCI:
            return
        name = _DRIVERS.get(mod, name)
        if self._driver_exists(name):
            return
        ops.write_driver_dir(w, name)
        for addr in sorted(os.listdir(self.base / ops.PCI_DEVICES)):
            if self.driver_of(addr) is None and self._matches(name, addr):
                self.attach(addr, name, quiet=True)

    def unload_module(self, name: str) -> None:
        """`modprobe -r NAME`: refused (EBUSY) while a device is bound to its driver or another loaded
        module needs it; otherwise its driver and /sys/module entry go."""
        mod = name.replace("-", "_")
        self._contained(f"{_MODULES}/{mod}")
        if not (self.base / _MODULES / mod).is_dir():
            raise _err(errno.ENOENT, f"module {mod} is not loaded")
        users = [m for m, deps in _DEPENDS.items() if mod in deps and (self.base / _MODULES / m).is_dir()]
        if users:
            raise _err(errno.EBUSY, f"module {mod} is in use by {', '.join(sorted(users))}")
        driver = _DRIVERS.get(mod, mod)
        d = self.base / ops.PCI_DRIVERS / driver
        if d.is_dir() and any(os.path.islink(d / n) for n in os.listdir(d)):
            raise _err(errno.EBUSY, f"module {mod} is in use: devices are bound to {driver}")
        ops.remove_tree(d)
        ops.remove_tree(self.base / _MODULES / mod)
        if mod == "vfio":
            ops.remove_tree(self.base / "dev/vfio/vfio")
        if mod in _NODES:
            ops.remove_tree(self.base / _NODES[mod])

    def _refresh_group(self, dev_dir: str) -> None:
        group = ops.link_name(self.base, f"{dev_dir}/iommu_group")
        if group is not None:
            ops.refresh_vfio(self.base, int(group))

    def _drv_bind(self, driver: str, addr: str) -> None:
        self._dev(addr)
        if self.driver_of(addr):
            raise _err(errno.EBUSY, f"{addr} is already bound to {self.driver_of(addr)}")
        if not self._matches(driver, addr):
            raise _err(errno.ENODEV, f"{driver} does not match {addr}")
        self.attach(addr, driver)

    def _drv_unbind(self, driver: str, addr: str) -> None:
        self.detach(addr, driver)

    def _parse_id(self, value: str) -> list[int]:
        try:
            vendor, device = (int(x, 16) for x in value.split()[:2])
        except ValueError:
            raise _err(errno.EINVAL, f"expected 'VENDOR DEVICE' in hex, got {value!r}") from None
        return [vendor, device]

    def _drv_new_id(self, driver: str, value: str) -> None:
        pair = self._parse_id(value)
        ids = ops.load_sim(self.base, "new_ids.json")
        if pair in ids.get(driver, []):
            raise _err(errno.EEXIST, f"{value} is already a dynamic id of {driver}")
        ids.setdefault(driver, []).append(pair)
        ops.save_sim(self.base, "new_ids.json", ids)
        # The kernel runs driver_attach: every unbound device now matching is probed.
        for addr in sorted(os.listdir(self.base / ops.PCI_DEVICES)):
            if self.driver_of(addr) is None and self._matches(driver, addr):
                self.attach(addr, driver, quiet=True)

    def _drv_remove_id(self, driver: str, value: str) -> None:
        pair = self._parse_id(value)
        ids = ops.load_sim(self.base, "new_ids.json")
        if pair not in ids.get(driver, []):
            raise _err(errno.ENODEV, f"{value} is not a dynamic id of {driver}")
        ids[driver].remove(pair)
        ops.save_sim(self.base, "new_ids.json", ids)

    # -- misc attributes --
    def _reset(self, dev_dir: str, value: str) -> None:
        if value != "1":
            raise _err(errno.EINVAL, f"write 1 to reset, not {value!r}")
        if not ops.read(self.base, f"{dev_dir}/reset_method"):
            raise _err(errno.ENOTTY, "the device has no reset method")

    def _hugepages(self, rel: str, value: str) -> None:
        if not value.isdigit():
            raise _err(errno.EINVAL, f"expected a page count, got {value!r}")
        d = self.base / os.path.dirname(rel)
        old = int(ops.read(self.base, rel) or 0)
        free = int(ops.read(self.base, os.path.join(os.path.dirname(rel), "free_hugepages")) or 0)
        (d / "nr_hugepages").write_text(f"{int(value)}\n")
        (d / "free_hugepages").write_text(f"{max(0, free + int(value) - old)}\n")
