"""`ActionHost`: everything an action reads and writes a host through. It holds what the host's seams
(console/seams.py) chose once: the kernel writer, the host programs, the VM backend, the state directory
and its mode, privilege and the reason the host cannot be changed. Nothing here asks which host it is."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nodeconsole.actions.audit import AUDIT_NAME, AuditLog
from nodeconsole.actions.lock import LOCK_NAME, HostLock
from nodeconsole.console.host_programs import Commands
from nodeconsole.console.host_seams import CommandRunner, KernelWriter
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams
from nodeconsole.console.vms.backend import VmBackend
from nodeconsole.console.vms.hints import command_hint

if TYPE_CHECKING:
    from nodeconsole.console.model import HostSnapshot


def _euid_root() -> bool:
    return os.geteuid() == 0


@dataclass
class ActionHost:
    """Everything an action reads and writes a host through. `from_seams` assembles what the seams chose;
    tests construct it with their own kernel, domain config, commands and root check."""
    seams: Seams
    kernel: KernelWriter  # console.kernel_writer.Kernel, the demo's SimulatedKernel… (Seams.writes)
    domains: VmBackend | None  # the seams' VM backend; None when the host has no libvirt
    state_dir: Path
    commands: CommandRunner = field(default_factory=Commands)
    is_root: Callable[[], bool] = _euid_root
    on_changed: Callable[[], None] | None = None  # e.g. the console's Collector.invalidate
    read_only_reason: str = ""  # non-empty: this host cannot be changed (e.g. a captured tree)

    @classmethod
    def from_seams(cls, seams: Seams, on_changed: Callable[[], None] | None = None) -> ActionHost:
        """The host behind `seams`, as its factory (console/seams.py) chose it: the real host (needs
        root), a captured tree or a replay (read-only), the demo host (simulated kernel, its node file,
        stands for root, audit log and lock in its state directory)."""
        writes = seams.writes
        return cls(seams=seams, kernel=writes.kernel(seams.root), domains=seams.open_vm_backend(),
                   state_dir=seams.audit_dir, commands=writes.commands(seams.root), is_root=seams.privileged,
                   on_changed=on_changed, read_only_reason=seams.read_only_reason)

    @property
    def vms(self) -> VmBackend | None:
        """The host's VM backend (console/vms/backend.py), in the VM model's terms: what actions change VM
        definitions through (`domains` is the same object, the field's older name)."""
        return self.domains

    def command_hint(self, kind: str, vm: str = "NAME", **args: str) -> str:
        """What an admin types for `kind` on `vm` in this host's hypervisor tool (virsh, qm: the VM
        backend says; console/vms/hints.py), for a plan's fix or step text."""
        if self.domains is not None:
            return self.domains.command_hint(kind, vm, **args)
        return command_hint("libvirt", kind, vm, **args)

    @property
    def root(self) -> Root:
        return self.seams.root

    @property
    def dir_mode(self) -> int:
        """The state directory's mode, as the seams chose it (private for the demo, root + adm group on a
        real host)."""
        return self.seams.state_mode

    @property
    def audit(self) -> AuditLog:
        return AuditLog(self.state_dir / AUDIT_NAME, self.dir_mode)

    def lock(self) -> HostLock:
        return HostLock(self.state_dir / LOCK_NAME, self.dir_mode)

    def snapshot(self) -> HostSnapshot:
        """A fresh read of the host. A new collector every time: plans must not see cached facts, and
        libvirt's test driver (the demo) only re-reads its node file when a connection is opened."""
        from nodeconsole.actions.gpu_names import recorded_names
        from nodeconsole.console.collector import Collector

        collector = Collector(self.seams)
        collector._names.update(recorded_names(self.audit))  # NVML's names, remembered for GPUs now on vfio-pci
        try:
            return collector.collect()
        finally:
            # Let NVML go: a process holding it keeps /dev/nvidia* open, which blocks an unbind.
            collector.close()

    def hostname(self) -> str:
        return self.root.read("proc/sys/kernel/hostname") or ""

    def boot_id(self) -> str:
        """The host's boot id now (a later read that differs means it rebooted), from the seams' source."""
        return self.seams.boot_id()

    def changed(self) -> None:
        if self.on_changed is not None:
            self.on_changed()
