"""A simulated Proxmox VE `qm` over a tree's /etc/pve/qemu-server: `qm set VMID [--digest SHA1]
[--delete KEY[,KEY…]] [--KEY VALUE…]` edits the VM's config as Proxmox does, and writes it back in
Proxmox's own form (qemu-server's write_vm_config, as we read it: the description as `#` lines, then the
keys sorted; `[PENDING]` with its `delete:` among its sorted keys; the snapshots, sorted by name).

What it does as Proxmox does: a `lock:` refuses (exit 255, "VM N is locked (LOCK)"); a `--digest` other
than the SHA1 of the config's bytes refuses ("config file has been modified by another user"); a value of
an option it knows (hostpciN, numaN, hugepages, affinity, memory…) that Proxmox would refuse is refused;
on a running VM (its pid file and QEMU process, console/vms/proxmox.py) a change waits in [PENDING] (no
option this console sets can be hot-plugged), on a stopped VM it is made at once.

Guessed: the exact messages and exit statuses; hot-plug is never simulated.
"""
from __future__ import annotations

import hashlib
import re

from nodeconsole.console.outfile import write_atomic
from nodeconsole.console.root import Root
from nodeconsole.console.vms.proxmox import CONF_DIR, running_pid
from nodeconsole.console.vms.proxmox_conf import PENDING, QemuConf, Section, parse_conf, settings

_OPTION = re.compile(r"^--([a-z][a-z_\-]*\d*)$")


def sections_of(conf: QemuConf) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(main options, pending options, pending deletes) as dicts/lists."""
    main = {ln.key: ln.value for ln in conf.main.lines}
    pending = {ln.key: ln.value for ln in conf.pending.lines} if conf.pending else {}
    return main, pending, list(conf.pending.delete) if conf.pending else []


def encode_text(line: str) -> str:
    """A description line as Proxmox writes it (PVE::Tools::encode_text): control and non-ASCII bytes and
    `:` as %XX."""
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x3A else f"%{b:02X}" for b in line.encode("utf-8"))


def _raw(description: str, options: dict[str, str], pending: bool = False) -> str:
    text = "".join(f"#{encode_text(line)}\n" for line in description.split("\n")) if description else ""
    return text + "".join(f"{k}: {options[k]}\n" for k in sorted(options))


def write_form(conf: QemuConf, main: dict[str, str], pending: dict[str, str], delete: list[str]) -> str:
    """The config as Proxmox writes it (the module's doc)."""
    raw = _raw(conf.main.description, main)
    table = dict(pending)
    if delete:
        table["delete"] = ",".join(delete)
    if table:
        raw += f"\n[{PENDING}]\n" + _raw("", table, True)
    for snap in sorted(conf.snapshots, key=lambda s: s.name):
        raw += f"\n[{snap.name}]\n" + _raw(snap.description, {ln.key: ln.value for ln in snap.lines})
    if conf.cloudinit is not None:
        raw += f"\n[{conf.cloudinit.name}]\n" + _raw("", {ln.key: ln.value for ln in conf.cloudinit.lines})
    return raw


class SimulatedQm:
    """`qm` for the tree below `root` (the demo host's, a test's)."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def run(self, args: list[str]) -> tuple[int, str]:
        if len(args) < 2 or args[0] != "set" or not args[1].isdigit():
            return 255, "400 usage: qm set <vmid> [OPTIONS] (only `set` is simulated)"
        vmid = int(args[1])
        rel = f"{CONF_DIR}/{vmid}.conf"
        data = self.root.read_bytes(rel)
        if data is None:
            return 2, f"Configuration file 'nodes/localhost/qemu-server/{vmid}.conf' does not exist"
        try:
            sets, deletes, digest = _options(args[2:])
        except ValueError as e:
            return 255, f"400 Parameter verification failed. {e}"
        conf = parse_conf(vmid, "/" + rel, data.decode("utf-8", "replace"))
        if digest is not None and digest != hashlib.sha1(data).hexdigest():
            return 255, "detected modified configuration - file changed by other user? Try again."
        lock = conf.main.get("lock")
        if lock is not None:
            return 255, f"VM {vmid} is locked ({lock.value})"
        refused = _refused(conf, sets)
        if refused:
            return 255, f"400 Parameter verification failed. {refused}"
        main, pending, delete = sections_of(conf)
        apply = _running_change if running_pid(self.root, vmid) is not None else _stopped_change
        apply(main, pending, delete, sets, deletes)
        write_atomic(self.root.writable(rel), write_form(conf, main, pending, delete).encode(), 0o640)
        said = " ".join([f"-{k} {v}" for k, v in sets.items()] + [f"-delete {k}" for k in deletes])
        return 0, f"update VM {vmid}: {said}"


def _options(args: list[str]) -> tuple[dict[str, str], list[str], str | None]:
    sets: dict[str, str] = {}
    deletes: list[str] = []
    digest = None
    it = iter(args)
    for arg in it:
        m = _OPTION.match(arg)
        value = next(it, None)
        if m is None or value is None:
            raise ValueError(f"{arg}: expected --OPTION VALUE")
        if m.group(1) == "delete":
            deletes += [k for k in re.split(r"[,;\s]+", value) if k]
        elif m.group(1) == "digest":
            digest = value
        else:
            sets[m.group(1)] = value
    both = set(sets) & set(deletes)
    if both:
        raise ValueError(f"{sorted(both)[0]}: set and deleted at once")
    return sets, deletes, digest


def _refused(conf: QemuConf, sets: dict[str, str]) -> str:
    """What Proxmox would refuse of the values (the settings' own checks)."""
    lines = "\n".join(f"{k}: {v}" for k, v in sets.items())
    probe = parse_conf(conf.vmid, "qm", lines)
    found = settings(Section("", probe.main.lines), "qm").problems
    checked = [p for p in found if "needs numa: 1" not in p and "more than sockets" not in p]
    return checked[0].split(": ", 1)[-1] if checked else ""


def _stopped_change(main: dict[str, str], pending: dict[str, str], delete: list[str], sets: dict[str, str],
                    deletes: list[str]) -> None:
    for k, v in sets.items():
        main[k] = v
        pending.pop(k, None)
    for k in deletes:
        main.pop(k, None)
        pending.pop(k, None)
        if k in delete:
            delete.remove(k)


def _running_change(main: dict[str, str], pending: dict[str, str], delete: list[str], sets: dict[str, str],
                    deletes: list[str]) -> None:
    for k, v in sets.items():
        if k in delete:
            delete.remove(k)
        if main.get(k) == v:
            pending.pop(k, None)
        else:
            pending[k] = v
    for k in deletes:
        pending.pop(k, None)
        if k in main and k not in delete:
            delete.append(k)
