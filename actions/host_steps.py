"""Step kinds that change the host itself: PCI driver binding (through the kernel seam), files under the
root (modprobe.d), driverctl overrides and kernel modules (host programs run as argv lists).

Each builder reads the current state, returns None when the host already is in the target state, and
records the current state as the inverse operation.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.doctor import facts
from nodeconsole.console.outfile import write_atomic
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

MODPROBE_FILE = "etc/modprobe.d/nodeconsole-vfio.conf"
DRIVERCTL_DIR = "etc/driverctl.d"
VFIO = "vfio-pci"
HOST_DRIVER = "*"  # target driver: whatever the kernel binds by default, as long as it is not vfio
_STUBS = ("vfio-pci", "pci-stub")
_VFIO_WAIT_S = 2.0  # /dev/vfio/N comes from devtmpfs/udev right after the bind; allow it a moment


def read_raw(root: Root, rel: str) -> str | None:
    """A file's exact content (Root.read strips), None when absent (or not a regular file inside the
    root: Root's contained, bounded read)."""
    data = root.read_bytes(rel)
    return None if data is None else data.decode("utf-8", "replace")


def target_path(root: Root, rel: str) -> Path:
    """Where to write `rel` below the root; StepError when it (or a link on the way) leads out of it."""
    try:
        return Path(root.writable(rel))
    except PermissionError as e:
        raise StepError(f"refusing a path outside the root: {e}") from None


def missing_dirs(root: Root, rel: str) -> list[str]:
    """The directories above `rel` that do not exist yet, deepest first (root-relative)."""
    made = []
    d = os.path.dirname(rel)
    while d and not root.exists(d):
        made.append(d)
        d = os.path.dirname(d)
    return made


def make_parents(root: Root, rel: str) -> list[str]:
    """mkdir -p the directory of `rel`; returns the directories it made, deepest first."""
    made = missing_dirs(root, rel)
    target_path(root, rel).parent.mkdir(parents=True, exist_ok=True)
    return made


def remove_dirs(root: Root, dirs: list[str]) -> None:
    """rmdir each (deepest first) that is empty; stops at the first that is not."""
    for sub in dirs:
        try:
            target_path(root, sub).rmdir()
        except (OSError, StepError):
            break  # not empty or gone: leave it


def pci_state(root: Root, address: str) -> tuple[str | None, str | None]:
    """(driver_override, bound driver) of a PCI function; None for an empty override / no driver."""
    base = f"sys/bus/pci/devices/{address}"
    override = root.read(f"{base}/driver_override")
    return (None if override in (None, "", "(null)") else override), root.link_name(f"{base}/driver")


def driverctl_state(root: Root, address: str) -> str | None:
    """The driver driverctl binds the device to at boot (its saved override), None when none."""
    text = root.read(f"{DRIVERCTL_DIR}/pci-{address}")
    return text or None


def modprobe_ids(text: str | None) -> tuple[list[str], list[str], list[str]]:
    """(vfio-pci ids=, modules with `softdep M pre: vfio-pci`, the devices the file was written for —
    its `# devices:` line) of a modprobe.d file."""
    ids: list[str] = []
    deps: list[str] = []
    devices: list[str] = []
    for line in (text or "").splitlines():
        if line.startswith("# devices:"):
            devices += [d for d in line.split(":", 1)[1].split() if d not in devices]
            continue
        words = line.split("#", 1)[0].split()
        if len(words) >= 3 and words[:2] == ["options", VFIO]:
            for w in words[2:]:
                if w.startswith("ids="):
                    ids += [i.lower() for i in w[4:].split(",") if i and i.lower() not in ids]
        elif len(words) >= 4 and words[0] == "softdep" and words[2] == "pre:" and VFIO in words[3:]:
            if words[1] not in deps:
                deps.append(words[1])
    return ids, deps, devices


def render_modprobe(ids: list[str], deps: list[str], devices: list[str]) -> str:
    # ids= matches by model; the devices line says which devices the ids are kept for, so a release
    # can drop exactly the ids nothing else here needs
    lines = ["# Written by nodeconsole (passthrough --persist): these devices go to vfio-pci at boot.",
             "# `nodeconsole release GPU` removes its ids; `nodeconsole log` shows who changed it.",
             f"# devices: {' '.join(devices)}",
             f"options {VFIO} ids={','.join(ids)}"]
    lines += [f"softdep {d} pre: {VFIO}" for d in deps]
    return "\n".join(lines) + "\n"


def _driver_ok(current: str | None, want: str | None) -> bool:
    if want == HOST_DRIVER:
        return current is not None and current not in _STUBS
    return current == want


def _want_text(want: str | None) -> str:
    return {None: "no driver", HOST_DRIVER: "its host driver"}.get(want, want or "")


@step_kind("pci_driver")
def pci_driver_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "pci_driver", "device": A, "override": STR|None, "driver": NAME|None|"*", "group": N,
    "vfio_node": bool}`: set driver_override, unbind from a driver that does not match, probe when a
    driver is wanted. `vfio_node` (the last member of a group to bind): /dev/vfio/N must exist too."""
    address = parse_pci_address(op["device"])
    want_override, want = op.get("override"), op.get("driver")
    group = op.get("group")
    root, base = host.root, f"sys/bus/pci/devices/{address}"
    if not root.exists(base):
        raise StepError(f"PCI device {address} is gone from this host")
    override, driver = pci_state(root, address)
    vfio_node = f"dev/vfio/{group}"
    needs_node = want == VFIO and group is not None and bool(op.get("vfio_node"))
    if override == want_override and _driver_ok(driver, want) and (not needs_node or root.exists(vfio_node)):
        return None
    inverse = {"kind": "pci_driver", "device": address, "override": override, "driver": driver, "group": group}

    # An override that names another driver than the one to bind (a stale driver_override, as an
    # interrupted run can leave) only matters at the next probe: bind under a temporary override that
    # lets the wanted driver in, then write the recorded one.
    detour = want is not None and want_override is not None and not _driver_ok(want_override, want)
    bind_override = (None if want == HOST_DRIVER else want) if detour else want_override

    def apply() -> None:
        cur_override, cur = pci_state(root, address)
        if cur is not None and not _driver_ok(cur, want):
            if cur_override != bind_override:
                host.kernel.write(f"{base}/driver_override", bind_override or "\n")
            host.kernel.write(f"{base}/driver/unbind", address)
        elif cur is None and want is not None and cur_override != bind_override:
            host.kernel.write(f"{base}/driver_override", bind_override or "\n")
        if want is not None and pci_state(root, address)[1] is None:
            host.kernel.write("sys/bus/pci/drivers_probe", address)
        if pci_state(root, address)[0] != want_override:
            host.kernel.write(f"{base}/driver_override", want_override or "\n")

    def verify() -> str | None:
        now_override, now = pci_state(root, address)
        if now_override != want_override:
            return f"driver_override of {address} is {now_override or 'empty'}, expected {want_override or 'empty'}"
        if not _driver_ok(now, want):
            return f"{address} is bound to {now or 'no driver'}, expected {_want_text(want)}"
        if needs_node:
            deadline = time.monotonic() + _VFIO_WAIT_S
            while not root.exists(vfio_node):
                if time.monotonic() > deadline:
                    return f"/dev/vfio/{group} did not appear"
                time.sleep(0.05)
        return None

    title, why, cmds = _pci_driver_text(address, want_override, want, driver, group)
    return Step(title=title, why=why, commands=tuple(cmds), op=dict(op, device=address), inverse=inverse,
                apply_fn=apply, verify_fn=verify)

def _pci_driver_text(address: str, want_override: str | None, want: str | None, driver: str | None,
                     group: object) -> tuple[str, str, list[str]]:
    """The title, the reason and the shell commands of a pci_driver step."""
    dev = f"/sys/bus/pci/devices/{address}"
    cmds = [f"echo {want_override or ''} > {dev}/driver_override".replace("echo  >", "echo >")]
    if driver is not None and not _driver_ok(driver, want):
        cmds.append(f"echo {address} > {dev}/driver/unbind")
    if want is not None:
        cmds.append(f"echo {address} > /sys/bus/pci/drivers_probe")
    if want == VFIO:
        title, why = (f"Bind {address} to vfio-pci",
                      f"a VM can only be given the whole IOMMU group {group}, every member on vfio-pci "
                      f"(now {driver or 'no driver'})")
    elif want is None:
        title, why = f"Unbind {address} from {driver}", "it had no driver before"
    else:
        title, why = (f"Give {address} back to {_want_text(want)}",
                      f"the host uses it again (now {driver or 'no driver'})")
    return title, why, cmds


@step_kind("file")
def file_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "file", "path": REL, "content": STR|None, "remove_dirs": [REL...], "why": STR}`: the file under
    the root has exactly `content` (None: it does not exist; then empty `remove_dirs` are removed too); `why`
    (optional) says what the file is for."""
    rel = op["path"].lstrip("/")
    if ".." in rel.split("/"):
        raise StepError(f"refusing a path outside the root: {rel}")
    content = op.get("content")
    root: Root = host.root
    target_path(root, rel)
    current = read_raw(root, rel)
    if current == content:
        return None
    made = missing_dirs(root, rel)
    inverse = {"kind": "file", "path": rel, "content": current, "remove_dirs": made if current is None else []}
    if isinstance(op.get("why"), str):
        inverse["why"] = "as it was before"

    def apply() -> None:
        path = target_path(root, rel)
        if content is None:
            if os.path.lexists(path):
                os.unlink(path)
            remove_dirs(root, op.get("remove_dirs") or [])
            return
        created = make_parents(root, rel)
        try:
            write_atomic(path, content.encode("utf-8"), 0o644)
        except BaseException:
            remove_dirs(root, created)  # a failed write leaves the host as it was
            raise

    def verify() -> str | None:
        now = read_raw(root, rel)
        if now == content:
            return None
        return f"/{rel} {'still exists' if content is None else 'does not hold the expected content'}"

    if content is None:
        return Step(f"Remove /{rel}", "nothing needs it any more", (f"rm /{rel}",), dict(op), inverse,
                    apply, verify)
    why = op["why"] if isinstance(op.get("why"), str) else \
        "bind the devices to vfio-pci at every boot (before nvidia can take them)"
    return Step(f"Write /{rel}", why,
                (f"cat > /{rel} <<'EOF'  # content below",), dict(op), inverse, apply, verify, detail=content)


@step_kind("driverctl")
def driverctl_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "driverctl", "device": A, "driver": NAME|None}`: driverctl's saved override for the
    device (None: no override). driverctl itself rebinds the device right away."""
    address = parse_pci_address(op["device"])
    want = op.get("driver")
    current = driverctl_state(host.root, address)
    if current == want:
        return None
    argv = ["driverctl", "set-override", address, want] if want else ["driverctl", "unset-override", address]

    def apply() -> None:
        if not host.commands.which("driverctl"):
            raise StepError("driverctl is not installed on this host")
        rc, out = host.commands.run(argv)
        if rc != 0:
            raise StepError(f"{' '.join(argv)} exited {rc}: {out}")

    def verify() -> str | None:
        now = driverctl_state(host.root, address)
        return None if now == want else f"driverctl override of {address} is {now or 'none'}, expected {want or 'none'}"

    title = f"Persist {address} on {want} (driverctl)" if want else f"Remove the driverctl override of {address}"
    why = ("without it a reboot gives the device back to its host driver and the VM fails to start" if want
           else "the device should boot on its host driver again")
    return Step(title, why, (" ".join(argv),), dict(op, device=address),
                {"kind": "driverctl", "device": address, "driver": current}, apply, verify)


@step_kind("module")
def module_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "module", "name": "vfio-pci"}`: the driver is loaded. `{"kind": "module", "name":
    "vhost_net", "device": "dev/vhost-net"}`: a module that makes a device node rather than a PCI driver
    (facts.MODULE_DEVICE) is loaded and its node is there. Left loaded on undo (harmless)."""
    name = op["name"]
    device = op.get("device")
    if device is not None and facts.MODULE_DEVICE.get(str(name)) != device:
        raise StepError(f"refusing module {name!r} with device {device!r}: not one nodeconsole loads")
    there = str(device) if device is not None else f"sys/bus/pci/drivers/{name}"
    if host.root.exists(there):
        return None
    argv = ["modprobe", name]

    def apply() -> None:
        loader = getattr(host.kernel, "load_module", None)
        if loader is not None:
            loader(name)
            return
        rc, out = host.commands.run(argv)
        if rc != 0:
            raise StepError(f"modprobe {name} exited {rc}: {out}")

    def verify() -> str | None:
        if host.root.exists(there):
            return None
        return f"/{device} is missing after loading {name}" if device else f"driver {name} is not loaded"

    if device is not None:
        return Step(f"Load the {name} module (/{device})", "it takes effect now; the modules-load.d file "
                    "loads it at every boot", (" ".join(argv),), dict(op), None, apply, verify)
    return Step(f"Load the {name} driver", "devices can only be bound to a loaded driver", (" ".join(argv),),
                dict(op), None, apply, verify)
