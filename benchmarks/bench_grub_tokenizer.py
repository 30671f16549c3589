"""GRUB / sh tokenizer speed on hostile lines: one 1 MiB line of each padding, sourced and edited.

    .venv/bin/python benchmarks/bench_grub_tokenizer.py [--mib 1]

Each padding fills the value of GRUB_CMDLINE_LINUX_DEFAULT (or the line around it) to --mib MiB:
blanks, letters, backslash escapes, continuations, `$x` expansions, escaped quotes, single-quoted
runs, a comment, and floods of one-character tokens. Prints the seconds to read the command line
(console/grub_config.py over console/shell_assign.py) and to compute the edit.
Target (issue 28): a 1 MiB line of any padding in under 1 s, growing linearly.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nodeconsole.console.grub_config import GrubCmdline, edit_cmdline  # noqa: E402
from nodeconsole.console.shell_assign import ShellEditError, Source  # noqa: E402

PADDINGS = {  # name → (before the padding, the padding unit, after it)
    "blanks in the value": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet', b" ", b'splash"\n'),
    "letters": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet a', b"a", b' splash"\n'),
    "escaped backslashes": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet a', b"\\\\", b' splash"\n'),
    "escaped quotes": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet a', b'\\"', b' splash"\n'),
    "continuations": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet a', b"\\\n", b' splash"\n'),
    "unquoted escapes": (b"GRUB_CMDLINE_LINUX_DEFAULT=quiet\\ a", b"\\x", b"\n"),
    "single-quoted runs": (b"GRUB_CMDLINE_LINUX_DEFAULT=quiet", b"'a'", b"\n"),
    "$x expansions": (b'GRUB_X=""\nGRUB_CMDLINE_LINUX_DEFAULT="quiet', b"$GRUB_X", b'"\n'),
    "a comment": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet" #', b"x", b"\n"),
    "blanks between words": (b"GRUB_TIMEOUT=5", b" ", b'\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'),
    "semicolons": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"', b";", b"\n"),
    "assignments joined by ;": (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"', b";A=1", b"\n"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=1.0)
    size = int(ap.parse_args().mib * (1 << 20))
    worst = 0.0
    for name, (head, unit, tail) in PADDINGS.items():
        data = head + unit * (size // len(unit)) + tail
        sources = [Source("/etc/default/grub", data)]
        t0 = time.perf_counter()
        read = GrubCmdline.read(sources)
        t1 = time.perf_counter()
        try:
            edit_cmdline(sources, ["iommu=pt"], [])
            edited = "edited"
        except ShellEditError as e:
            edited = f"refused: {str(e)[:60]}"
        t2 = time.perf_counter()
        worst = max(worst, t1 - t0)
        words = "unknown" if read.words is None else f"{len(read.words)} words"
        print(f"{name:26s} read {t1 - t0:6.3f} s  edit {t2 - t1:6.3f} s  ({words}; {edited})")
    print(f"worst read: {worst:.3f} s for {size / (1 << 20):.2f} MiB")


if __name__ == "__main__":
    main()
