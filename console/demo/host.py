"""Where a generated host's parts lie (light: no generator code, so the console's start-up can find
the demo host without importing the generator)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT, LIBVIRT, NVML = "root", "libvirt.xml", "nvml.json"


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
