"""The console app's stock base (screens/rendering.py chooses it, or screens/fast/'s, which has the same
hooks): Textual's App and the two hooks the console uses. Its own module, so rendering.py and
screens/fast/ both name it without importing each other."""
from __future__ import annotations

from textual.app import App


class StockApp(App):
    """Textual's App with the two hooks the console's app uses, drawn by stock Textual: nothing is
    kept of what the terminal shows, and the first frame is taken to be out once the app is ready
    (after its first screen's first layout) and refreshed."""

    def forget_terminal(self) -> None:
        """What the terminal shows is unknown (ctrl+l, a return from suspension): nothing kept here."""

    def frame_written(self) -> None:
        """Called once the first frame is out (the console starts its polls)."""

    def on_ready(self) -> None:
        self.call_after_refresh(self.frame_written)
