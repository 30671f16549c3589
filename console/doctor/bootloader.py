"""Which boot loader this host uses, and how its kernel command line is changed: detected from the
files below the root, never guessed. Read-only (the fix plans in actions/ do the writing).

- Proxmox (systemd-boot through proxmox-boot-tool): /etc/kernel/cmdline + /etc/kernel/proxmox-boot-uuids,
  then `proxmox-boot-tool refresh`;
- RHEL-style BLS + grubby: grubby installed and /boot/loader/entries present: `grubby --update-kernel=ALL
  --args=… / --remove-args=…` (the edit is the command);
- GRUB: /etc/default/grub and its grub.d snippets (GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT as
  the shell sees them, console/grub_config.py) + a generated grub.cfg, then `update-grub` where it
  exists, else `grub2-mkconfig -o /boot/grub2/grub.cfg` / `grub-mkconfig -o /boot/grub/grub.cfg`;
- plain systemd-boot: the `options` line of /boot/loader/entries/*.conf (or /efi/…) entries of the
  running kernel.
Anything else is "unknown": the fix says to set the flags by hand.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from nodeconsole.console.grub_config import GrubCmdline, edit_words, flag_name, grub_sources
from nodeconsole.console.root import Root
from nodeconsole.console.shell_assign import Source, source_all
from nodeconsole.console.shell_assign import edit as shell_edit

__all__ = ["BootLoader", "detect", "edit_words", "flag_name", "grub_cmdline", "loader_cmdline"]

GRUB_DEFAULT = "etc/default/grub"
GRUB_VAR = "GRUB_CMDLINE_LINUX_DEFAULT"
PROXMOX_CMDLINE = "etc/kernel/cmdline"
PROXMOX_UUIDS = "etc/kernel/proxmox-boot-uuids"
_GRUB_CFGS = ("boot/grub/grub.cfg", "boot/grub2/grub.cfg")
_ENTRY_DIRS = ("boot/loader/entries", "efi/loader/entries", "boot/efi/loader/entries")
_BIN_DIRS = ("usr/sbin", "sbin", "usr/bin", "bin")


@dataclass(frozen=True)
class BootLoader:
    """kind: "grub", "grubby", "proxmox", "systemd-boot" or "unknown".
    config: the root-relative file whose words become the kernel command line (None for grubby,
    whose edit is a command, and for unknown). regenerate: the argv to run after editing the file
    (empty when none is needed). found: what the detection saw, as evidence lines."""
    kind: str
    config: str | None = None
    regenerate: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    entries: tuple[str, ...] = ()  # systemd-boot: the entry files of the running kernel

    @property
    def known(self) -> bool:
        return self.kind != "unknown"

    def describe(self) -> str:
        where = f" (/{self.config})" if self.config else ""
        return {"grub": "GRUB", "grubby": "grubby (BLS entries)", "proxmox": "Proxmox systemd-boot",
                "systemd-boot": "systemd-boot", "unknown": "an unknown boot loader"}[self.kind] + where

    def commands(self, add: list[str], remove: list[str]) -> tuple[str, ...]:
        """The equivalent shell commands of adding/removing command-line words (display only)."""
        if self.kind == "grubby":
            out = []
            if add:
                out.append(f"grubby --update-kernel=ALL --args={shlex.quote(' '.join(add))}")
            if remove:
                out.append(f"grubby --update-kernel=ALL --remove-args={shlex.quote(' '.join(remove))}")
            return tuple(out)
        if self.kind == "unknown":
            return ()
        what = " ".join([f"+{w}" for w in add] + [f"-{w}" for w in remove])
        files = [f"/{e}" for e in self.entries] if self.kind == "systemd-boot" else [f"/{self.config}"]
        edit = (f"edit {' '.join(files)}: {GRUB_VAR} {what}" if self.kind == "grub"
                else f"edit {' '.join(files)}: options {what}")
        return (edit,) + ((" ".join(self.regenerate),) if self.regenerate else ())


def _program(root: Root, name: str) -> str | None:
    for d in _BIN_DIRS:
        if root.exists(f"{d}/{name}"):
            return f"/{d}/{name}"
    return None


def detect(root: Root) -> BootLoader:
    """The boot loader the host at `root` uses (see the module doc)."""
    if root.exists(PROXMOX_CMDLINE) and root.exists(PROXMOX_UUIDS):
        return BootLoader("proxmox", PROXMOX_CMDLINE, ("proxmox-boot-tool", "refresh"),
                          (f"/{PROXMOX_CMDLINE}", f"/{PROXMOX_UUIDS}"))
    entry_dirs = [d for d in _ENTRY_DIRS if root.isdir(d) and any(
        n.endswith(".conf") for n in root.listdir(d))]
    grubby = _program(root, "grubby")
    if grubby and entry_dirs:
        return BootLoader("grubby", None, (), (grubby, f"/{entry_dirs[0]}"))
    cfg = next((c for c in _GRUB_CFGS if root.exists(c)), None)
    if root.exists(GRUB_DEFAULT) and cfg:
        update = _program(root, "update-grub")
        if update:
            regen: tuple[str, ...] = ("update-grub",)
        elif cfg.startswith("boot/grub2"):
            regen = ("grub2-mkconfig", "-o", f"/{cfg}")
        else:
            regen = ("grub-mkconfig", "-o", f"/{cfg}")
        return BootLoader("grub", GRUB_DEFAULT, regen,
                          (f"/{GRUB_DEFAULT}", f"/{cfg}") + ((update,) if update else ()))
    if entry_dirs:
        release = root.read("proc/sys/kernel/osrelease") or ""
        entries = []
        for d in entry_dirs:
            for n in sorted(root.listdir(d)):
                if n.endswith(".conf") and release and release in (root.read(f"{d}/{n}") or ""):
                    entries.append(f"{d}/{n}")
        if entries:
            return BootLoader("systemd-boot", entries[0], (), tuple(f"/{e}" for e in entries), tuple(entries))
    seen = tuple(f"/{p}" for p in (GRUB_DEFAULT, *_GRUB_CFGS, PROXMOX_CMDLINE, *_ENTRY_DIRS) if root.exists(p))
    return BootLoader("unknown", None, (), seen)


# -- pure text helpers (shared by the checks and the fix plans) -------------------------------------

def grub_value(text: str, var: str = GRUB_VAR) -> str | None:
    """The value of `var` after sourcing `text` alone (console/shell_assign.py), None when it cannot be
    known. The host's command line comes from grub_cmdline (grub.d snippets included)."""
    data = text.encode("utf-8", "surrogateescape")
    value = source_all([Source(f"/{GRUB_DEFAULT}", data)]).value(var)
    return None if value is None else value.encode("latin-1").decode("utf-8", "replace")


def set_grub_value(text: str, value: str, var: str = GRUB_VAR) -> str:
    """`text` with the assignment of `var` that counts given `value` (ShellEditError when unsafe)."""
    data = text.encode("utf-8", "surrogateescape")
    new = shell_edit([Source(f"/{GRUB_DEFAULT}", data)], {var: value.encode("utf-8").decode("latin-1")})[0]
    return new.decode("utf-8", "surrogateescape")


def grub_cmdline(root: Root) -> GrubCmdline | None:
    """GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT after sourcing /etc/default/grub and its grub.d
    snippets (None when /etc/default/grub is absent)."""
    sources = grub_sources(root)
    return None if sources is None else GrubCmdline.read(sources)


def entry_options(text: str) -> str | None:
    """The `options` line of a systemd-boot entry (words joined), None when it has none."""
    for line in text.splitlines():
        words = line.split(None, 1)
        if words and words[0] == "options":
            return words[1].strip() if len(words) > 1 else ""
    return None


def set_entry_options(text: str, value: str) -> str:
    """`text` with its `options` line set to `value` (appended when there is none)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        words = line.split(None, 1)
        if words and words[0] == "options":
            end = line[len(line.rstrip("\r\n")):]
            lines[i] = f"options {value}{end or chr(10)}"
            return "".join(lines)
    sep = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{sep}options {value}\n"


def loader_cmdline(root: Root, loader: BootLoader) -> str | None:
    """The command-line words the boot loader's config adds (what the next boot gets, beyond the
    kernel image and root words), None when that cannot be read (grubby/unknown)."""
    if loader.config is None:
        return None
    if loader.kind == "grub":
        grub = grub_cmdline(root)
        words = None if grub is None else grub.words
        return None if words is None else " ".join(words)
    text = root.read(loader.config)
    if text is None:
        return None
    if loader.kind == "systemd-boot":
        return entry_options(text) or ""
    return " ".join(text.split())
