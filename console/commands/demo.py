"""`nodeconsole demo reset [--bare] [--proxmox]` and `nodeconsole demo reboot`: regenerate the bundled demo host
(the configured demo, or with --bare the same hardware freshly installed), or reboot it (it comes up as
its /etc says; run-time changes are lost). `nodeconsole demo inject xid GPU CODE`, `demo inject aer
GPU fatal|nonfatal|corrected` and `demo inject host GPU FAILURE` (d3cold, not-ready, rm-init, bar, flr-timeout,
…) append a GPU event to the demo's kernel log, for tests and drills; `demo inject xid GPU CODE --guest`
appends the Xid to the kernel log of the guest holding the GPU (read through its simulated guest agent:
train-a and train-b have one)."""
from __future__ import annotations

import argparse
import sys

from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.usage import UsageError


@subcommand("demo", "manage the bundled demo host (demo reset [--bare], demo reboot, demo inject xid|aer|host GPU …)")
def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["reset", "reboot", "inject"],
                   help="reset: regenerate the demo host's state; reboot: boot it again from its /etc; "
                        "inject: append a GPU event to its kernel log")
    p.add_argument("event", nargs="*", metavar="ARG",
                   help="with inject: xid GPU CODE, aer GPU fatal|nonfatal|corrected, or host GPU FAILURE (d3cold, "
                        "inaccessible, not-ready, flr-timeout, reset-timeout, rm-init, bar, pending, power-refused; "
                        "GPU: its PCI address)")
    p.add_argument("--guest", action="store_true",
                   help="with inject xid: log it in the guest of the VM the GPU is passed through to (at the "
                        "guest's PCI address for it), as the guest's driver does")
    p.add_argument("--bare", action="store_true",
                   help="with reset: the same hardware freshly installed (IOMMU off, no vfio, nouveau, no "
                        "hugepages, no VMs), for setting it up with `nodeconsole doctor`")
    p.add_argument("--proxmox", action="store_true",
                   help="with reset: the same host as a Proxmox VE host (its VMs qemu-server configs with vmids, "
                        "a pci.cfg mapping, a simulated qm)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    what = args.what
    if getattr(args, "root", None):
        raise UsageError(f"demo {what} works on the demo host, not on --root")
    if getattr(args, "libvirt", None) is not None:
        raise UsageError(f"demo {what} takes no --libvirt (the demo host has its own libvirt)")
    if args.bare and what != "reset":
        raise UsageError("--bare goes with demo reset")
    if args.proxmox and what != "reset":
        raise UsageError("--proxmox goes with demo reset")
    if what != "inject" and args.event:
        raise UsageError(f"demo {what} takes no arguments")
    if what == "reboot":
        return _reboot()
    if args.guest and what != "inject":
        raise UsageError("--guest goes with demo inject xid")
    if what == "inject":
        return _inject(args.event, args.guest)
    from nodeconsole.console.seams import reset_demo

    try:
        state = reset_demo(bare=args.bare, proxmox=args.proxmox)
    except OSError as e:  # e.g. a symbolic link planted as the lock file: refused, nothing touched
        print(f"nodeconsole: error: cannot reset the demo host: {e.strerror or e}", file=sys.stderr)
        return 1
    # The audit log describes changes to the host that was just thrown away: its undo records
    # would target devices and configs that no longer exist.
    from nodeconsole.console.audit_log import AUDIT_NAME

    log = state / AUDIT_NAME
    if log.exists():
        log.unlink()
    what_host = "bare demo host (same hardware, not set up)" if args.bare else "demo host"
    what_host = f"{what_host} as a Proxmox VE host" if args.proxmox else what_host
    print(f"{what_host} regenerated in {state} (audit log cleared)")
    return 0


def _inject(event: list[str], guest: bool = False) -> int:
    from nodeconsole.console.pciaddr import parse_pci_address
    from nodeconsole.console.seams import inject_demo_event

    if len(event) != 3 or event[0] not in ("xid", "aer", "host"):
        raise UsageError("demo inject takes: xid GPU CODE, aer GPU fatal|nonfatal|corrected, or host GPU FAILURE")
    kind, gpu, value = event
    try:
        records = inject_demo_event(kind, parse_pci_address(gpu), value, guest=guest)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        where = "a guest's kernel log" if guest else "the demo host's kernel log"
        print(f"nodeconsole: error: cannot write {where}: {e.strerror or e}", file=sys.stderr)
        return 1
    print("\n".join(records))
    return 0


def _reboot() -> int:
    from nodeconsole.console.seams import reboot_demo

    try:
        state, boot = reboot_demo()
    except OSError as e:
        print(f"nodeconsole: error: cannot reboot the demo host: {e.strerror or e}", file=sys.stderr)
        return 1
    except ValueError as e:  # the disk describes a host that cannot boot (e.g. the IOMMU without firmware)
        print(f"nodeconsole: error: the demo host cannot boot: {e}", file=sys.stderr)
        return 1
    pages = ", ".join(f"node{n} {nr}×{_size(size)}" for n, size, nr in boot.hugepages) or "none"
    groups = f"on ({boot.iommu_groups} groups)" if boot.iommu else "off"
    modules = ", ".join(boot.modules) or "none beyond kvm and the device drivers"
    print(f"demo host rebooted in {state} (boot {boot.boot_count}, boot_id {boot.boot_id})")
    print(f"  command line:   {boot.cmdline}")
    print(f"  IOMMU:          {groups}")
    print(f"  modules loaded: {modules}; nouveau {'loaded' if boot.nouveau else 'not loaded'}")
    print(f"  hugepages:      {pages}")
    print(f"  numa_balancing: {boot.numa_balancing}; GPU persistence mode {'on' if boot.persistence else 'off'}")
    for device, driver in boot.driverctl:
        print(f"  driverctl:      {device} on {driver or 'no driver'}")
    if boot.mig:
        print(f"  MIG mode on:    {', '.join(boot.mig)}")
    print("  run-time changes (drivers bound by hand, vGPU devices, live hugepages and sysctl) are gone; "
          "/etc, the VM definitions and the audit log are kept")
    return 0


def _size(kib: int) -> str:
    return f"{kib // 1048576}G" if kib % 1048576 == 0 else f"{kib // 1024}M"
