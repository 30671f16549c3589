"""Run the console on an already generated host directory (used by run.py for the CPU table)."""
from __future__ import annotations

import sys

from nodeconsole.console.demo.generator import GeneratedHost
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams
from nodeconsole.screens.app import NodeConsoleApp

if __name__ == "__main__":
    host = GeneratedHost.at(sys.argv[1])
    root = Root(host.root)
    seams = Seams(root=root, libvirt_uri=host.libvirt_uri,
                  nvml_lib=SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True))
    NodeConsoleApp(seams, interval=1.0).run()
