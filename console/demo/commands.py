"""The demo host's programs. They satisfy the `CommandRunner` protocol (console/host_seams.py) that the real
host's `Commands` (console/host_programs.py) implements, and each does to the demo tree what the real program
does to a host where that is visible:

- driverctl set-override / unset-override: the saved override under etc/driverctl.d/pci-ADDR;
- update-grub, grub-mkconfig -o CFG, grub2-mkconfig -o CFG: grub.cfg written afresh from /etc/default/grub
  (GRUB_CMDLINE_LINUX, GRUB_CMDLINE_LINUX_DEFAULT) for the running kernel;
- grubby --update-kernel=ALL --args=… / --remove-args=…: the `options` line of every BLS entry;
- proxmox-boot-tool refresh: checks /etc/kernel/cmdline and proxmox-boot-uuids (it copies to the ESPs,
  which are not mounted: nothing visible changes);
- update-initramfs -u|-c, dracut -f: the running kernel's initramfs image under /boot (a small text saying
  which modules it forces in and which it keeps out); -u only updates an image that exists;
- systemctl enable|disable [--now] nvidia-persistenced (the multi-user.target.wants link; --now also sets
  every GPU's persistence mode, as the daemon starting or stopping does), is-enabled, daemon-reload,
  daemon-reexec;
- sysctl -w KEY=VALUE, -p [FILE], --system: the /proc/sys values;
- qm set VMID … (a Proxmox VE demo's): console/demo/sim_qm.py edits etc/pve/qemu-server/VMID.conf;
- nvidia-smi -r -i ADDR (--gpu-reset): the simulated GPU reset as the driver does it (refused while
  processes or an active vGPU use it, failed for a GPU fallen off the bus): a pending MIG mode becomes
  current, GPU instances and the volatile ECC counts are gone.

driverctl is always there; the others exist where the tree has them under /usr/sbin, /sbin, /usr/bin or
/bin (the generator writes placeholders). Nothing of the machine's own is run: running the machine's
programs would change the real host.
"""
from __future__ import annotations

import json
import os
import shlex

from nodeconsole.console.demo.gen_etc import GRUB_CFG, PERSISTENCED_UNIT, PERSISTENCED_WANTS, grub_cfg, split_cmdline
from nodeconsole.console.demo.host import write_nvml_state
from nodeconsole.console.doctor import bootloader as bl
from nodeconsole.console.doctor import facts
from nodeconsole.console.outfile import write_atomic
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

BIN_DIRS = ("usr/sbin", "sbin", "usr/bin", "bin")
ENTRY_DIRS = ("boot/loader/entries", "efi/loader/entries", "boot/efi/loader/entries")
INSTALLED = ("update-grub", "grub-mkconfig", "grub2-mkconfig", "grubby", "proxmox-boot-tool", "update-initramfs",
             "dracut", "systemctl", "sysctl")
_PERSISTENCED = ("nvidia-persistenced", "nvidia-persistenced.service")


class DemoCommands:
    """The demo host's programs (see the module doc), acting on the tree below `root`."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def which(self, name: str) -> str | None:
        if name in ("driverctl", "nvidia-smi"):
            return f"{name} (demo)"
        if name == "qm":  # a Proxmox VE demo (`demo reset --proxmox`) has it
            return "/usr/sbin/qm (demo)" if self.root.isdir("etc/pve/qemu-server") else None
        if name not in INSTALLED:
            return None
        return next((f"/{d}/{name} (demo)" for d in BIN_DIRS if self.root.exists(f"{d}/{name}")), None)

    def run(self, argv: list[str]) -> tuple[int, str]:
        if not argv or not self.which(argv[0]):
            return 127, f"{argv[0] if argv else ''}: not available on the demo host"
        try:
            return getattr(self, "_" + argv[0].replace("-", "_"))(argv[1:])
        except OSError as e:
            return 1, f"{argv[0]}: {e.strerror or e} ({e.filename})"

    def _qm(self, args: list[str]) -> tuple[int, str]:
        from nodeconsole.console.demo.sim_qm import SimulatedQm

        return SimulatedQm(self.root).run(args)

    def _release(self) -> str:
        return self.root.read("proc/sys/kernel/osrelease") or ""

    # -- driverctl --
    def _driverctl(self, args: list[str]) -> tuple[int, str]:
        if len(args) < 2 or args[0] not in ("set-override", "unset-override"):
            return 127, "driverctl: the demo's driverctl takes set-override|unset-override DEVICE [DRIVER]"
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
        if args:
            return 1, "update-grub: takes no arguments"
        return self._mkconfig("update-grub", GRUB_CFG)

    def _grub_mkconfig(self, args: list[str], name: str = "grub-mkconfig") -> tuple[int, str]:
        if len(args) != 2 or args[0] != "-o":
            return 2, f"{name}: usage: {name} -o FILE"
        return self._mkconfig(name, args[1].lstrip("/"))

    def _grub2_mkconfig(self, args: list[str]) -> tuple[int, str]:
        return self._grub_mkconfig(args, "grub2-mkconfig")

    def _mkconfig(self, name: str, out: str) -> tuple[int, str]:
        grub = bl.grub_cmdline(self.root)
        if grub is None:
            return 1, f"{name}: /{bl.GRUB_DEFAULT} is missing"
        if grub.linux is None or grub.default is None:
            return 1, f"{name}: {grub.why}"
        prefix, _ = split_cmdline(self.root.read(facts.CMDLINE) or "")
        release = self._release()
        cfg = grub_cfg(prefix, " ".join(grub.linux), " ".join(grub.default), release)
        if not _write(self.root, out, cfg):
            return 1, f"{name}: /{out} leads out of the demo root"
        return 0, (f"Sourcing file `/{bl.GRUB_DEFAULT}'\nGenerating grub configuration file ...\n"
                   f"Found linux image: /boot/vmlinuz-{release}\ndone")

    def _grubby(self, args: list[str]) -> tuple[int, str]:
        if "--update-kernel=ALL" not in args:
            return 2, "grubby: the demo's grubby only takes --update-kernel=ALL"
        add = [w for a in args if a.startswith("--args=") for w in a.split("=", 1)[1].split()]
        remove = [w for a in args if a.startswith("--remove-args=") for w in a.split("=", 1)[1].split()]
        done = 0
        for d in ENTRY_DIRS:
            for n in self.root.listdir(d):
                data = self.root.read_bytes(f"{d}/{n}") if n.endswith(".conf") else None
                if data is None:
                    continue
                old = data.decode("utf-8", "replace")
                words = bl.edit_words((bl.entry_options(old) or "").split(), add, remove)
                if not _write(self.root, f"{d}/{n}", bl.set_entry_options(old, " ".join(words))):
                    return 1, f"grubby: /{d}/{n} leads out of the demo root"
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
        if "-u" not in args and "-c" not in args:
            return 1, "update-initramfs: give -u (update) or -c (create)"
        image = f"boot/initrd.img-{self._release()}"
        if "-c" in args or self.root.exists(image):
            mods = [w for line in (self.root.read(facts.INITRAMFS_MODULES) or "").splitlines()
                    for w in line.split("#", 1)[0].split()[:1]]
            _write(self.root, image, f"simulated initramfs (update-initramfs)\nmodules: {' '.join(mods)}\n"
                                     f"blacklist: {' '.join(self._blacklisted())}\n")
        return 0, f"update-initramfs: Generating /{image}"

    def _dracut(self, args: list[str]) -> tuple[int, str]:
        if args != ["-f"]:
            return 2, "dracut: the demo's dracut only takes -f"
        forced: list[str] = []
        for n in self.root.listdir(facts.DRACUT_CONF_D):
            for line in (self.root.read(f"{facts.DRACUT_CONF_D}/{n}") or "").splitlines():
                key, _, value = line.partition("+=")
                if key.strip() == "force_drivers":
                    for word in (w for part in shlex.split(value) for w in part.split()):
                        if word not in forced:
                            forced.append(word)
        image = f"boot/initramfs-{self._release()}.img"
        _write(self.root, image, f"simulated initramfs (dracut -f)\nforce_drivers: {' '.join(forced)}\n"
                                 f"blacklist: {' '.join(self._blacklisted())}\n")
        return 0, ""

    # -- systemd --
    def _systemctl(self, args: list[str]) -> tuple[int, str]:
        if args in (["daemon-reload"], ["daemon-reexec"]):
            return 0, ""
        now = "--now" in args
        words = [a for a in args if a != "--now"]
        if len(words) != 2 or words[0] not in ("enable", "disable", "is-enabled") or words[1] not in _PERSISTENCED:
            return 1, "systemctl: the demo host manages only nvidia-persistenced (enable|disable [--now])"
        wants = self.root.p(PERSISTENCED_WANTS)
        if self.root.resolve_parent(PERSISTENCED_WANTS) is None:
            return 1, f"systemctl: /{PERSISTENCED_WANTS} leads out of the demo root"
        if words[0] == "is-enabled":
            return (0, "enabled") if self.root.exists(PERSISTENCED_WANTS) else (1, "disabled")
        if words[0] == "enable" and not os.path.lexists(wants):
            wants.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(self.root.p(PERSISTENCED_UNIT), wants.parent), wants)
            out = f"Created symlink /{PERSISTENCED_WANTS} → /{PERSISTENCED_UNIT}."
        elif words[0] == "disable" and os.path.lexists(wants):
            wants.unlink()
            out = f"Removed \"/{PERSISTENCED_WANTS}\"."
        else:
            out = ""
        if now:
            self._set_persistence(words[0] == "enable")
        return 0, out

    def _set_persistence(self, on: bool) -> None:
        """The daemon starting (stopping) sets (clears) every GPU's persistence mode."""
        state_file = self.root.path.parent / "nvml.json"
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return
        for gpu in state.get("gpus", []):
            gpu["persistence_mode"] = int(on)
        write_nvml_state(state_file, state)

    # -- nvidia-smi --
    def _nvidia_smi(self, args: list[str]) -> tuple[int, str]:
        if len(args) != 3 or args[0] not in ("-r", "--gpu-reset") or args[1] != "-i":
            return 2, "nvidia-smi: the demo's nvidia-smi takes -r -i ADDR"
        try:
            address = parse_pci_address(args[2])
        except ValueError as e:
            return 2, f"nvidia-smi: {e}"
        state_file = self.root.path.parent / "nvml.json"
        state = json.loads(state_file.read_text())
        gpu = next((g for g in state.get("gpus", []) if _addr(g) == address), None)
        if gpu is None or self._driver(address) != "nvidia":
            return 6, f"No devices were found matching {address}"  # nvidia-smi's NOT_FOUND
        if gpu.get("lost"):
            return 15, f"Unable to reset GPU {address}: GPU is lost. Reboot the system to recover this GPU"
        if gpu.get("processes") or (gpu.get("vgpu") or {}).get("active"):
            return 255, (f"GPU {address} is currently in use by another process.\n"
                         "1 device is currently being used by one or more other processes")
        _reset_state(gpu)
        write_nvml_state(state_file, state)
        return 0, f"GPU {address} was successfully reset.\nAll done."

    def _driver(self, address: str) -> str:
        link = self.root.p(f"sys/bus/pci/devices/{address}/driver")
        return os.path.basename(os.readlink(link)) if os.path.islink(link) else ""

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
            if not sep or "" in key.split(".") or ".." in key or not self.root.exists(rel):
                return 255, f"sysctl: cannot stat /{rel}: No such file or directory"
            if not _write(self.root, rel, value + "\n"):
                return 255, f"sysctl: /{rel} leads out of the demo root"
            out.append(f"{key} = {value}")
        return 0, "\n".join(out)


def _addr(gpu: dict) -> str:
    try:
        return parse_pci_address(str(gpu.get("address") or ""))
    except ValueError:
        return ""


def _reset_state(gpu: dict) -> None:
    """What a GPU reset does to the simulated GPU's state (console/demo/nvml_sim_mig.py reset_gpu too)."""
    mig = gpu.get("mig")
    if isinstance(mig, dict):
        mig["current"] = int(mig.get("pending", mig.get("current")) or 0)
        mig["instances"] = []
    ecc = gpu.get("ecc")
    if isinstance(ecc, dict):
        ecc.update({k: 0 for k in ("volatile_uncorrected", "volatile_corrected") if k in ecc})


def _sysctl_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith(("#", ";")) and "=" in line]


def _write(root: Root, rel: str, text: str) -> bool:
    """Replace a file of the demo's disk (mode 0644, atomically); False (nothing written) when its
    directory leads out of the root."""
    if root.resolve_parent(rel) is None:
        return False
    path = root.p(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode("utf-8"), 0o644)
    return True
