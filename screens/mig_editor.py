"""The GPU screen's MIG layout editor: the current slice bar, one button per profile the GPU offers, and
the new layout drawn on a second slice bar as it is edited (or why it does not fit). "Plan…" hands the
layout back as a request (actions/session.py's MigLayout); the app plans it, shows the plan in the plan
modal and applies it, as every change.

The editor reads the host only in a thread worker, through the action session (NVML for the profiles;
the planner's fit is pure). Dismissed with a MigLayout request or None.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from nodeconsole.actions.mig_planner import Fit, Wanted, fit, format_layout
from nodeconsole.actions.session import MigLayout
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Mig, MigInstance
from nodeconsole.screens.widgets.slice_bar import slice_bar

if TYPE_CHECKING:
    from nodeconsole.actions.session import ActionSession


def button_id(profile: str) -> str:
    """A widget id for a profile's add button ("3g.40gb" → "mig-add-3g_40gb", "+me" → "_me")."""
    return "mig-add-" + re.sub(r"[^A-Za-z0-9_-]", "_", profile)


def preview_mig(result: Fit, slices: int, users: dict[int, str] | None = None) -> Mig:
    """The layout a fit would leave, as the snapshot model the slice bar draws."""
    inst = [MigInstance(e.profile, e.start, e.size, vm=(users or {}).get(e.gi_id)) for e in result.keep]
    inst += [MigInstance(c.profile.name, c.start, c.size) for c in result.create]
    return Mig(mode="enabled", pending_mode="enabled", memory_slices=slices,
               instances=tuple(sorted(inst, key=lambda i: i.start)))


class MigEditor(ModalScreen):
    """Edit one GPU's MIG layout; see the module docstring."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("backspace", "remove_last", "Remove last")]

    def __init__(self, session: Callable[[], ActionSession], address: str) -> None:
        super().__init__()
        self.session, self.address = session, address  # session(): a new ActionSession (in a worker)
        self.state: Any = None  # actions.mig_steps.MigState once read
        self.items: list[Wanted] = []
        self.result: Fit | None = None
        self.slices = 8

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="mig-editor"):
            yield Static(Text(f"MIG layout of {visible(self.address)}", style="bold"), id="mig-title")
            yield Static("reading the GPU's MIG profiles from NVML…", id="mig-current")
            yield Static("", id="mig-preview")
            yield Static("", id="mig-layout")
            yield Horizontal(id="mig-profiles")
            with Horizontal(id="mig-edit-buttons"):
                yield Button("Remove last", id="mig-undo")
                yield Button("Clear", id="mig-clear")
                yield Button("Current", id="mig-current-layout")
                yield Button("MIG off…", id="mig-off", disabled=True)
            with Horizontal(id="mig-buttons"):
                yield Button("Cancel", id="mig-cancel", variant="primary")
                yield Button("Plan…", id="mig-plan", variant="warning", disabled=True)

    def on_mount(self) -> None:
        self.query_one("#mig-cancel", Button).focus()
        self._load()

    # -- reading (thread workers) ---------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="mig-editor", exit_on_error=False)
    def _load(self) -> None:
        try:
            st = self.session().mig_state(self.address)
        except Exception as exc:
            self.app.call_from_thread(self._failed, str(exc))
            return
        self.app.call_from_thread(self._loaded, st)

    def _failed(self, why: str) -> None:
        self.query_one("#mig-current", Static).update(Text(f"cannot edit: {visible(why)}", style="bold red"))

    def _loaded(self, st: Any) -> None:
        self.state = st
        self.slices = max((s + n for p in st.profiles for s, n in p.placements), default=8)
        mode = {0: "off", 1: "on"}
        head = Text(f"MIG mode {mode[st.current]}" + ("" if st.pending == st.current else
                                                      f" (pending {mode[st.pending]})") + "   now:\n")
        now = Mig(mode="enabled", pending_mode="enabled", memory_slices=self.slices,
                  instances=tuple(MigInstance(e.profile, e.start, e.size,
                                              vm=", ".join(e.users) or None) for e in st.instances))
        head.append_text(slice_bar(now))
        self.query_one("#mig-current", Static).update(head)
        row = self.query_one("#mig-profiles", Horizontal)
        row.mount_all([Button(Text(visible(p.name)), id=button_id(p.name)) for p in st.profiles])
        self.items = [Wanted(e.profile) for e in st.instances]
        self.query_one("#mig-off", Button).disabled = not (st.current or st.pending)
        self._update()

    # -- editing (UI thread; fit is pure) --------------------------------------------------------------
    def _update(self) -> None:
        if self.state is None:
            return
        st = self.state
        self.result = fit(st.profiles, self.items, st.instances)
        text = format_layout(self.items, st.profiles)
        self.query_one("#mig-layout", Static).update(Text(f"layout: {visible(text)}", style="bold"))
        preview = self.query_one("#mig-preview", Static)
        if self.result.ok:
            out = Text("new:\n")
            users = {e.gi_id: ", ".join(e.users) for e in st.instances if e.users}
            out.append_text(slice_bar(preview_mig(self.result, self.slices, users)))
            if self.result.destroy:
                out.append("\ndestroys: " + ", ".join(f"{e.profile} (GI {e.gi_id})" for e in self.result.destroy))
            preview.update(out)
        else:
            preview.update(Text(f"does not fit: {visible(self.result.reason)}", style="bold red"))
        self.query_one("#mig-plan", Button).disabled = not self.result.ok

    def layout_text(self) -> str:
        return format_layout(self.items, self.state.profiles) if self.state is not None else ""

    def add(self, profile: str) -> None:
        self.items.append(Wanted(profile))
        self._update()

    def action_remove_last(self) -> None:
        if self.items:
            self.items.pop()
            self._update()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        bid = event.button.id or ""
        if bid.startswith("mig-add-") and self.state is not None:
            name = next((p.name for p in self.state.profiles if button_id(p.name) == bid), None)
            if name:
                self.add(name)
        elif bid == "mig-undo":
            self.action_remove_last()
        elif bid == "mig-clear":
            self.items = []
            self._update()
        elif bid == "mig-current-layout" and self.state is not None:
            self.items = [Wanted(e.profile) for e in self.state.instances]
            self._update()
        elif bid == "mig-cancel":
            self.dismiss(None)
        elif bid == "mig-plan":
            self.dismiss(MigLayout(self.address, self.layout_text()))
        elif bid == "mig-off":
            self.dismiss(MigLayout(self.address, off=True))

    def action_cancel(self) -> None:
        self.dismiss(None)
