"""The messages between the app and its screens: the app hands each screen the latest host view
(`SnapshotUpdated`), a screen tells the app what is selected (`GpuSelected`, `VmSelected`), which
change to plan (`PlanChange`) and where to go (`ShowRow`). Screens never read the app's state or call
its methods, and the app never looks into a screen's widgets."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from nodeconsole.actions.session import Request
    from nodeconsole.console.model import HostSnapshot
    from nodeconsole.console.seams import Seams


@dataclass(frozen=True)
class HostView:
    """What a screen renders: the snapshot (None before the first poll), the per-VM CPU % history,
    the refresh state, the host's seams (None until the first poll has opened the host) and how many
    changes were applied from this console (a screen showing what a change alters reads it again)."""
    snapshot: HostSnapshot | None
    history: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)
    paused: bool = False
    note: str = ""
    seams: Seams | None = None
    changes: int = 0


class SnapshotUpdated(Message, bubble=False):
    """The app → a screen: render this view (and keep it: it is all the screen knows of the host)."""

    def __init__(self, view: HostView) -> None:
        super().__init__()
        self.view = view


class Selected(Message):
    """A screen → the app: the row under the selection table's cursor (None: nothing is selected)."""

    def __init__(self, key: str | None) -> None:
        super().__init__()
        self.key = key


class GpuSelected(Selected):
    """The GPU under the cursor, by PCI address."""

    @property
    def address(self) -> str | None:
        return self.key


class VmSelected(Selected):
    """The VM under the cursor, by name."""

    @property
    def name(self) -> str | None:
        return self.key


class PlanChange(Message):
    """A screen → the app: plan this change (off the UI thread: planning re-reads the host), show the plan
    and apply it once the admin says yes, as every change made from the console is."""

    def __init__(self, request: Request) -> None:
        super().__init__()
        self.request = request


class ShowRow(Message):
    """A screen → the app: switch to the screen `mode` and put its cursor on the row `key` (a doctor
    check on the Setup screen, a GPU or a VM on theirs)."""

    def __init__(self, mode: str, key: str | None) -> None:
        super().__init__()
        self.mode = mode
        self.key = key
