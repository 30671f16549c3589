"""One registry of commands: it drives the key bindings, the Footer, the help screen and the command
palette, so they can never disagree."""
from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Command:
    key: str
    action: str  # Textual action string on the app
    title: str
    help: str
    group: str = "General"
    footer: bool = True
    global_key: bool = True  # False: the key belongs to one screen; the app lists it in help and palette only
    # The screens (modes) the command works on; empty: every screen. Elsewhere its key is inactive and
    # the footer leaves it out (the palette still runs it, and it says where it works).
    screens: tuple[str, ...] = ()
    # Handled as the key arrives, before the keys already read after it are passed on: `/` then moves the
    # focus to the filter line, so `/train` typed in one go filters by "train" (the app declines it while
    # a text field has the focus, so `/` can be typed there).
    priority: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("1", "show('overview')", "Overview", "GPUs, VMs and the most important problems", "Screens", footer=False),
    Command("2", "show('topology')", "Topology", "PCIe tree per NUMA node and the GPU/NIC matrix", "Screens", footer=False),
    Command("3", "show('iommu')", "IOMMU", "IOMMU groups and their passthrough verdict", "Screens", footer=False),
    Command("4", "show('gpus')", "GPUs", "Ownership, MIG slices, vGPU, processes, health", "Screens", footer=False),
    Command("5", "show('vms')", "VMs", "VM load, vCPU pins against host CPUs, hostdevs", "Screens", footer=False),
    Command("6", "show('nccl')", "NCCL", "Quick NCCL checks: preflight, run, verdict", "Screens", footer=False),
    Command("7", "show('setup')", "Setup", "Host readiness (doctor) and the guided first-time setup", "Screens",
            footer=False),
    Command("8", "show('changes')", "Changes", "The audit log of changes, newest first; undo and redo them",
            "Screens", footer=False),
    Command("9", "show('events')", "Events", "GPU events (Xid, AER) with their VMs, applied changes, source losses",
            "Screens", footer=False),
    Command("slash", "filter", "Filter", "Filter the rows of the current table", "Table", priority=True),
    Command("enter", "details", "Details", "Open the details of the selected row", "Table", footer=False),
    Command("a", "passthrough", "Passthrough", "Plan giving the selected GPU to vfio-pci, or to a VM (asks which; "
            "with its NIC: a free VF beside the GPU) (GPUs screen)", "Actions", screens=("gpus",)),
    Command("R", "release", "Release", "Plan giving the selected GPU back to the host (GPUs screen)",
            "Actions", screens=("gpus",)),
    Command("D", "drain", "Drain", "Drain the selected GPU (asks why) or lift its drain (GPUs screen)",
            "Actions", footer=False, screens=("gpus",)),
    Command("X", "reset_gpu", "Reset", "Plan resetting the selected GPU: the VMs holding it are stopped and started "
            "again around it (GPUs screen)", "Actions", footer=False, screens=("gpus",)),
    Command("m", "mig_edit", "MIG", "Edit the MIG layout of the selected GPU (GPUs screen)", "Actions",
            screens=("gpus",)),
    Command("n", "pin", "Pin", "Plan NUMA-aware pinning for the selected VM (VMs screen)", "Actions",
            screens=("vms",)),
    Command("P", "prepare", "Prepare", "Plan readying the selected VM for training: a form (GPU count, NIC VFs, "
            "memory factor) with the recommended GPUs, node, vCPUs, memory and hugepages, then the plan (VMs "
            "screen)", "Actions", screens=("vms",)),
    Command("N", "pin_all", "Pin all", "One plan pinning every unpinned GPU VM", "Actions", footer=False),
    Command("u", "undo", "Undo", "Plan rolling back the latest change (Changes screen: the "
            "selected one)", "Actions", footer=False),
    Command("r", "redo", "Redo", "Plan putting back the change the latest undo reverted (Changes screen: the "
            "selected one)", "Actions", footer=False, global_key=False),
    Command("r", "nccl('run_check')", "Run check", "Run the NCCL check (NCCL screen)", "Actions", footer=False,
            screens=("nccl",)),
    Command("P", "nccl('pick_gpus')", "NCCL GPUs", "Choose the GPUs of the next NCCL check (NCCL screen)",
            "Actions", footer=False, global_key=False, screens=("nccl",)),
    Command("c", "nccl('cancel_check')", "Cancel check", "Cancel a running NCCL check, killing its processes "
            "(NCCL screen)", "Actions", footer=False, screens=("nccl",)),
    Command("p", "toggle_pause", "Pause", "Pause or resume the live refresh"),
    Command("ctrl+l", "redraw", "Redraw", "Write the whole screen again (after another program wrote over it)",
            footer=False),
    Command("t", "cycle_theme", "Theme", "Switch to the next nodeconsole theme", footer=False),
    Command("question_mark", "help", "Help", "This list of keys"),
    Command("q", "quit", "Quit", "Leave nodeconsole"),
)

KEY_LABELS = {"slash": "/", "question_mark": "?", "enter": "Enter", "ctrl+l": "^L"}


def where(action: str) -> tuple[str, ...]:
    """The screens an action string of the registry works on (empty: every screen)."""
    return next((c.screens for c in COMMANDS if c.action == action), ())


def bindings() -> list[Binding]:
    # Enter is handled by the tables themselves (row selected); it is listed for help only.
    return [Binding(c.key, c.action, c.title, show=c.footer, priority=c.priority) for c in COMMANDS
            if c.key != "enter" and c.global_key]


def key_label(c: Command) -> str:
    return KEY_LABELS.get(c.key, c.key)
