"""The NCCL screen's GPU choice (`P`): a checkbox list of the host's GPUs with their state, as the CLI's
`--gpus` takes them. Busy and unhealthy GPUs can be chosen (the preflight then warns); GPUs the host
cannot drive (vfio-pci, MIG, vGPU, no driver) are listed but cannot be."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, SelectionList, Static
from textual.widgets.selection_list import Selection

from nodeconsole.actions.nccl.pick import GpuCondition
from nodeconsole.console.hosttext import visible

STATE_STYLE = {"drained": "bold red", "idle": "green", "busy": "yellow", "unhealthy": "bold red", "busy, unhealthy": "bold red",
               "unusable": "dim"}


@dataclass(frozen=True)
class GpuChoice:
    """What the admin chose: console indices, or None for the automatic pick."""
    indices: tuple[int, ...] | None


def gpu_prompt(c: GpuCondition) -> Text:
    g = c.gpu
    t = Text()
    t.append(f"GPU {g.index} {g.address} ")
    t.append(visible(g.name), style="bold")
    t.append(f"  {c.state}", style=STATE_STYLE.get(c.state, ""))
    if not c.ok:
        t.append(f": {visible(c.describe())}", style="dim" if c.unusable else "")
    return t


class GpuPickModal(ModalScreen[GpuChoice | None]):
    """Space toggles a GPU, Enter uses the ticked ones, `a` returns to the automatic pick, Esc keeps
    what was there."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("enter", "use", "Use", priority=True),
                Binding("a", "automatic", "Automatic")]
    DEFAULT_CSS = """
    GpuPickModal { align: center middle; }
    #nccl-pick { width: 90%; max-width: 120; height: auto; max-height: 90%; border: round $primary;
                 background: $surface; padding: 0 1; }
    #nccl-pick-list { height: auto; max-height: 12; }
    #nccl-pick-buttons { height: 1; margin-top: 1; }
    #nccl-pick-buttons Button { margin-right: 1; }
    """

    def __init__(self, conditions: Sequence[GpuCondition], chosen: Sequence[int], automatic: bool) -> None:
        super().__init__()
        self.conditions = tuple(conditions)
        self.chosen = tuple(chosen)
        self.automatic = automatic

    def compose(self) -> ComposeResult:
        now = "the automatic pick (idle, healthy GPUs)" if self.automatic else "your choice"
        with Vertical(id="nccl-pick"):
            yield Static(Text(f"GPUs for the NCCL check — ticked: {now}", style="bold"))
            yield SelectionList[int](*(Selection(gpu_prompt(c), c.gpu.index, c.gpu.index in self.chosen,
                                                 disabled=bool(c.unusable))
                                       for c in self.conditions), id="nccl-pick-list")
            yield Static(Text("space ticks a GPU · Enter uses the ticked ones · a: automatic pick · Esc: keep "
                              "as it was. Busy or unhealthy GPUs get a warning in the preflight; GPUs on "
                              "vfio-pci, MIG or vGPU are tested inside their VM (nccl check --vm).",
                              style="dim"), id="nccl-pick-help")
            with Horizontal(id="nccl-pick-buttons"):
                yield Button("Use (Enter)", id="nccl-pick-use", variant="primary", compact=True)
                yield Button("Automatic (a)", id="nccl-pick-auto", compact=True)
                yield Button("Cancel (Esc)", id="nccl-pick-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#nccl-pick-list", SelectionList).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"nccl-pick-use": self.action_use, "nccl-pick-auto": self.action_automatic,
         "nccl-pick-cancel": self.action_cancel}[event.button.id or "nccl-pick-cancel"]()

    @property
    def ticked(self) -> tuple[int, ...]:
        picked = set(self.query_one("#nccl-pick-list", SelectionList).selected)
        return tuple(c.gpu.index for c in self.conditions if c.gpu.index in picked)

    def action_use(self) -> None:
        ticked = self.ticked
        if not ticked:
            self.notify("tick at least one GPU (space), or a for the automatic pick", severity="warning")
            return
        self.dismiss(GpuChoice(ticked))

    def action_automatic(self) -> None:
        self.dismiss(GpuChoice(None))

    def action_cancel(self) -> None:
        self.dismiss(None)
