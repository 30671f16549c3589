"""Run the console on an already generated host directory (used by run.py for the CPU table)."""
from __future__ import annotations

import sys

from console.app import NodeConsoleApp
from console.demo.generator import GeneratedHost
from console.demo.nvml_sim import SimulatedNvml
from console.root import Root
from console.seams import Seams

if __name__ == "__main__":
    host = GeneratedHost.at(sys.argv[1])
    root = Root(host.root)
    seams = Seams(root=root, libvirt_uri=host.libvirt_uri,
                  nvml_lib=SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True))
    NodeConsoleApp(seams, interval=1.0).run()
