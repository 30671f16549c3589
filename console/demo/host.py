"""Where a generated host's parts lie (light: no generator code, so the console's start-up can find
the demo host without importing the generator)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeconsole.console.outfile import write_atomic

ROOT, LIBVIRT, NVML = "root", "libvirt.xml", "nvml.json"
STATE_FILE_MODE = 0o644  # the demo's own files; its state directory (0700) keeps them private


def write_nvml_state(path: Path, state: dict[str, Any]) -> None:
    """The one writer of nvml.json (the generator, the simulated library, the simulated
    nvidia-persistenced): whole or not at all (console/outfile.write_atomic)."""
    write_atomic(path, (json.dumps(state, indent=2) + "\n").encode("utf-8"), STATE_FILE_MODE)


@dataclass(frozen=True)
class GeneratedHost:
    root: Path  # stands for `/`: sys/, proc/, dev/vfio
    libvirt_uri: str  # test:///ABS/dest/libvirt.xml
    libvirt_xml: Path
    nvml_state: Path

    @property
    def dest(self) -> Path:
        return self.root.parent

    @classmethod
    def at(cls, dest: str | os.PathLike[str]) -> GeneratedHost:
        """The host generated earlier into `dest` (nothing is checked or written)."""
        d = Path(os.path.abspath(dest))
        return cls(d / ROOT, f"test://{d / LIBVIRT}", d / LIBVIRT, d / NVML)
