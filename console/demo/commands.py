"""The demo host's programs. They satisfy the `CommandRunner` protocol (actions/host_seams.py) that the real
host's `Commands` (actions/commands.py) implements, and each does to the demo tree what the real program
does to a host where that is visible:

- driverctl set-override / unset-override: the saved override under etc/driverctl.d/pci-ADDR;
- update-grub, grub-mkconfig -o CFG, grub2-mkconfig -o CFG: the `linux` lines of grub.cfg get the
  command line of /etc/default/grub (GRUB_CMDLINE_LINUX, then GRUB_CMDLINE_LINUX_DEFAULT except on
  recovery entries), the kernel image and root= words kept;
- grubby --update-kernel=ALL --args=… / --remove-args=…: the `options` line of every BLS entry;
- proxmox-boot-tool refresh: checks /etc/kernel/cmdline and proxmox-boot-uuids (it copies to the ESPs,
  which are not mounted: nothing visible changes);
- update-initramfs -u, dracut -f: rewrite the running kernel's initramfs image under /boot (a small text
  saying which modules it forces in and which it keeps out);
- systemctl enable|disable nvidia-persistenced: the multi-user.target.wants link; daemon-reload and
  daemon-reexec succeed;
- sysctl -w KEY=VALUE, -p [FILE], --system: the /proc/sys values.

Programs that a host has only when installed (the boot and initramfs tools) exist when the tree has them
under /usr/sbin, /sbin, /usr/bin or /bin (for the initramfs tools also their /etc directory). Nothing of
the machine's own is run: running the machine's programs would change the real host.
"""
from __future__ import annotations

import os
import shlex
import tempfile

from nodeconsole.console.doctor import bootloader as bl
from nodeconsole.console.doctor import facts
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

BIN_DIRS = ("usr/sbin", "sbin", "usr/bin", "bin")
ENTRY_DIRS = ("boot/loader/entries", "efi/loader/entries", "boot/efi/loader/entries")
ALWAYS = ("driverctl", "systemctl", "sysctl")
INSTALLED = {"update-grub": (), "grub-mkconfig": (), "grub2-mkconfig": (), "grubby": (), "proxmox-boot-tool": (),
             "update-initramfs": ("etc/initramfs-tools",), "dracut": ("etc/dracut.conf.d",)}
UNIT_FILES = {"nvidia-persistenced": facts.PERSISTENCED_WANTS}
_UNIT_DIRS = ("usr/lib/systemd/system", "lib/systemd/system")


class DemoCommands:
    """The demo host's programs (see the module doc), acting on the tree below `root`."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def which(self, name: str) -> str | None:
        if name in ALWAYS:
            return f"{name} (demo)"
        if name not in INSTALLED:
            return None
        for d in BIN_DIRS:
            if self.root.exists(f"{d}/{name}"):
                return f"/{d}/{name} (demo)"
        return f"{name} (demo)" if any(self.root.isdir(c) for c in INSTALLED[name]) else None

    def run(self, argv: list[str]) -> tuple[int, str]:
        if not argv or not self.which(argv[0]):
            return 127, f"{argv[0] if argv else '?'}: not available on the demo host"
        handler = getattr(self, "_" + argv[0].replace("-", "_"), None)
        if handler is None:
            return 127, f"{argv[0]}: not available on the demo host"
        try:
            return handler(argv[1:])
        except OSError as e:
            return 1, f"{argv[0]}: {e.strerror or e} ({e.filename})"

    # -- files --
    def _write(self, rel: str, text: str) -> None:
        path = self.root.p(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)

    def _release(self) -> str:
        return self.root.read("proc/sys/kernel/osrelease") or "demo"

    # -- driverctl --
    def _driverctl(self, args: list[str]) -> tuple[int, str]:
        if len(args) < 2 or args[0] not in ("set-override", "unset-override"):
            return 2, "driverctl: usage: driverctl set-override|unset-override DEVICE [DRIVER]"
        try:
            address = parse_pci_address(args[1])
        except ValueError as e:
            return 2, f"driverctl: {e}"
        conf = self.root.p(f"etc/driverctl.d/pci-{address}")
        if args[0] == "set-override":
            if len(args) < 3:
                return 2, "driverctl: set-override needs a driver"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(args[2] + "\n")
        elif conf.exists():
            conf.unlink()
            for d in (conf.parent, conf.parent.parent):  # leave the demo root as it was generated
                try:
                    d.rmdir()
                except OSError:
                    break
        else:
            return 1, f"driverctl: no override for {address}"
        return 0, ""

    # -- GRUB --
    def _update_grub(self, args: list[str]) -> tuple[int, str]:
        return self._mkconfig("update-grub", "boot/grub/grub.cfg")

    def _grub_mkconfig(self, args: list[str], name: str = "grub-mkconfig") -> tuple[int, str]:
        if len(args) != 2 or args[0] != "-o":
            return 2, f"{name}: usage: {name} -o FILE"
        return self._mkconfig(name, args[1].lstrip("/"))

    def _grub2_mkconfig(self, args: list[str]) -> tuple[int, str]:
        return self._grub_mkconfig(args, "grub2-mkconfig")

    def _mkconfig(self, name: str, out: str) -> tuple[int, str]:
        defaults = self.root.read(bl.GRUB_DEFAULT)
        if defaults is None:
            return 1, f"{name}: /{bl.GRUB_DEFAULT}: No such file or directory"
        linux = (bl.grub_value(defaults, "GRUB_CMDLINE_LINUX") or "").split()
        default = (bl.grub_value(defaults) or "").split()
        cfg = self.root.read_bytes(out)
        text = cfg.decode("utf-8", "replace") if cfg is not None else _minimal_cfg(self._release())
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            words = line.split()
            if not words or words[0] not in ("linux", "linuxefi", "linux16") or len(words) < 2:
                continue
            keep = [w for w in words[2:] if w.startswith("root=") or w in ("ro", "rw")]
            recovery = "single" in words[2:]
            new = words[:2] + keep + (["single"] if recovery else []) + linux + ([] if recovery else default)
            indent = line[:len(line) - len(line.lstrip())]
            lines[i] = indent + " ".join(new) + line[len(line.rstrip("\r\n")):]
        self._write(out, "".join(lines))
        return 0, f"Generating grub configuration file ...\ndone ({name}, demo)"

    def _grubby(self, args: list[str]) -> tuple[int, str]:
        if "--update-kernel=ALL" not in args:
            return 2, "grubby: the demo's grubby only takes --update-kernel=ALL"
        add = [w for a in args if a.startswith("--args=") for w in a.split("=", 1)[1].split()]
        remove = [w for a in args if a.startswith("--remove-args=") for w in a.split("=", 1)[1].split()]
        done = 0
        for d in ENTRY_DIRS:
            for n in self.root.listdir(d):
                text = self.root.read_bytes(f"{d}/{n}") if n.endswith(".conf") else None
                if text is None:
                    continue
                old = text.decode("utf-8", "replace")
                words = bl.edit_words((bl.entry_options(old) or "").split(), add, remove)
                self._write(f"{d}/{n}", bl.set_entry_options(old, " ".join(words)))
                done += 1
        return (0, "") if done else (1, "grubby: no boot entries found")

    def _proxmox_boot_tool(self, args: list[str]) -> tuple[int, str]:
        if args != ["refresh"]:
            return 2, "proxmox-boot-tool: the demo's proxmox-boot-tool only takes `refresh`"
        for rel in (bl.PROXMOX_CMDLINE, bl.PROXMOX_UUIDS):
            if not self.root.exists(rel):
                return 2, f"proxmox-boot-tool: /{rel} not found"
        return 0, "Running hook script 'proxmox-auto-removal'..\nCopying and configuring kernels (demo)"

    # -- initramfs --
    def _blacklisted(self) -> list[str]:
        out = []
        for n in self.root.listdir(facts.MODPROBE_D):
            for line in (self.root.read(f"{facts.MODPROBE_D}/{n}") or "").splitlines():
                words = line.split("#", 1)[0].split()
                if len(words) == 2 and words[0] == "blacklist" and words[1] not in out:
                    out.append(words[1])
        return out

    def _update_initramfs(self, args: list[str]) -> tuple[int, str]:
        if args != ["-u"]:
            return 2, "update-initramfs: the demo's update-initramfs only takes -u"
        mods = [w for line in (self.root.read(facts.INITRAMFS_MODULES) or "").splitlines()
                for w in line.split("#", 1)[0].split()[:1]]
        image = f"boot/initrd.img-{self._release()}"
        self._write(image, f"simulated initramfs (update-initramfs -u)\nmodules: {' '.join(mods)}\n"
                           f"blacklist: {' '.join(self._blacklisted())}\n")
        return 0, f"update-initramfs: Generating /{image}"

    def _dracut(self, args: list[str]) -> tuple[int, str]:
        if args != ["-f"]:
            return 2, "dracut: the demo's dracut only takes -f"
        forced = []
        for n in self.root.listdir(facts.DRACUT_CONF_D):
            for line in (self.root.read(f"{facts.DRACUT_CONF_D}/{n}") or "").splitlines():
                key, _, value = line.partition("+=")
                if key.strip() == "force_drivers":
                    for word in (w for part in shlex.split(value) for w in part.split()):
                        if word not in forced:
                            forced.append(word)
        image = f"boot/initramfs-{self._release()}.img"
        self._write(image, f"simulated initramfs (dracut -f)\nforce_drivers: {' '.join(forced)}\n"
                           f"blacklist: {' '.join(self._blacklisted())}\n")
        return 0, ""

    # -- systemd --
    def _systemctl(self, args: list[str]) -> tuple[int, str]:
        if args in (["daemon-reload"], ["daemon-reexec"]):
            return 0, ""
        if len(args) != 2 or args[0] not in ("enable", "disable"):
            return 2, "systemctl: the demo's systemctl takes enable|disable UNIT, daemon-reload, daemon-reexec"
        unit = args[1].removesuffix(".service")
        if unit not in UNIT_FILES:
            return 1, f"Failed to {args[0]} unit: Unit file {unit}.service does not exist."
        link = self.root.p(UNIT_FILES[unit])
        if args[0] == "enable":
            if not os.path.lexists(link):
                target = next((f"/{d}/{unit}.service" for d in _UNIT_DIRS
                               if self.root.exists(f"{d}/{unit}.service")), f"/{_UNIT_DIRS[0]}/{unit}.service")
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(target, link)
                return 0, f"Created symlink /{UNIT_FILES[unit]} → {target}."
            return 0, ""
        if os.path.lexists(link):
            os.unlink(link)
            return 0, f"Removed /{UNIT_FILES[unit]}."
        return 0, ""

    # -- sysctl --
    def _sysctl(self, args: list[str]) -> tuple[int, str]:
        if len(args) == 2 and args[0] == "-w":
            return self._sysctl_set([args[1]])
        if args and args[0] == "-p":
            rel = (args[1] if len(args) > 1 else "/etc/sysctl.conf").lstrip("/")
            return self._sysctl_set(_sysctl_lines(self.root.read(rel) or ""))
        if args == ["--system"]:
            lines = []
            for n in self.root.listdir(facts.SYSCTL_D):
                if n.endswith(".conf"):
                    lines += _sysctl_lines(self.root.read(f"{facts.SYSCTL_D}/{n}") or "")
            return self._sysctl_set(lines)
        return 2, "sysctl: the demo's sysctl takes -w KEY=VALUE, -p [FILE], --system"

    def _sysctl_set(self, assignments: list[str]) -> tuple[int, str]:
        out = []
        for a in assignments:
            key, sep, value = a.partition("=")
            key, value = key.strip(), value.strip()
            rel = "proc/sys/" + key.replace(".", "/")
            if not sep or ".." in key.split(".") or not self.root.exists(rel):
                return 255, f"sysctl: cannot stat /{rel}: No such file or directory"
            self.root.p(rel).write_text(value + "\n")
            out.append(f"{key} = {value}")
        return 0, "\n".join(out)


def _sysctl_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith(("#", ";")) and "=" in line]


def _minimal_cfg(release: str) -> str:
    """The grub.cfg grub-mkconfig writes for one kernel (when there is none yet)."""
    return (f"menuentry 'Linux {release}' {{\n\tlinux /boot/vmlinuz-{release} root=/dev/sda1 ro\n"
            f"\tinitrd /boot/initrd.img-{release}\n}}\n")
