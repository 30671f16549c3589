"""The toasts of one change end with the change. While it runs, one progress toast shows the step it is
at (each step's toast replaces the previous one: a long plan's steps no longer pile up over the screen);
when it ends (done, refused, failed and rolled back, or raised) that toast is dismissed and the caller's
summary toast, with its ordinary timeout, takes its place. Toasts are added and removed on the UI thread
in order, never through the message queue, so a dismissal cannot overtake the toast it dismisses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.notifications import Notification

from nodeconsole.console.hosttext import LINE_MAX, lines

if TYPE_CHECKING:
    from textual.app import App

# a safety net only: the end of the change dismisses the toast (a step that waits longer than this
# still has its line in the Changes screen)
PROGRESS_TIMEOUT_S = 600.0


class ChangeToasts:
    """The progress toast of one running change (call every method on the UI thread)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.current: Notification | None = None
        self.ended = False

    def show(self, text: str) -> None:
        """Show `text` as the change's progress, replacing the previous step's toast."""
        if self.ended:  # a late step report after the end: never a toast that outlives the change
            return
        self._dismiss(refresh=False)
        note = Notification(lines(text, LINE_MAX), "", "information", PROGRESS_TIMEOUT_S, markup=False)
        self.current = note
        # the Textual App's own bookkeeping (what App._on_notify does), done here and now
        self.app._notifications.add(note)
        self.app._refresh_notifications()

    def end(self) -> None:
        """The change ended: no progress toast stays."""
        self.ended = True
        self._dismiss(refresh=True)

    def _dismiss(self, refresh: bool) -> None:
        if self.current is not None:
            self.app._unnotify(self.current, refresh=refresh)
            self.current = None
        elif refresh:
            self.app._refresh_notifications()
