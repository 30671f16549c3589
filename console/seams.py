"""The seams a host is read (and written) through. A real host, a captured tree, the demo host, a replay
and a test fixture differ only in these values, chosen once by the factories here (`real_host`,
`simulated_host`/`demo_host`, `replay_host`); the code that reads them never asks which host it is.
A host (or tree, or capture) with `etc/pve/qemu-server` is a Proxmox VE host: its VMs are read through
console/vms/proxmox_backend.py unless `--libvirt URI` is given.

This module is the one place that chooses the simulation: only it imports console/demo/ (an
import-linter contract in pyproject.toml holds every other production module to that)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodeconsole.console.doctor.facts import BOOT_ID
from nodeconsole.console.host_programs import CapturedTree, ThisMachine
from nodeconsole.console.pciids import PciIds, default_ids
from nodeconsole.console.root import Root
from nodeconsole.console.state_dir import AUDIT_DIR_MODE, DEFAULT_STATE, STATE_DIR_MODE, TREE_STATE

if TYPE_CHECKING:
    from nodeconsole.console.capture.replay import Replay
    from nodeconsole.console.demo.boot import BootReport
    from nodeconsole.console.host_seams import DomainStore, HostWrites
    from nodeconsole.console.model import Cpu, Vm
    from nodeconsole.console.sources.guest_agent import GuestAgent
    from nodeconsole.console.vms.backend import VmBackend

SYSTEM_URI = "qemu:///system"
TREE_READ_ONLY = "a captured tree (--root) is read-only: changes need the real host or --demo"
TREE_GUESTS = "a captured host's VMs cannot be reached from this machine"
DEMO_GUESTS = ("the demo host's VMs are simulated (libvirt's test driver): there is no guest to run the check "
               "in; on a real host this command runs it")


@dataclass
class Seams:
    root: Root
    libvirt_uri: str | None  # None: no libvirt source (e.g. a captured tree alone)
    nvml_lib: object | None = None  # pynvml's library object; None = the real libnvidia-ml
    use_real_nvml: bool = True  # False: do not try NVML at all (captured tree)
    # Where audit logs and locks live for this host, and that directory's mode. None: the tree's own
    # var/log/nodeconsole (a captured tree); see `audit_dir`.
    state_dir: Path | None = None
    state_mode: int = AUDIT_DIR_MODE
    # The demo's VM load model (name, state, vcpus, time) -> CPU %: the libvirt test driver has no
    # real CPU time. None everywhere else: load comes from libvirt's CPU-time deltas.
    vm_load: Callable[[str, str, int, float], float | None] | None = None
    # The demo's host CPU load made of its VMs' load (CPUs, VMs) -> busy % per online CPU, and its vCPU
    # steal model (VM, time) -> %. None everywhere else: /proc/stat (psutil) and the vCPU threads'
    # schedstat are read.
    cpu_load: Callable[[Sequence[Cpu], Sequence[Vm]], tuple[float, ...]] | None = None
    vm_steal: Callable[[Vm, float], float | None] | None = None
    # The pci.ids database that names devices: the running machine's (or $NODECONSOLE_PCI_IDS) by
    # default; tests pass a fixed one so a rendered name never depends on what the machine has installed.
    pci_ids: PciIds = field(default_factory=default_ids)
    # The host's write seams (kernel attribute writer, host programs). The default is a captured tree's
    # (its files, none of this machine's programs); the factories below set every other host's.
    writes: HostWrites = field(default_factory=CapturedTree)
    # A capture being replayed (`--replay FILE`): whose host, captured when. Every action on it refuses.
    replay: Replay | None = None
    # Sources this host cannot be read through, with the reason the collector reports (a replay: the
    # sources its capture could not read, e.g. libvirtd was down). Source name → reason.
    unavailable: dict[str, str] = field(default_factory=dict)
    # "Now" on the host being read (seconds since the epoch): this machine's clock; a replay's is stopped at
    # its capture (`events --since`, the health window and event times count back from it).
    clock: Callable[[], float] = time.time
    # The VMs' QEMU guest agents, through which the guests' kernel logs are read (console/guest_watch.py):
    # libvirt's on a live host, the demo's simulated ones; None: no guest is asked (a captured tree, a
    # replay, libvirt's test driver, which refuses agent commands).
    guest_agent: GuestAgent | None = None
    # -- What the host may do, chosen by the factories below; the code under them reads these values and
    # never asks which kind of host it is. The defaults are a captured tree's.
    # Whether changes may be made as root: this machine's effective user (the demo stands for root).
    privileged: Callable[[], bool] = field(default=lambda: os.geteuid() == 0)
    # Non-empty: this host cannot be changed, and why (a captured tree, a replay).
    read_only_reason: str = TREE_READ_ONLY
    # The kernel log is this machine's live one (/dev/kmsg, journal…), not files below the root.
    live_kernel_log: bool = False
    # This machine's programs (all_reduce_perf, driverctl…) may run for the host.
    local_programs: bool = False
    # Why this host's guests cannot be reached from here ("" when they can: ssh, the guest agent).
    guests_unreachable: str = TREE_GUESTS
    # The option naming this host in the commands we print for later ("--demo"), "" for none.
    host_option: str = ""
    # What kind of host a capture of it records ("live", "tree", "demo"; a replay: its capture's origin).
    origin: str = "tree"
    # The host's VM backend (console/vms/backend.py) for its libvirt URI: libvirt's, or the demo's node
    # file; the collector reads VMs through it, actions change their definitions through it.
    vm_backend: Callable[[str | None], VmBackend | None] = field(default=lambda uri: _libvirt_domains(uri))
    # Where the host's boot id is read (root-relative): a later read that differs means it rebooted.
    boot_id_file: str = BOOT_ID
    # The host's hypervisor: "libvirt" (VMs through `vm_backend`) or "proxmox" (Proxmox VE: its VMs are the
    # qemu-server configs below `root`, read through console/vms/proxmox_backend.py whatever root is set).
    hypervisor: str = "libvirt"

    @property
    def audit_dir(self) -> Path:
        """Where the host's audit log and lock live."""
        return self.state_dir if self.state_dir is not None else self.root.p(TREE_STATE)

    def open_vm_backend(self) -> VmBackend | None:
        """A fresh VM backend of this host; None: the host has no hypervisor to read (no libvirt URI)."""
        if self.hypervisor == "proxmox":
            from nodeconsole.console.vms.proxmox_backend import proxmox_vms

            return proxmox_vms(self.root, self.writes.commands(self.root))
        return self.vm_backend(self.libvirt_uri)

    def boot_id(self) -> str:
        return self.root.read(self.boot_id_file) or ""


def _libvirt_domains(uri: str | None) -> DomainStore | None:
    from nodeconsole.console.vms.libvirt_domains import libvirt_domains

    return libvirt_domains(uri)


def real_host(root: str = "/", libvirt_uri: str | None = None) -> Seams:
    """Seams for the machine we run on, or for a captured tree when root is not `/`.

    A captured tree has no NVML and no libvirt unless a URI is given explicitly; it is read-only, its
    kernel log is its files', and none of this machine's programs run for it."""
    captured = os.path.abspath(root) != "/"
    seam = Root(root)
    if libvirt_uri is None and _has_proxmox(seam):  # Proxmox VE: its VMs are qemu-server configs
        if captured:
            return Seams(root=seam, libvirt_uri=None, use_real_nvml=False, hypervisor="proxmox")
        return Seams(root=seam, libvirt_uri=None, state_dir=Path(DEFAULT_STATE), writes=ThisMachine(),
                     read_only_reason="", live_kernel_log=True, local_programs=True, origin="live",
                     hypervisor="proxmox")
    uri = libvirt_uri if libvirt_uri is not None else (None if captured else SYSTEM_URI)
    agent = None
    if uri is not None and not uri.startswith("test:"):
        from nodeconsole.console.sources.guest_agent import LibvirtGuestAgent

        agent = LibvirtGuestAgent(uri)
    if captured:
        return Seams(root=Root(root), libvirt_uri=uri, use_real_nvml=False, guest_agent=agent)
    return Seams(root=Root(root), libvirt_uri=uri, state_dir=Path(DEFAULT_STATE), guest_agent=agent,
                 writes=ThisMachine(), read_only_reason="", live_kernel_log=True, local_programs=True,
                 guests_unreachable="", origin="live")


def _has_proxmox(root: Root) -> bool:
    from nodeconsole.console.vms.proxmox import has_proxmox

    return has_proxmox(root)


def simulated_host(root: Root, libvirt_uri: str | None, state_dir: Path, **values: Any) -> Seams:
    """Seams for a simulated host (the demo's, or a test's demo tree) whose audit log and lock live in
    `state_dir`: the simulation's write seams, its node file for VM definitions, a private state
    directory, root's privileges (the demo stands for a root session), no live kernel log or local
    programs, `--demo` in the commands it prints. `values`: the other fields (nvml_lib, load models…)."""
    return Seams(root=root, libvirt_uri=libvirt_uri, state_dir=state_dir, state_mode=STATE_DIR_MODE,
                 writes=simulated_writes(), privileged=lambda: True, read_only_reason="",
                 guests_unreachable=DEMO_GUESTS, host_option="--demo", origin="demo", vm_backend=_demo_domains,
                 **values)


def _demo_domains(uri: str | None) -> DomainStore | None:
    """The demo host edits its node file (libvirt's test driver forgets changes); another URI is libvirt's."""
    from nodeconsole.console.vms.libvirt_domains import node_file_of

    node = node_file_of(uri)
    return demo_domain_store(node, uri) if node is not None else _libvirt_domains(uri)


def simulated_writes() -> HostWrites:
    """The demo host's write seams: a simulated kernel and driverctl over its generated root."""
    from nodeconsole.console.demo.writes import SimulatedWrites

    return SimulatedWrites()


def demo_domain_store(node: Path, uri: str | None = None) -> DomainStore:
    """The demo host's domain store: its libvirt test-driver node file, edited in place (read through
    `uri`, the test driver's URI of that file)."""
    from nodeconsole.console.demo.node_domains import NodeFileDomainConfig

    return NodeFileDomainConfig(node, uri)


@contextmanager
def _demo_dir_usage() -> Iterator[None]:
    """A state directory that is not the demo's (console/demo/owner.py) is bad input: a UsageError, one line."""
    from nodeconsole.console.demo.owner import ForeignStateDir

    try:
        yield
    except ForeignStateDir as e:
        from nodeconsole.console.usage import UsageError

        raise UsageError(str(e)) from None


def check_demo_state_dir() -> None:
    """UsageError when the demo's state directory is not the demo's to generate into (nothing is
    created or removed): before the console opens, so the user reads one line, not a broken screen."""
    from nodeconsole.console.demo.owner import check_ours
    from nodeconsole.console.demo.state import LOCK, STAMP, demo_state_dir

    with _demo_dir_usage():
        check_ours(demo_state_dir(), STAMP, ignore=(LOCK,))


def reset_demo(bare: bool = False, proxmox: bool = False) -> Path:
    """Throw the demo host's state away and generate it afresh (with `bare`: the same hardware freshly
    installed, to be set up; with `proxmox`: as a Proxmox VE host); returns its state directory (the parent
    of its root, where its audit log and lock live)."""
    from nodeconsole.console.demo.state import reset_demo as regenerate

    with _demo_dir_usage():
        return regenerate(bare=bare, proxmox=proxmox).dest


def reboot_demo() -> tuple[Path, BootReport]:
    """Reboot the demo host: it comes up as its disk (/etc: boot loader, modules, sysctl…) now says,
    run-time changes gone, the disk, VM definitions and audit log kept. Returns its state directory
    and what the boot did."""
    from nodeconsole.console.demo.state import reboot_demo as reboot

    with _demo_dir_usage():
        host, report = reboot()
    return host.dest, report


def demo_host(state_dir: Path | None = None, libvirt_uri: str | None = None, sysfs_only: bool = False) -> Seams:
    """Seams for the bundled simulated host (generated on first use, kept until `demo reset`).
    `sysfs_only`: its tree alone (no NVML library, no load models), for a sysfs-only look."""
    from nodeconsole.console.demo.state import ensure_demo

    with _demo_dir_usage():
        host = ensure_demo(state_dir)
    root = Root(host.root)
    # a Proxmox VE demo (`demo reset --proxmox`): its VMs are its qemu-server configs, unless --libvirt is given
    hypervisor = "proxmox" if libvirt_uri is None and _has_proxmox(root) else "libvirt"
    if sysfs_only:
        return simulated_host(root, libvirt_uri or host.libvirt_uri, Path(host.root).parent, use_real_nvml=False,
                              hypervisor=hypervisor)
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.demo.sim_agent import SimulatedGuestAgent
    from nodeconsole.console.demo.vm_load import demo_cpu_percent, demo_vm_cpu_percent, demo_vm_steal_percent

    # The demo stands for a root session: MIG changes are allowed as they would be for root.
    try:
        lib = SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # a corrupt or truncated file
        from nodeconsole.console.usage import UsageError

        reason = (e.strerror if isinstance(e, OSError) else None) or str(e).splitlines()[0] or type(e).__name__
        raise UsageError(f"the demo host's NVML state {host.nvml_state} is unreadable ({reason}); "
                         "run `nodeconsole demo reset`") from None
    return simulated_host(root, libvirt_uri or host.libvirt_uri, Path(host.root).parent, nvml_lib=lib,
                          vm_load=demo_vm_cpu_percent, cpu_load=demo_cpu_percent, vm_steal=demo_vm_steal_percent,
                          guest_agent=SimulatedGuestAgent(Path(host.root)), hypervisor=hypervisor)


def inject_demo_event(kind: str, gpu: str, what: str, guest: bool = False) -> list[str]:
    """Append a GPU event to the demo host's kernel log: kind "xid" (what: the code), "aer" (what:
    fatal, nonfatal or corrected) or "host" (what: a failure, console/demo/kmsg.py HOST_FAILURES); with
    `guest`, an Xid to the log of the guest holding the GPU (console/demo/sim_agent.py). Returns the
    records written; ValueError for a bad GPU or value."""
    from nodeconsole.console.demo.kmsg import inject_aer, inject_host, inject_xid
    from nodeconsole.console.demo.state import ensure_demo

    with _demo_dir_usage():
        host = ensure_demo()
    root = Path(host.root)
    if kind == "xid":
        if not what.isascii() or not what.isdigit():
            raise ValueError(f"{what!r} is not an Xid code (a number)")
        if guest:
            from nodeconsole.console.demo.sim_agent import inject_guest_xid

            return inject_guest_xid(root, host.libvirt_uri, gpu, int(what))
        return inject_xid(root, gpu, int(what))
    if guest:
        raise ValueError("--guest goes with xid (a guest's driver logs Xids; AER errors and host failures are the "
                         "host's)")
    if kind == "host":
        return inject_host(root, gpu, what)
    return inject_aer(root, gpu, what)


def simulated_nvml_state(lib: object | None) -> tuple[dict, float] | None:
    """A copy of the simulated NVML library's state and its clock now (what a capture stores), None
    when `lib` is not the simulated library."""
    if lib is None:
        return None
    import copy

    from nodeconsole.console.demo.nvml_sim import SimulatedNvml

    if not isinstance(lib, SimulatedNvml):
        return None
    with lib._lock:
        lib.reload_if_changed()
        return copy.deepcopy(lib.state), float(lib.clock())


def replay_host(path: str | os.PathLike[str]) -> Seams:
    """Seams over a capture (`nodeconsole capture`): its tree through the root seam, its domains
    through libvirt's test driver fed the captured node file, its NVML state served by the simulated
    library (unprivileged and never saved: it refuses changes) with the clock stopped at the capture.
    UsageError (one line) when the file is missing or not a capture."""
    from nodeconsole.console.capture.archive import ArchiveError
    from nodeconsole.console.capture.replay import READ_ONLY, ReplayWrites, open_replay
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.usage import UsageError

    try:
        opened = open_replay(path)
        state = opened.nvml_state()
    except ArchiveError as e:
        raise UsageError(f"--replay {path}: {e}") from None
    root = Root(opened.root)
    lib = None
    if state is not None:
        at = opened.nvml_clock
        frozen = at if at is not None else 0.0
        lib = SimulatedNvml(state, root=root, clock=lambda: frozen, privileged=False)
    node = opened.node_file
    unavailable = {name: status.removeprefix("unavailable: ") for name, status in opened.snapshot_sources.items()
                   if status != "ok" and not (name == "nvml" and lib is not None)
                   and not (name == "libvirt" and node is not None)}
    proxmox = node is None and _has_proxmox(root)  # a Proxmox VE host's capture: its VM configs are in the tree
    # The test driver's CPU time follows the wall clock: a VM's CPU use is not measured in a replay.
    return Seams(root=root, libvirt_uri=f"test://{node}" if node is not None else None, nvml_lib=lib,
                 hypervisor="proxmox" if proxmox else "libvirt",
                 use_real_nvml=False, state_dir=opened.audit_dir, vm_load=lambda *_args: None,
                 writes=ReplayWrites(opened.programs), unavailable=unavailable, replay=opened.replay,
                 clock=_stopped_at(opened.replay.captured_at), read_only_reason=READ_ONLY,
                 origin=opened.replay.origin)


def _stopped_at(captured_at: str) -> Callable[[], float]:
    """A clock stopped at a capture's time (ISO 8601, UTC); this machine's when the capture does not say."""
    import datetime as dt

    try:
        when = dt.datetime.fromisoformat(captured_at)
    except ValueError:
        return time.time
    at = (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
    return lambda: at
