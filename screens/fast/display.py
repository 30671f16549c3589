"""The app's base class in the fast mode: Textual's display step writes only the cells that differ
from what the terminal shows (terminal.py), and on Linux the keys are read by a thread that sleeps
until one comes (driver.py). The same hooks as screens/rendering.py's StockApp: `forget_terminal`,
and `frame_written`, called after every frame written (the console starts its polls after the first).
"""
from __future__ import annotations

import sys

from textual._compositor import CompositorUpdate
from textual.app import App
from textual.screen import Screen

from nodeconsole.screens.fast.terminal import ScreenShadow


class FastApp(App):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._frames_written = 0
        self.shadow = ScreenShadow()  # what the terminal shows: only changed cells are written

    def forget_terminal(self) -> None:
        """What the terminal shows is unknown (ctrl+l, a return from suspension): the next frame is
        written whole."""
        self.shadow.reset()

    def frame_written(self) -> None:
        """Called after each frame written."""

    def get_driver_class(self):
        """Textual's driver, except on Linux with no driver asked for by the environment: there the
        driver whose input thread sleeps until a key comes (driver.py)."""
        from textual import constants

        if constants.DRIVER is None and sys.platform.startswith("linux"):
            from nodeconsole.screens.fast.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return super().get_driver_class()

    def _display(self, screen: Screen, renderable) -> None:
        """Textual's display step, writing only the cells that differ from what the terminal shows
        (terminal.py). Updates of another kind are written as they are, and the shadow forgotten. The
        first frame is written as Textual renders it (the whole screen either way; the shadow would
        take ~7 ms to find that every cell changed): the shadow, blank, then learns the screen from
        the updates that follow."""
        # Textual drops what is displayed during a batch (start-up composes and lays out the first
        # screen in one): only a frame written counts as the first
        written = renderable is not None and not self._batch_count
        if isinstance(renderable, CompositorUpdate) and not self.is_inline and self._frames_written:
            renderable = _ShadowedUpdate(renderable, self.shadow, self.size)
        elif renderable is not None:
            self.shadow.reset()
        super()._display(screen, renderable)
        if written:
            self._frames_written += 1
            self.frame_written()


class _ShadowedUpdate(CompositorUpdate):
    def __init__(self, update: CompositorUpdate, shadow: ScreenShadow, size) -> None:
        self.update, self.shadow, self.size = update, shadow, (size.width, size.height)

    def render_segments(self, console) -> str:
        try:
            return self.shadow.render(self.update, console, self.size)
        except Exception:  # never let the output optimisation take the console down: write it whole
            self.shadow.reset()
            return self.update.render_segments(console)
