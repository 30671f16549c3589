"""The demo host's write seams (the `HostWrites` factory of console/host_seams.py): a simulated kernel
and a simulated driverctl over the generated root. console/seams.py puts it on the demo's Seams; the
real host's seams are console/host_programs.py's `ThisMachine` (`Kernel`, `Commands`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a change is made: every demo host gets these seams, few act
    from nodeconsole.console.demo.commands import DemoCommands
    from nodeconsole.console.demo.kernel import SimulatedKernel
    from nodeconsole.console.root import Root


class SimulatedWrites:
    """A fresh simulated kernel (its own write log and failure rules) for every host built on it."""

    def kernel(self, root: Root) -> SimulatedKernel:
        from nodeconsole.console.demo.kernel import SimulatedKernel

        return SimulatedKernel(root)

    def commands(self, root: Root) -> DemoCommands:
        from nodeconsole.console.demo.commands import DemoCommands

        return DemoCommands(root)
