"""The files the doctor reads, each read once per run (a small memo over the root seam), and the parsers
of the configuration formats the checks look into (modules-load.d, modprobe.d, sysctl.d, systemd's
system.conf). Pure text in, values out: nothing here writes or runs anything.

A file that cannot be read (absent, not a regular file, permission denied) reads as None; `missing()`
says why in the words a skipped check uses ("the tree has no /etc").
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from nodeconsole.console.cpulist import parse_cpulist
from nodeconsole.console.doctor.model import Evidence
from nodeconsole.console.root import Root

CLIP = 200  # evidence values are clipped to this many characters

# Where each configuration kind lives, in the order the tools read them (later files override earlier
# ones of the same name; /etc wins over /run over /usr/lib).
MODULES_LOAD_DIRS = ("etc/modules-load.d", "run/modules-load.d", "usr/lib/modules-load.d", "lib/modules-load.d")
MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d")
SYSCTL_DIRS = ("etc/sysctl.d", "run/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d")
SYSTEMD_CONF_DIRS = ("etc/systemd/system.conf.d", "run/systemd/system.conf.d", "usr/lib/systemd/system.conf.d")


def clip(value: str, limit: int = CLIP) -> str:
    value = " ".join(value.split()) if "\n" in value else value
    return value if len(value) <= limit else value[:limit - 1] + "…"


def evidence(rel: str, value: str) -> Evidence:
    """Evidence for a root-relative path, shown as the host path."""
    return Evidence("/" + rel.strip("/"), clip(value))


class HostFiles:
    """Reads below `root`, memoised: a path is read at most once per doctor run."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self._text: dict[str, str | None] = {}
        self._bytes: dict[tuple[str, int], bytes | None] = {}
        self._exists: dict[str, bool] = {}
        self._dirs: dict[str, list[str]] = {}
        self._isdir: dict[str, bool] = {}
        self.denied: set[str] = set()  # paths whose read was refused (permission)

    def read(self, rel: str) -> str | None:
        """Text content, stripped; None when absent or unreadable."""
        if rel not in self._text:
            try:
                self._text[rel] = self.root.read(rel)
            except PermissionError:
                self.denied.add(rel)
                self._text[rel] = None
        return self._text[rel]

    def read_bytes(self, rel: str, limit: int = 4096) -> bytes | None:
        key = (rel, limit)
        if key not in self._bytes:
            try:
                self._bytes[key] = self.root.read_bytes(rel, limit)
            except PermissionError:
                self.denied.add(rel)
                self._bytes[key] = None
        return self._bytes[key]

    def exists(self, rel: str) -> bool:
        if rel not in self._exists:
            self._exists[rel] = self.root.exists(rel)
        return self._exists[rel]

    def isdir(self, rel: str) -> bool:
        if rel not in self._isdir:
            self._isdir[rel] = self.root.isdir(rel)
        return self._isdir[rel]

    def listdir(self, rel: str) -> list[str]:
        if rel not in self._dirs:
            try:
                self._dirs[rel] = self.root.listdir(rel)
            except PermissionError:
                self.denied.add(rel)
                self._dirs[rel] = []
        return self._dirs[rel]

    def missing(self, rel: str) -> str:
        """Why `rel` could not be read, naming the highest folder the tree lacks: "the tree has no /etc",
        "/etc/modprobe.d is absent", "permission denied reading /etc/…"."""
        rel = rel.strip("/")
        if rel in self.denied:
            return f"permission denied reading /{rel}"
        parts = rel.split("/")
        for i in range(1, len(parts)):
            head = "/".join(parts[:i])
            if not self.exists(head):
                return f"the tree has no /{head}"
        return f"/{rel} is absent"

    def has_tree(self, rel: str) -> bool:
        """True when the directory `rel` exists (e.g. "etc", "dev", "sys/module")."""
        return self.isdir(rel)

    # -- derived reads ------------------------------------------------------------------------------
    def conf_files(self, dirs: Iterable[str], suffix: str = ".conf") -> list[tuple[str, str]]:
        """(path, text) of every `*suffix` file in `dirs`, a name in an earlier folder hiding the same name
        in a later one, in the order of their names (how systemd and kmod read drop-in folders)."""
        chosen: dict[str, str] = {}
        for d in dirs:
            for name in self.listdir(d):
                if name.endswith(suffix) and name not in chosen:
                    chosen[name] = f"{d}/{name}"
        out = []
        for name in sorted(chosen):
            text = self.read(chosen[name])
            if text is not None:
                out.append((chosen[name], text))
        return out

    def denied_under(self, *places: str) -> str | None:
        """"permission denied reading /a, /b" when a read of a path in `places` (files or folders) was
        refused, else None: what such a file says is unknown, so a check must not conclude it is not set."""
        hits = sorted(p for p in self.denied if any(p == d or p.startswith(d + "/") for d in places))
        return f"permission denied reading {', '.join('/' + p for p in hits[:3])}" if hits else None

    def cmdline(self) -> list[str] | None:
        """The running kernel's command line words; None when /proc/cmdline cannot be read."""
        text = self.read("proc/cmdline")
        return None if text is None else text.split()

    def loaded(self, module: str) -> bool:
        """Whether /sys/module/<module> exists (loaded, or built in with parameters)."""
        return self.exists(f"sys/module/{module.replace('-', '_')}")


# -- configuration formats -------------------------------------------------------------------------

def _logical_lines(text: str) -> list[str]:
    """Lines without comments, backslash continuations joined (modprobe.d's syntax)."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line and not line.startswith(("#", ";")):
            out.append(line)
    if pending.strip():
        out.append(pending.strip())
    return out


def module_name(word: str) -> str:
    return word.replace("-", "_")


def modules_load_names(text: str) -> list[str]:
    """Module names a modules-load.d file (or /etc/modules, /etc/initramfs-tools/modules) loads: the
    first word of each line (the rest are module parameters in the initramfs list)."""
    return [module_name(line.split()[0]) for line in _logical_lines(text)]


def modprobe_lines(text: str) -> list[list[str]]:
    """The commands of a modprobe.d file, as word lists ("blacklist nouveau" → ["blacklist", "nouveau"])."""
    return [line.split() for line in _logical_lines(text)]


_DRACUT = re.compile(r'^\s*(add_drivers|force_drivers|drivers)\s*\+?=\s*["\']?([^"\']*)["\']?\s*$')


def dracut_drivers(text: str) -> list[str]:
    """Modules a dracut.conf.d file puts into the initramfs (add_drivers / force_drivers / drivers)."""
    out: list[str] = []
    for line in _logical_lines(text):
        m = _DRACUT.match(line)
        if m:
            out += [module_name(w) for w in m.group(2).split()]
    return out


def sysctl_value(files: list[tuple[str, str]], key: str) -> tuple[str, str] | None:
    """(path, value) of the last assignment of `key` ("kernel.numa_balancing" or with slashes) in
    sysctl files read in order; None when none sets it."""
    want = key.replace("/", ".")
    found = None
    for path, text in files:
        for line in _logical_lines(text):
            name, sep, value = line.lstrip("-").partition("=")
            if sep and name.strip().replace("/", ".") == want:
                found = (path, value.strip())
    return found


def systemd_setting(files: list[tuple[str, str]], section: str, key: str) -> tuple[str, str] | None:
    """(path, value) of the last `key=` in `[section]` across systemd configuration files read in order
    (an empty assignment resets: its value is ""); None when none sets it."""
    found = None
    for path, text in files:
        current = ""
        for line in _logical_lines(text):
            if line.startswith("[") and line.endswith("]"):
                current = line[1:-1].strip()
                continue
            name, sep, value = line.partition("=")
            if sep and current == section and name.strip() == key:
                found = (path, value.strip())
    return found


def cpu_set(text: str) -> tuple[int, ...] | None:
    """CPUs of a list written with commas or spaces ("0,64 32-33"); None when it does not parse."""
    words = [w for w in re.split(r"[\s,]+", text.strip()) if w]
    try:
        return tuple(sorted(set(parse_cpulist(",".join(words))))) if words else ()
    except ValueError:
        return None


def kernel_cpu_list(value: str) -> tuple[int, ...] | None:
    """The CPUs of isolcpus=/nohz_full= (isolcpus may start with flags: "managed_irq,domain,2-63")."""
    words = [w for w in value.split(",") if w and not w[0].isalpha()]
    return cpu_set(",".join(words))


def meminfo_kib(text: str | None, field: str) -> int | None:
    """A "Field:  N kB" value of /proc/meminfo, None when absent."""
    if not text:
        return None
    m = re.search(rf"^{re.escape(field)}:\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else None
