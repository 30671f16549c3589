"""Sourcing GRUB's files in bash, as grub-mkconfig does (hermetic: an empty environment, the C locale,
a HOME that an expansion would show): the effective command line and every GRUB_* variable."""
from __future__ import annotations

import subprocess
from pathlib import Path

from nodeconsole.console.grub_config import kernel_words

BASH = "/bin/bash"  # always present on the Debian hosts this runs on
_SCRIPT = ('. "$1"; for f in "$2"/*.cfg; do [ -e "$f" ] && . "$f"; done; '
           'printf "%s\\n" "$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"; set')


def source_grub(grub: Path, grub_d: Path) -> tuple[list[str], dict[str, str], bytes]:
    """(the kernel words, the other GRUB_* variables as `set` prints them, bash's stderr)."""
    out = subprocess.run(["/usr/bin/env", "-i", "LC_ALL=C", "HOME=/home/x-expanded", "PATH=/usr/bin:/bin",
                          BASH, "--norc", "--noprofile", "-c", _SCRIPT, "grub", str(grub), str(grub_d)],
                         capture_output=True, timeout=30, check=False)
    first, _, rest = out.stdout.partition(b"\n")
    others = {}
    for line in rest.decode("latin-1").splitlines():
        name, eq, value = line.partition("=")
        if eq and name.startswith("GRUB_") and name not in ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT"):
            others[name] = value
    return kernel_words(first.decode("latin-1")), others, out.stderr
