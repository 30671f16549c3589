"""The GPUs screen's passthrough (`a`): which VM gets the GPU. The first choice binds it to vfio-pci only
(what `a` did before); then every defined VM, shut-off ones first (they take it now), then paused and
running ones (they get it at their next start: the plan says so), each with its state and what it
already holds. "with its NIC" adds the free NIC VF beside the GPU (`passthrough --vm VM --with-nic`).
Enter hands back the request (actions/session.py's Passthrough); the app plans it, shows the plan and
applies it as every change. Esc: None, nothing planned.

The choices are made from the snapshot the app already holds (`vm_choices`, pure); the modal reads
nothing itself.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, OptionList, Static
from textual.widgets.option_list import Option

from nodeconsole.actions.session import Passthrough
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import HostSnapshot

# the order the VMs are offered in: shut off first (they take the GPU now), then the ones that get it later
STATE_ORDER = {"shut off": 0, "paused": 1, "running": 2}
STATE_STYLE = {"shut off": "green", "paused": "yellow", "running": "yellow"}


@dataclass(frozen=True)
class VmChoice:
    name: str
    state: str
    note: str = ""  # what it already holds


def vm_choices(snap: HostSnapshot, address: str) -> list[VmChoice]:
    """Every defined VM as a choice for the GPU at `address`: shut off first, then paused, running and
    any other state, by name within each; a VM whose config already names the GPU says so."""
    gpu_names = {g.address: g.index for g in snap.gpus}
    out = []
    for v in snap.vms:
        held = [h.address for h in v.hostdevs if h.address]
        if address in held:
            note = "its config already has this GPU"
        else:
            gpus = [f"GPU {gpu_names[a]}" for a in held if a in gpu_names]
            note = "holds " + ", ".join(gpus) if gpus else ""
        out.append(VmChoice(v.name, v.state, note))
    return sorted(out, key=lambda c: (STATE_ORDER.get(c.state, 3), c.name))


NAME_WIDTH = 16  # names up to this long line their states up


def choice_prompt(c: VmChoice) -> Text:
    t = Text("VM ")
    name = visible(c.name)
    t.append(name, style="bold")
    t.append(" " * max(2, NAME_WIDTH + 2 - len(name)))
    state = visible(c.state)
    t.append(state, style=STATE_STYLE.get(c.state, "dim"))
    if c.note:
        t.append(" " * max(2, 10 - len(state)))
        t.append(visible(c.note), style="dim")
    return t


class PassthroughPickModal(ModalScreen[Passthrough | None]):
    """Up/Down picks the VM, `n` (or Space on the box) toggles "with its NIC", Enter plans, Esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("enter", "use", "Plan", priority=True),
                Binding("n", "toggle_nic", "NIC")]
    DEFAULT_CSS = """
    PassthroughPickModal { align: center middle; }
    #pt-pick { width: 90%; max-width: 100; height: auto; max-height: 100%; border: round $primary;
               background: $surface; padding: 0 1; }
    #pt-pick-list { height: auto; max-height: 13; }
    #pt-pick-nic { margin-top: 1; }
    """

    def __init__(self, address: str, gpu_label: str, choices: Sequence[VmChoice]) -> None:
        super().__init__()
        self.address, self.gpu_label, self.choices = address, gpu_label, tuple(choices)

    def compose(self) -> ComposeResult:
        with Vertical(id="pt-pick"):
            yield Static(Text(f"Pass {visible(self.gpu_label)} through to…", style="bold"), id="pt-pick-title")
            # option 0 is "no VM", option i the VM choices[i - 1]
            options = [Option(Text("no VM: bind it to vfio-pci only"))]
            options += [Option(choice_prompt(c)) for c in self.choices]
            yield OptionList(*options, id="pt-pick-list")
            yield Checkbox("with its NIC (a free VF beside the GPU)  n", id="pt-pick-nic", compact=True,
                           disabled=True)
            yield Static(Text("A paused or running VM gets it at its next start. Enter: see the plan · "
                              "Esc: cancel · n: NIC on/off (with a VM)", style="dim"), id="pt-pick-help")

    def on_mount(self) -> None:
        self.query_one("#pt-pick-list", OptionList).focus()

    @property
    def vm(self) -> str | None:
        """The VM under the cursor (None: no VM)."""
        i = self.query_one("#pt-pick-list", OptionList).highlighted
        return self.choices[i - 1].name if i else None

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.query_one("#pt-pick-nic", Checkbox).disabled = not event.option_index

    def action_toggle_nic(self) -> None:
        box = self.query_one("#pt-pick-nic", Checkbox)
        if box.disabled:
            self.notify("the NIC goes to a VM: pick one first", severity="warning", timeout=3)
            return
        box.toggle()

    def action_use(self) -> None:
        vm = self.vm
        nic = vm is not None and self.query_one("#pt-pick-nic", Checkbox).value
        self.dismiss(Passthrough(self.address, vm=vm, with_nic=nic))

    def action_cancel(self) -> None:
        self.dismiss(None)
