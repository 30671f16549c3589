"""The key footer, built again only when what it shows changed.

Textual's Footer throws its keys away and mounts new ones each time its screen says the bindings may
have changed (`bindings_updated_signal`), and a screen says so three times as it is first shown (the
focus set, the screen resumed, the focus set once more after a refresh): at start-up that is three
footers built before the first frame, ~10 ms each (each key is styled three times as it mounts). This
one coalesces the signals of one refresh into one check, and builds the keys again only when the key,
its label, description, action, enabled state, tooltip or group of a shown binding changed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer

if TYPE_CHECKING:
    from textual.screen import Screen


class QuietFooter(Footer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._check_pending = False
        self._shown: tuple | None = None  # what the keys were last built from

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._check_pending:
            self._check_pending = True
            self.call_after_refresh(self._recompose_if_changed)

    def shown(self) -> tuple:
        """What the keys are built from (Footer.compose): every active binding the footer may show."""
        app = self.app
        return (self.show_command_palette, app.ENABLE_COMMAND_PALETTE, app.COMMAND_PALETTE_BINDING,
                tuple((key, b.key, app.get_key_display(b), b.action, b.description, b.show, b.tooltip,
                       b.group, enabled, tooltip)
                      for key, (_node, b, enabled, tooltip) in self.screen.active_bindings.items()))

    async def _recompose_if_changed(self) -> None:
        self._check_pending = False
        if not self.is_attached:
            return
        shown = self.shown()
        if shown == self._shown:
            return
        self._shown = shown
        await self.recompose()
