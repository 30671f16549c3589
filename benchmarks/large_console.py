"""Run the console on an already generated host directory (used by run.py for the CPU table), the way
the `nodeconsole` command runs it: the cyclic garbage collector paused until the first frame and tuned
from then on (screens/launch.py, screens/app.py resume_gc), the app run by run_app."""
from __future__ import annotations

import gc
import sys

if __name__ == "__main__":
    gc.disable()  # as screens/launch.py does before the console's imports
    from nodeconsole.console.demo.generator import GeneratedHost
    from nodeconsole.console.demo.nvml_sim import SimulatedNvml
    from nodeconsole.console.root import Root
    from nodeconsole.console.seams import Seams
    from nodeconsole.screens.app import run_app

    host = GeneratedHost.at(sys.argv[1])
    root = Root(host.root)
    seams = Seams(root=root, libvirt_uri=host.libvirt_uri,
                  nvml_lib=SimulatedNvml.from_file(host.nvml_state, root=root, privileged=True))
    sys.exit(run_app(seams, interval=1.0))
