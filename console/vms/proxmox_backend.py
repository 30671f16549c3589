"""Proxmox VE as a VM backend (console/vms/backend.py's VmBackend): reads through the VMs' config files
(console/vms/proxmox.py), a VM named by its name or its vmid; host-device changes through `qm set` (argv,
never a shell: the host's CommandRunner seam), each checked against the config as read (`--digest`, its
SHA1: a config changed under us refuses) and refused for a VM with a `lock:`.

The definition read and changed here is the config as the VM's next start takes it: the main section with
[PENDING] over it (libvirt's persistent definition). `qm set` on a running VM leaves the change in
[PENDING] until the restart (`pin_scopes` says so; the snapshot shows the pending keys).

Pins are the whole process's (`affinity`, `numa0`: console/vms/proxmox_pins.py). Sizes and memory layouts,
and the exact put-back of a saved config: console/vms/proxmox_shape.py. Not made yet (VmConfigError "not yet
on Proxmox: …", nothing changed): mdev vGPUs, run-state changes (qm start/shutdown/stop).
"""
from __future__ import annotations

import hashlib
import re
import shlex

from nodeconsole.console.host_seams import CommandRunner
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Vm
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root
from nodeconsole.console.vms.backend import PinScopes, SavedHostdev, VmConfigError, VmPins, VmShape
from nodeconsole.console.vms.hints import command_hint
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
from nodeconsole.console.vms.proxmox_conf import (
    MAX_HOSTPCI,
    QemuConf,
    Section,
    parse_conf,
    parse_hostpci,
    settings,
    with_pending,
)
from nodeconsole.console.vms.proxmox_mapping import functions, read_mappings, resolve_hostpci
from nodeconsole.console.vms.proxmox_pins import pin_args, read_pins
from nodeconsole.console.vms.proxmox_shape import read_shape, restore_args, shape_args

NEXT_START = "only its config changes; the VM takes it at its next start"
MAX_SAVED = 1 << 20  # a saved config larger than this is no qemu-server config
PENDING_SAYS = ("a running Proxmox VM takes a config change at its next start: it waits in the config's "
                "[PENDING] section until then")


def not_yet(what: str) -> VmConfigError:
    return VmConfigError(f"not yet on Proxmox: {what}")


class ProxmoxVms:
    """The VMs of a Proxmox VE host (or of a captured tree of one) below `root`."""

    label = "Proxmox VE"
    one_state = False
    whole_process_pins = True  # `affinity`: the whole QEMU process (console/vms/proxmox_pins.py)
    guest_threads = False  # sockets and cores only (console/vms/proxmox_shape.py)
    hypervisor = "proxmox"

    def __init__(self, root: Root, commands: CommandRunner | None = None) -> None:
        self.root = root
        self.commands = commands

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
        """(index, host functions) of each hostpci line of the VM's config (as its next start takes it)."""
        conf = self._conf(vm)
        s, view = settings(with_pending(conf), conf.path), host_view(self.root)
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
        return PinScopes(("config",), False, PENDING_SAYS if running else NEXT_START)

    def every_cpu(self) -> frozenset[int]:
        return frozenset()

    def pins(self, vm: str, live: bool) -> VmPins:
        """Every vCPU and the emulator on the config's `affinity` (Proxmox pins the whole process), and its
        NUMA binding (console/vms/proxmox_pins.py): `live` the running VM's (the main section), else its next
        start's ([PENDING] over it)."""
        conf = self._conf(vm)
        section = conf.main if live else with_pending(conf)
        line = section.get("affinity")
        return read_pins(settings(section, conf.path), line.value if line is not None else None)

    def command_hint(self, kind: str, vm: str, **args: str) -> str:
        """`qm` naming the VM by its vmid (the name where it has none here: a placeholder)."""
        vmid = find_vmid(self.root, vm)
        return command_hint("proxmox", kind, str(vmid) if vmid is not None else vm, **args)

    def pin_commands(self, vm: str, target: VmPins, current: VmPins, live: bool, memory_policy: bool,
                     all_cpus: str) -> tuple[str, ...]:
        """`qm set VMID` with the arguments `set_pins` passes (VmConfigError: pins Proxmox cannot hold)."""
        conf = self._conf(vm)
        section = with_pending(conf)
        args = pin_args(section, settings(section, conf.path), target, memory_policy, vm)
        return (shlex.join(["qm", "set", str(conf.vmid), *args]),) if args else ()

    def mdev_hostdevs(self, vm: str) -> set[str]:
        conf = self._conf(vm)
        return {mdev_uuid(h.index, conf.vmid) for h in settings(with_pending(conf), conf.path).hostpci if h.mdev}

    def saved_hostdev(self, vm: str, address: str) -> SavedHostdev | None:
        """The hostpci line holding `address`, as the config writes it (`hostpciN: VALUE`)."""
        conf = self._conf(vm)
        place = self.hostdev_place(vm, address)
        line = with_pending(conf).get(f"hostpci{place[0]}") if place is not None else None
        return SavedHostdev(f"{line.key}: {line.value}", place[0]) if line is not None and place else None

    def check_saved_hostdev(self, address: str, token: str) -> str:
        key, _, value = token.strip().partition(": ")
        if not key.startswith("hostpci") or not key[7:].isdigit():
            raise VmConfigError("'element' is not a hostpciN line")
        try:
            pci = parse_hostpci(int(key[7:]), value)
        except ValueError as e:
            raise VmConfigError(f"'element': {e}") from None
        address = parse_pci_address(address)
        if pci.mapping is not None:
            mapping = read_mappings(self.root).mappings.get(pci.mapping)
            held = {a for e in (mapping.entries if mapping else ()) for p in e.paths for a in functions(self.root, p)}
        else:
            held = {a for h in pci.hosts for a in (functions(self.root, h) or (h,))}
        if address not in held:
            raise VmConfigError(f"'element' is not the hostpci line of {address}")
        return token.strip()

    def hostdev_text(self, address: str, managed: bool, token: str | None = None) -> str:
        return token if token is not None else f"hostpciN: {parse_pci_address(address)}"

    def run_state(self, vm: str) -> str:
        return "running" if running_pid(self.root, self._conf(vm).vmid) is not None else "shut off"

    def close(self) -> None:
        pass

    # -- changes through qm set -------------------------------------------------------------------------
    def _qm_set(self, conf: QemuConf, args: list[str]) -> None:
        """`qm set VMID --digest SHA1 ARGS…`; VmConfigError when locked, without qm, or refused."""
        lock = conf.main.get("lock")
        if lock is not None:
            raise VmConfigError(f"VM {conf.vmid} is locked ({visible(lock.value)}): Proxmox refuses changes to it "
                                f"until the lock is gone (`qm unlock {conf.vmid}` once nothing holds it)")
        if self.commands is None or self.commands.which("qm") is None:
            raise VmConfigError("this host has no qm (Proxmox VE's VM tool): its VM configs cannot be changed here")
        data = self.root.read_bytes(f"{CONF_DIR}/{conf.vmid}.conf") or b""
        rc, out = self.commands.run(["qm", "set", str(conf.vmid), "--digest", hashlib.sha1(data).hexdigest(), *args])
        if rc != 0:
            raise VmConfigError(f"qm set {conf.vmid} {' '.join(args)} refused: {visible(out.strip()[:300])}")

    def _holding(self, conf: QemuConf, address: str) -> int | None:
        """The index of the hostpci line (as the next start takes them) that holds `address`."""
        place = self.hostdev_place(str(conf.vmid), address)
        return place[0] if place is not None else None

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        conf, address = self._conf(vm), parse_pci_address(address)
        if self._holding(conf, address) is not None:
            return
        if settings(conf.main, conf.path).template:
            raise VmConfigError(f"VM {conf.vmid} is a template: a template never starts, so it holds no device")
        free = [n for n in range(MAX_HOSTPCI) if n not in _taken(conf)]
        if not free:
            raise VmConfigError(f"VM {conf.vmid} uses hostpci0 to hostpci{MAX_HOSTPCI - 1} already")
        n = index if index is not None and index in free else free[0]
        self._qm_set(conf, [f"--hostpci{n}", address + (",pcie=1" if _q35(conf.main) else "")])

    def remove_hostdev(self, vm: str, address: str) -> None:
        """Take out the hostpci line holding `address` (with every function it holds)."""
        conf = self._conf(vm)
        n = self._holding(conf, parse_pci_address(address))
        if n is not None:
            self._qm_set(conf, ["--delete", f"hostpci{n}"])

    def restore_hostdev(self, vm: str, address: str, saved: SavedHostdev) -> None:
        """Put the saved `hostpciN: VALUE` line back as it was, at its index (taken by another: refused)."""
        conf = self._conf(vm)
        if self._holding(conf, parse_pci_address(address)) is not None:
            return
        key, _, value = self.check_saved_hostdev(address, saved.token).partition(": ")
        if int(key[7:]) in _taken(conf):
            raise VmConfigError(f"{key} of VM {conf.vmid} now holds another device (an index collision): put "
                                f"{visible(key)}: {visible(value)} back by hand")
        self._qm_set(conf, [f"--{key}", value])

    def shape(self, vm: str) -> VmShape:
        """The VM's size and memory layout as its next start takes them (console/vms/proxmox_shape.py)."""
        return read_shape(self._conf(vm))

    def _shape_args(self, vm: str, shape: VmShape) -> tuple[QemuConf, list[str]]:
        conf = self._conf(vm)
        problems = shape.problems()
        if problems:
            raise VmConfigError(f"VM {vm}: " + "; ".join(problems))
        section = with_pending(conf)
        return conf, shape_args(section, settings(section, conf.path), shape, vm)

    def set_shape(self, vm: str, shape: VmShape) -> None:
        """`qm set` with the shape's arguments (a running VM takes them at its next start: [PENDING])."""
        conf, args = self._shape_args(vm, shape)
        if args:
            self._qm_set(conf, args)

    def shape_commands(self, vm: str, shape: VmShape) -> tuple[str, ...]:
        """`qm set VMID` with the arguments `set_shape` passes (VmConfigError: a shape Proxmox cannot hold)."""
        conf, args = self._shape_args(vm, shape)
        return (shlex.join(["qm", "set", str(conf.vmid), *args]),) if args else ()

    def check_saved(self, vm: str, token: str) -> str:
        """`token` checked to be a saved config of this VM: at most 1 MiB, parsing as a qemu-server config
        without a line Proxmox would skip, naming this VM."""
        conf = self._conf(vm)
        if len(token.encode("utf-8", "surrogateescape")) > MAX_SAVED:
            raise VmConfigError(f"the saved config of VM {conf.vmid} is over 1 MiB: not a qemu-server config")
        saved = parse_conf(conf.vmid, conf.path, token)
        if saved.errors:
            raise VmConfigError(f"the saved config of VM {conf.vmid} does not parse: {visible(saved.errors[0])}")
        name = saved.main.get("name")
        if (name.value if name else f"vm{conf.vmid}") != (settings(conf.main, conf.path).name or f"vm{conf.vmid}"):
            raise VmConfigError(f"the saved config names another VM than {conf.vmid}")
        return token

    def restore(self, vm: str, token: str) -> None:
        """The config back to exactly `token`'s bytes through `qm set`/`--delete` (proxmox_shape.py's
        restore_args), verified byte for byte; VmConfigError when it cannot be or does not read back so."""
        conf = self._conf(vm)
        token = self.check_saved(vm, token)
        running = running_pid(self.root, conf.vmid) is not None
        args = restore_args(conf, parse_conf(conf.vmid, conf.path, token), running, vm)
        if args:
            self._qm_set(conf, args)
        if self.save(vm) != token:
            raise VmConfigError(f"VM {conf.vmid}'s config reads back different from the saved one after "
                                f"`qm set`: compare it by hand (qm config {conf.vmid} --current 0)")

    def set_pins(self, vm: str, pins: VmPins, live: bool, memory_policy: bool) -> None:
        """`affinity` and `numa`/`numa0` as `pins` say (console/vms/proxmox_pins.py: only pins of the whole
        process can be written), through `qm set`; a running VM takes them at its next start."""
        if live:
            raise VmConfigError("Proxmox has no live pins apart from the config")
        conf = self._conf(vm)
        section = with_pending(conf)
        args = pin_args(section, settings(section, conf.path), pins, memory_policy, vm)
        if args:
            self._qm_set(conf, args)

    def add_mdev(self, vm: str, uuid: str, parent: str | None = None, type_id: str | None = None) -> None:
        raise not_yet(f"giving a vGPU to {vm}")

    def remove_mdev(self, vm: str, uuid: str) -> None:
        raise not_yet(f"taking a vGPU from {vm}")

    def shutdown(self, vm: str) -> None:
        raise not_yet(f"shutting {vm} down (qm shutdown)")

    def destroy(self, vm: str) -> None:
        raise not_yet(f"stopping {vm} (qm stop)")

    def start(self, vm: str) -> None:
        raise not_yet(f"starting {vm} (qm start)")


def _used_indexes(section: Section) -> set[int]:
    """The hostpci indexes a section uses (a malformed line's too: Proxmox keeps the key)."""
    return {int(k[7:]) for k in section.keys() if k.startswith("hostpci") and k[7:].isdigit()}


def _taken(conf: QemuConf) -> set[int]:
    """The hostpci indexes in use: the main section's and [PENDING]'s (one whose delete waits included)."""
    return _used_indexes(conf.main) | (_used_indexes(conf.pending) if conf.pending is not None else set())


def _q35(section: Section) -> bool:
    """The VM's machine is q35 (its devices go on PCIe: pcie=1)."""
    machine = section.get("machine")
    return machine is not None and re.search(r"q35", machine.value) is not None


def proxmox_vms(root: Root, commands: CommandRunner | None = None) -> ProxmoxVms:
    return ProxmoxVms(root, commands)

