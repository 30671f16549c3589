"""What the doctor's fix plans (actions/doctor_fixes.py) find on the host and the operations of its module
fixes: the host's programs, which tool builds its initramfs, and loading a module that makes a device node
(vhost_net, tun) now and at every boot."""
from __future__ import annotations

from nodeconsole.actions.boot_steps import encode
from nodeconsole.actions.plan import Op
from nodeconsole.console.doctor import facts
from nodeconsole.console.root import Root

_BIN_DIRS = ("usr/sbin", "sbin", "usr/bin", "bin")
INITRAMFS_REBUILD = {"initramfs-tools": ["update-initramfs", "-u"], "dracut": ["dracut", "-f"]}


def program(root: Root, name: str) -> str | None:
    return next((f"/{d}/{name}" for d in _BIN_DIRS if root.exists(f"{d}/{name}")), None)


def initramfs_tool(root: Root) -> str | None:
    """Which tool builds this host's initramfs, from its programs, then its configuration directories."""
    uit, dracut = program(root, "update-initramfs"), program(root, "dracut")
    if uit and not dracut:
        return "initramfs-tools"
    if dracut and not uit:
        return "dracut"
    if root.isdir("etc/initramfs-tools"):
        return "initramfs-tools"
    if root.isdir(facts.DRACUT_CONF_D) or root.exists("etc/dracut.conf"):
        return "dracut"
    return None


def module_ops(module: str) -> list[Op]:
    """vhost-net, tun: the module loads now (its device node appears) and at every boot (a modules-load.d
    file of its own, read once the root file system is up: no initramfs rebuild)."""
    conf = facts.MODULE_CONF[module]
    content = f"# Written by nodeconsole (doctor --fix): {module} loads at every boot.\n{module}\n"
    return [{"kind": "config_file", "needs_reboot": False, "run": [], "title": f"Load {module} at boot (/{conf})",
             "why": f"/{facts.MODULE_DEVICE[module]} is there after every reboot",
             "files": [dict(encode(content.encode()), path=conf)]},
            {"kind": "module", "name": module, "device": facts.MODULE_DEVICE[module]}]
