"""The app's guided changes: a request (a key on the app, or `PlanChange` from a screen) is planned off the
UI thread, its plan shown in the plan modal and applied in a worker once the admin says yes; each
change's progress is one toast, its outcome a notification."""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from nodeconsole.screens.app_polling import PollingApp
from nodeconsole.screens.messages import GpuSelected, PlanChange, VmSelected

if TYPE_CHECKING:  # the actions are imported on first use
    from nodeconsole.actions.placement import Placement
    from nodeconsole.actions.plan import Plan
    from nodeconsole.actions.progress import Progress
    from nodeconsole.actions.session import ActionSession, Request


class ChangesApp(PollingApp):
    """The guided changes' half of the app (its state is made in NodeConsoleApp.__init__)."""

    selected_gpu: str | None
    selected_vm: str | None

    def on_gpu_selected(self, message: GpuSelected) -> None:
        self.selected_gpu = message.address

    def on_vm_selected(self, message: VmSelected) -> None:
        self.selected_vm = message.name

    def on_plan_change(self, message: PlanChange) -> None:
        """A screen's change (the Changes screen's undo/redo, the Setup screen's fixes)."""
        self._plan_worker(message.request)

    # -- guided changes --------------------------------------------------------------------------
    def _selected_gpu(self) -> str | None:
        if not self.selected_gpu:
            self.notify("select a GPU on the GPUs screen (4) first", severity="warning")
        return self.selected_gpu or None

    def action_passthrough(self) -> None:
        """`a` on the GPUs screen: which VM gets the selected GPU, if any, and its NIC
        (screens/passthrough_pick.py), then its passthrough plan."""
        from nodeconsole.screens.passthrough_pick import PassthroughPickModal, vm_choices

        addr = self._selected_gpu()
        if not addr:
            return
        snap = self.snapshot
        g = snap.gpu(addr) if snap is not None else None
        label = f"GPU {g.index} ({addr})" if g is not None else addr
        choices = vm_choices(snap, addr) if snap is not None else []
        self.push_screen(PassthroughPickModal(addr, label, choices), self._plan_chosen)

    def _plan_chosen(self, request: Request | None) -> None:
        """A dialog's answer: the request to plan, or None (cancelled: nothing to plan)."""
        if request is not None:
            self._plan_worker(request)

    def action_release(self) -> None:
        from nodeconsole.actions.session import Release

        addr = self._selected_gpu()
        if addr:
            self._plan_worker(Release(addr))

    def action_drain(self) -> None:
        """`D` on the GPUs screen: the selected GPU's undrain plan when it is drained, else the reason
        prompt (screens/drain_prompt.py) and then its drain plan."""
        from nodeconsole.actions.session import Drain, Undrain
        from nodeconsole.screens.drain_prompt import DrainReasonModal

        addr = self._selected_gpu()
        if not addr:
            return
        g = self.snapshot.gpu(addr) if self.snapshot is not None else None
        if g is not None and g.drain is not None:
            self._plan_worker(Undrain(addr))
            return

        def answered(reason: str | None) -> None:
            if reason is not None:
                self._plan_worker(Drain(addr, reason))

        label = f"GPU {g.index} ({addr})" if g is not None else addr
        self.push_screen(DrainReasonModal(label), answered)

    def action_reset_gpu(self) -> None:
        """`X` on the GPUs screen: the selected GPU's reset plan (actions/reset.py)."""
        from nodeconsole.actions.session import Reset

        addr = self._selected_gpu()
        if addr:
            self._plan_worker(Reset(addr))

    def action_mig_edit(self) -> None:
        """The MIG layout editor for the selected GPU; the request it hands back is planned, shown in
        the plan modal and applied like every other change."""
        addr = self._selected_gpu()
        if not addr:
            return
        from nodeconsole.screens.mig_editor import MigEditor

        self.push_screen(MigEditor(self.new_session, addr), self._plan_chosen)

    def _selected_vm(self) -> str | None:
        if not self.selected_vm:
            self.notify("select a VM on the VMs screen (5) first", severity="warning")
        return self.selected_vm or None

    def action_pin(self) -> None:
        from nodeconsole.actions.session import Pin

        name = self._selected_vm()
        if name:
            self._plan_worker(Pin(name))

    def action_prepare(self) -> None:
        """`P` on the VMs screen: the prepare form for the selected VM with place's recommendation
        (screens/prepare_form.py, worked out in its worker), then the Prepare plan."""
        from nodeconsole.screens.prepare_form import PrepareChoice, PrepareModal

        name = self._selected_vm()
        if not name:
            return
        v = self.snapshot.vm(name) if self.snapshot is not None else None
        sessions: list[ActionSession] = []  # one session for the form's questions, opened in its worker

        def placer(count: int, with_nic: bool, memory_factor: float) -> Placement:
            if not sessions:
                sessions.append(self.new_session())
            return sessions[0].place(count, with_nic=with_nic, vm=name, memory_factor=memory_factor)

        def answered(choice: PrepareChoice | None) -> None:
            from nodeconsole.actions.session import Prepare

            if choice is not None:
                self._plan_worker(Prepare(name, gpus=str(choice.count), with_nic=choice.with_nic,
                                          memory_factor=choice.memory_factor))

        labels = {g.address: f"GPU {g.index}" for g in self.snapshot.gpus} if self.snapshot is not None else {}
        self.push_screen(PrepareModal(name, v.state if v is not None else "state unknown", placer, labels), answered)

    def action_pin_all(self) -> None:
        from nodeconsole.actions.session import PinAll

        self._plan_worker(PinAll())

    def action_undo(self) -> None:
        """Plan rolling back the latest change still in effect (the Changes screen's `u` undoes the
        selected one)."""
        from nodeconsole.actions.session import Undo

        self._plan_worker(Undo())

    def action_redo(self) -> None:
        """Plan putting back the change the latest undo reverted (the Changes screen's `r` redoes the
        selected one). The log is read in a worker."""
        self._redo_worker()

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _redo_worker(self) -> None:
        from nodeconsole.actions.session import Redo
        from nodeconsole.screens.changes import latest_redo

        try:
            rid = latest_redo(self.new_session().host.audit.records())
        except Exception as exc:
            self.call_from_thread(self.notify, f"redo: {exc}", severity="error", timeout=8)
            return
        if rid is None:
            self.call_from_thread(self.notify, "redo: nothing to redo (no recorded change is undone)",
                                  severity="warning")
            return
        self.call_from_thread(self._plan_worker, Redo(rid))

    def new_session(self) -> ActionSession:
        """A session on the console's host (called in workers: building it may open libvirt); applied
        changes invalidate the collector's caches. RuntimeError until the first poll has read the host."""
        from nodeconsole.actions.session import ActionSession

        if self.seams is None or self.collector is None:
            raise RuntimeError("the host is not read yet")
        return ActionSession.from_seams(self.seams, on_changed=self.collector.invalidate)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _plan_worker(self, request: Request) -> None:
        """Plan off the UI thread (it re-reads the host), then ask on the UI thread."""
        try:
            session = self.new_session()
            plan = session.plan(request)
        except Exception as exc:
            self.call_from_thread(self.notify, f"{request.label}: {exc}", severity="error", timeout=8)
            return
        self.call_from_thread(self._ask, session, plan)

    def _ask(self, session: ActionSession, plan: Plan) -> None:
        from nodeconsole.screens.modals.plan import PlanModal

        can_apply = session.can_apply(plan)
        read_only = session.host.read_only_reason if can_apply else ""
        title = plan.title + ("  (read-only)" if read_only else "" if can_apply else
                              ("  (refused)" if not plan.ok else "  (nothing to do)"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._apply_worker(session, plan)
            elif yes is False:  # Esc or "No": say so, or a dialog that closed looks like it applied
                self.notify(f"{plan.title}: cancelled, nothing was changed", severity="warning", timeout=6)

        self.push_screen(PlanModal(title, plan.lines(), can_apply, session.typed_confirmation(plan), read_only),
                         answered)

    @work(thread=True, exclusive=True, group="action", exit_on_error=False)
    def _apply_worker(self, session: ActionSession, plan: Plan) -> None:
        from nodeconsole.screens.change_toasts import ChangeToasts

        toasts = ChangeToasts(self)  # one progress toast, the current step's; gone when the change ends

        def progress(p: Progress) -> None:
            self.call_from_thread(toasts.show, f"[{p.index}/{p.total}] {p.phase}: {p.title}")

        try:
            result = session.apply(plan, progress=progress)  # the modal was the confirmation
        finally:
            self.call_from_thread(toasts.end)
        self.action_results.append(result)
        for warning in result.warnings:  # e.g. a lock a dead run left, and the change it was making
            self.call_from_thread(self.notify, warning, severity="warning", timeout=20)
        message = f"{plan.action}: {result.status} — {result.message}"
        if result.ok and result.record_id:  # the CLI's undo command is in the message; here it is a key
            message += "\nin the console: 8 Changes → " + ("r redoes it" if plan.undoes else "u undoes it")
        self.call_from_thread(self.notify, message, severity="information" if result.ok else "error", timeout=10)
        self.call_from_thread(self.poll_now_if_idle)
