"""Proxmox VE as a VM backend (console/vms/backend.py's VmBackend): every read through the VMs' config
files (console/vms/proxmox.py), a VM named by its name or its vmid. Changes are not made yet: each change
method raises VmConfigError("not yet on Proxmox: …"), so an action refuses with that one line and changes
nothing (Proxmox's own way, `qm set`, is the next step).
"""
from __future__ import annotations

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.model import Vm
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root
from nodeconsole.console.vms.backend import PinScopes, SavedHostdev, VmConfigError, VmPins
from nodeconsole.console.vms.proxmox import (
    CONF_DIR,
    ProxmoxReader,
    find_vmid,
    host_view,
    mdev_uuid,
    read_conf,
    running_pid,
    vm_ids,
    vm_record,
)
from nodeconsole.console.vms.proxmox_conf import QemuConf, parse_hostpci, settings
from nodeconsole.console.vms.proxmox_mapping import resolve_hostpci

PENDING_SAYS = ("a running Proxmox VM takes a config change at its next start: it waits in the config's "
                "[PENDING] section until then")


def not_yet(what: str) -> VmConfigError:
    return VmConfigError(f"not yet on Proxmox: {what} (qm set is not driven by this console yet)")


class ProxmoxVms:
    """The VMs of a Proxmox VE host (or of a captured tree of one) below `root`."""

    label = "Proxmox VE"
    one_state = False

    def __init__(self, root: Root) -> None:
        self.root = root

    def reader(self) -> ProxmoxReader:
        return ProxmoxReader(self.root)

    def _conf(self, vm: str) -> QemuConf:
        vmid = find_vmid(self.root, vm)
        conf = read_conf(self.root, vmid) if vmid is not None else None
        if conf is None:
            raise VmConfigError(f"no VM named {vm!r} (nor with that vmid) in /{CONF_DIR}")
        return conf

    def names(self) -> list[str]:
        return sorted(vm.name for vm in self._all())

    def _all(self) -> list[Vm]:
        view = host_view(self.root)
        return [vm_record(self.root, conf, running_pid(self.root, vmid), view)
                for vmid in vm_ids(self.root) if (conf := read_conf(self.root, vmid)) is not None]

    def vm(self, name: str) -> Vm | None:
        try:
            conf = self._conf(name)
        except VmConfigError:
            return None
        return vm_record(self.root, conf, running_pid(self.root, conf.vmid), host_view(self.root))

    def _hostpci(self, vm: str) -> list[tuple[int, tuple[str, ...]]]:
        """(index, host functions) of each hostpci line of the VM's config."""
        conf = self._conf(vm)
        s, view = settings(conf.main, conf.path), host_view(self.root)
        running = running_pid(self.root, conf.vmid) is not None
        return [(h.index, resolve_hostpci(self.root, h, conf.vmid, running, view.mappings, view.node,
                                          view.reserved).addresses) for h in s.hostpci]

    def pci_hostdevs(self, vm: str) -> set[str]:
        return {a for _, addrs in self._hostpci(vm) for a in addrs}

    def hostdev_place(self, vm: str, address: str) -> tuple[int, bool] | None:
        address = parse_pci_address(address)
        return next(((i, True) for i, addrs in self._hostpci(vm) if address in addrs), None)

    def save(self, vm: str) -> str:
        """The VM's config file, exactly."""
        data = self.root.read_bytes(f"{CONF_DIR}/{self._conf(vm).vmid}.conf")
        return data.decode("utf-8", "surrogateescape") if data is not None else ""

    def pin_scopes(self, vm: str, running: bool) -> PinScopes:
        return PinScopes(("config",), False, PENDING_SAYS if running else "")

    def every_cpu(self) -> frozenset[int]:
        return frozenset()

    def pins(self, vm: str, live: bool) -> VmPins:
        """The config's `affinity` (the whole process: no vCPU is pinned apart) and NUMA binding; Proxmox has
        no live state apart from the config, so `live` reads the same."""
        conf = self._conf(vm)
        s = settings(conf.main, conf.path)
        record = vm_record(self.root, conf, None, host_view(self.root))
        numa = (record.numa_mode, format_cpulist(record.numa_nodeset)) if record.numa_mode else None
        return VmPins((), format_cpulist(s.affinity) if s.affinity else None, numa)

    def mdev_hostdevs(self, vm: str) -> set[str]:
        conf = self._conf(vm)
        return {mdev_uuid(h.index, conf.vmid) for h in settings(conf.main, conf.path).hostpci if h.mdev}

    def saved_hostdev(self, vm: str, address: str) -> SavedHostdev | None:
        """The hostpci line holding `address`, as the config writes it (`hostpciN: VALUE`)."""
        conf = self._conf(vm)
        place = self.hostdev_place(vm, address)
        line = conf.main.get(f"hostpci{place[0]}") if place is not None else None
        return SavedHostdev(f"{line.key}: {line.value}", place[0]) if line is not None and place else None

    def check_saved_hostdev(self, address: str, token: str) -> str:
        key, _, value = token.strip().partition(": ")
        if not key.startswith("hostpci") or not key[7:].isdigit():
            raise VmConfigError("'element' is not a hostpciN line")
        try:
            pci = parse_hostpci(int(key[7:]), value)
        except ValueError as e:
            raise VmConfigError(f"'element': {e}") from None
        if parse_pci_address(address) not in pci.hosts and address[:-2] not in pci.hosts:
            raise VmConfigError(f"'element' is not the hostpci line of {address}")
        return token.strip()

    def hostdev_text(self, address: str, managed: bool, token: str | None = None) -> str:
        return token if token is not None else f"hostpciN: {parse_pci_address(address)}"

    def run_state(self, vm: str) -> str:
        return "running" if running_pid(self.root, self._conf(vm).vmid) is not None else "shut off"

    def close(self) -> None:
        pass

    # -- changes: not made yet -------------------------------------------------------------------------
    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        raise not_yet(f"giving {address} to {vm}")

    def remove_hostdev(self, vm: str, address: str) -> None:
        raise not_yet(f"taking {address} from {vm}")

    def restore(self, vm: str, token: str) -> None:
        raise not_yet(f"restoring the config of {vm}")

    def set_pins(self, vm: str, pins: VmPins, live: bool, memory_policy: bool) -> None:
        raise not_yet(f"pinning {vm} (affinity and numaN)")

    def add_mdev(self, vm: str, uuid: str, parent: str | None = None, type_id: str | None = None) -> None:
        raise not_yet(f"giving a vGPU to {vm}")

    def remove_mdev(self, vm: str, uuid: str) -> None:
        raise not_yet(f"taking a vGPU from {vm}")

    def restore_hostdev(self, vm: str, address: str, saved: SavedHostdev) -> None:
        raise not_yet(f"putting {address} back into {vm}")

    def shutdown(self, vm: str) -> None:
        raise not_yet(f"shutting {vm} down (qm shutdown)")

    def destroy(self, vm: str) -> None:
        raise not_yet(f"stopping {vm} (qm stop)")

    def start(self, vm: str) -> None:
        raise not_yet(f"starting {vm} (qm start)")


def proxmox_vms(root: Root) -> ProxmoxVms:
    return ProxmoxVms(root)

