"""nvitop (a real NVML client) on the demo host's simulated GPUs, for the console benchmark's
comparison: the simulated library is put underneath pynvml, as the tests do, then nvitop runs as usual.

    python -m benchmarks.nvitop_demo STATE_DIR [nvitop args]
"""
from __future__ import annotations

import sys

from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.demo.state import ensure_demo
from nodeconsole.console.root import Root

if __name__ == "__main__":
    host = ensure_demo(sys.argv[1])
    SimulatedNvml.from_file(host.nvml_state, root=Root(host.root)).install()
    from nvitop import cli

    sys.argv = ["nvitop", *sys.argv[2:]]
    sys.exit(cli.main())
