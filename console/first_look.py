"""The console's first look at the host, started before the UI library is even imported.

Starting the console is mostly importing Textual and laying the screen out; the host's first,
sysfs-only snapshot (the GPUs, the topology, IOMMU groups) takes a fraction of that. Started on its own
thread at launch, it is ready by the time the screen is, so the first frame the admin sees already lists
the GPUs instead of an empty table followed by a second, full repaint. The UI waits for it a bounded
moment only; a host whose sysfs is slow gets the empty frame and the GPUs a moment later, as before.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from nodeconsole.console.collector import Collector
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.seams import Seams


class FirstLook:
    def __init__(self, seams_factory: Callable[[], Seams]) -> None:
        self.seams: Seams | None = None
        self.collector: Collector | None = None
        self.snapshot: HostSnapshot | None = None  # sysfs only (sources other than sysfs PENDING)
        self.error: Exception | None = None
        self.factory = seams_factory
        self._done = threading.Event()
        threading.Thread(target=self._run, name="first-look", daemon=True).start()

    def _run(self) -> None:
        try:
            self.seams = self.factory()
            self.collector = Collector(self.seams)
            self.snapshot = self.collector.collect(partial=True)
        except Exception as exc:  # the first poll reports it, as it would have
            self.error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True when the first look is over (done or failed) within `timeout` seconds."""
        return self._done.wait(timeout)
