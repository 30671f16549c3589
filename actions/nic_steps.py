"""The SR-IOV step kinds of NIC VFs (actions/nic.py plans with them), and what they read of the PF.

Step kinds (each records the state it changes as its inverse, so `undo` and a failed run put it back):
- `sriov_autoprobe`: the PF's sriov_drivers_autoprobe (0: new VFs stay without a driver, for VMs);
- `sriov_numvfs`: the PF's VF count. Linux takes a new count only from 0, so a change from a nonzero count
  writes 0 first: every VF is removed and created again. The operation may name VFs and the
  (driver_override, driver) each must have afterwards; the inverse names every VF there was, so an undo
  brings the VFs back on the drivers they had.
A VF itself is bound with actions/host_steps.py's `pci_driver` step and added to a VM with
actions/vm_hostdev.py's `vm_hostdev` step.
"""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import pci_state
from nodeconsole.actions.plan import Op, Step, StepError, build_step, step_kind
from nodeconsole.actions.targets import VFIO
from nodeconsole.console.pciaddr import format_pci_address, parse_pci_address

_DEV = "sys/bus/pci/devices"


# -- reading the host ---------------------------------------------------------------------------------

def numvfs(host: ActionHost, pf: str) -> int | None:
    return host.root.read_int(f"{_DEV}/{pf}/sriov_numvfs")


def vf_addresses(host: ActionHost, pf: str) -> list[str]:
    """The PF's VFs in virtfn order, from its virtfnN links."""
    names = [n for n in host.root.listdir(f"{_DEV}/{pf}") if n.startswith("virtfn") and n[6:].isdigit()]
    out = []
    for n in sorted(names, key=lambda n: int(n[6:])):
        target = host.root.link_name(f"{_DEV}/{pf}/{n}")
        try:
            out.append(parse_pci_address(target or ""))
        except ValueError:
            continue
    return out


def vf_address(host: ActionHost, pf: str, index: int) -> str | None:
    """Where VF `index` of the PF appears once created: the PF's routing id plus sriov_offset and
    index × sriov_stride (None when the PF does not say)."""
    offset = host.root.read_int(f"{_DEV}/{pf}/sriov_offset")
    stride = host.root.read_int(f"{_DEV}/{pf}/sriov_stride")
    if offset is None or stride is None:
        return None
    dom, bus, rest = pf.split(":")
    dev, fn = rest.split(".")
    rid = (int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn)) + offset + index * stride
    return format_pci_address(int(dom, 16), rid >> 8, (rid >> 3) & 0x1F, rid & 7)


def _states(host: ActionHost, addresses: list[str]) -> dict[str, list[str | None]]:
    return {a: list(pci_state(host.root, a)) for a in addresses}


# -- step kinds ---------------------------------------------------------------------------------------

@step_kind("sriov_autoprobe")
def sriov_autoprobe_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "sriov_autoprobe", "device": PF, "value": 0|1}`: whether host drivers probe new VFs."""
    pf = parse_pci_address(op["device"])
    value = int(op["value"])
    if value not in (0, 1):
        raise StepError(f"sriov_drivers_autoprobe takes 0 or 1, not {value}")
    path = f"{_DEV}/{pf}/sriov_drivers_autoprobe"
    current = host.root.read_int(path)
    if current is None:
        raise StepError(f"{pf} has no sriov_drivers_autoprobe (not an SR-IOV physical function)")
    if current == value:
        return None

    def apply() -> None:
        host.kernel.write(path, str(value))

    def verify() -> str | None:
        now = host.root.read_int(path)
        return None if now == value else f"sriov_drivers_autoprobe of {pf} is {now}, expected {value}"

    if value == 0:
        title = f"Keep host drivers off new VFs of {pf} (sriov_drivers_autoprobe=0)"
        why = ("the VFs are meant for VMs: with autoprobe on, the host's driver takes each new VF (an RDMA device "
               "and a netdev on the host) and passthrough has to take it back")
    else:
        title = f"Let host drivers probe new VFs of {pf} again (sriov_drivers_autoprobe=1)"
        why = "as it was before"
    return Step(title, why, (f"echo {value} > /{path}",), dict(op, device=pf),
                {"kind": "sriov_autoprobe", "device": pf, "value": current}, apply, verify)


def _want_states(op: Op) -> dict[str, tuple[str | None, str | None]]:
    raw = op.get("vfs") or {}
    if not isinstance(raw, dict):
        raise StepError("malformed sriov_numvfs operation: 'vfs' must map VF addresses to [override, driver]")
    out = {}
    for a, st in raw.items():
        if not (isinstance(st, list | tuple) and len(st) == 2 and all(x is None or isinstance(x, str) for x in st)):
            raise StepError(f"malformed sriov_numvfs operation: the state of {a} must be [override, driver]")
        out[parse_pci_address(a)] = (st[0], st[1])
    return out


@step_kind("sriov_numvfs")
def sriov_numvfs_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "sriov_numvfs", "device": PF, "count": N, "vfs": {VF: [override, driver], ...}}`: the PF
    has N VFs, and each VF named is on that override and driver (driver null: none)."""
    pf = parse_pci_address(op["device"])
    count = int(op["count"])
    want = _want_states(op)
    base = f"{_DEV}/{pf}"
    current = _current_numvfs(host, pf, count)
    if current == count and all(tuple(pci_state(host.root, a)) == st for a, st in want.items()):
        return None
    existing = vf_addresses(host, pf)
    inverse = {"kind": "sriov_numvfs", "device": pf, "count": current, "vfs": _states(host, existing)}

    def bind(address: str, state: tuple[str | None, str | None]) -> None:
        override, driver = state
        group = host.root.link_name(f"{_DEV}/{address}/iommu_group")
        step = build_step(host, {"kind": "pci_driver", "device": address, "override": override, "driver": driver,
                                 "group": int(group) if group and group.isdigit() else None,
                                 "vfio_node": driver == VFIO})
        if step is not None:
            step.apply()

    def apply() -> None:
        now = numvfs(host, pf)
        if now != count:
            if now:
                held = _defined_holders(host, vf_addresses(host, pf))
                if held:  # checked now: an earlier step of the same run may just have taken them out
                    raise StepError(f"{who(held)}: removing the VFs of {pf} would take them from the VM")
                host.kernel.write(f"{base}/sriov_numvfs", "0")
            if count:
                host.kernel.write(f"{base}/sriov_numvfs", str(count))
        for address, state in want.items():
            bind(address, state)

    def verify() -> str | None:
        now = numvfs(host, pf)
        if now != count:
            return f"{pf} has {now} VFs, expected {count}"
        for address, (override, driver) in want.items():
            got = pci_state(host.root, address)
            if got != (override, driver):
                return (f"VF {address} is on {got[1] or 'no driver'} (override {got[0] or 'none'}), expected "
                        f"{driver or 'no driver'} (override {override or 'none'})")
        return None

    title, why, cmds = _numvfs_words(pf, current, count, want)
    return Step(title, why, cmds, dict(op, device=pf), inverse, apply, verify)


def _current_numvfs(host: ActionHost, pf: str, count: int) -> int:
    """The PF's VF count now; StepError when the PF is gone, is no SR-IOV PF or cannot take `count`."""
    base = f"{_DEV}/{pf}"
    if not host.root.exists(base):
        raise StepError(f"PCI device {pf} is gone from this host")
    current = numvfs(host, pf)
    if current is None:
        raise StepError(f"{pf} has no sriov_numvfs (not an SR-IOV physical function)")
    total = host.root.read_int(f"{base}/sriov_totalvfs")
    if count < 0 or (total is not None and count > total):
        raise StepError(f"{pf} takes 0 to {total} VFs, not {count}")
    return current


def _numvfs_words(pf: str, current: int, count: int,
                  want: dict[str, tuple[str | None, str | None]]) -> tuple[str, str, tuple[str, ...]]:
    """The sriov_numvfs step's title, why and equivalent commands."""
    base = f"{_DEV}/{pf}"
    cmds = []
    if current != count:
        if current and count:
            cmds.append(f"echo 0 > /{base}/sriov_numvfs  # Linux changes a nonzero count only from 0")
        cmds.append(f"echo {count} > /{base}/sriov_numvfs")
    for address, (override, driver) in want.items():
        if override:
            cmds.append(f"echo {override} > /{_DEV}/{address}/driver_override")
        if driver:
            cmds.append(f"echo {address} > /sys/bus/pci/drivers_probe  # onto {driver}")
    if current == count:
        title, why = f"Put the VFs of {pf} back on their drivers", "as they were before"
    elif count == 0:
        title, why = f"Remove the {current} VFs of {pf}", "sriov_numvfs=0 removes every VF of the PF"
    elif current == 0:
        title, why = f"Create {count} VF(s) on {pf}", "each VF is a PCI function a VM can be given"
    else:
        title = f"Change the VFs of {pf} from {current} to {count}"
        why = "Linux takes a new count only from 0: every VF is removed, then the new ones are created"
    if want and current != count:
        why += "; " + ", ".join(f"{a} then goes to {st[1] or 'no driver'}" for a, st in list(want.items())[:4])
    return title, why, tuple(cmds)


def _defined_holders(host: ActionHost, addresses: list[str]) -> dict[str, list[str]]:
    """VM name → which of `addresses` its persistent definition holds (every domain libvirt defines)."""
    cfg = host.vms
    if cfg is None or not addresses:
        return {}
    out = {}
    for name in cfg.names():
        try:
            hit = sorted(set(addresses) & cfg.pci_hostdevs(name))
        except Exception:  # an unreadable definition: the planners refuse over it; here it holds nothing
            continue
        if hit:
            out[name] = hit
    return out


def who(holders: dict[str, list[str]]) -> str:
    """Which VM definitions hold which addresses, in words."""
    return "; ".join(f"{', '.join(addrs)} in VM {name}'s definition" for name, addrs in sorted(holders.items()))
