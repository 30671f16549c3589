"""Updating a Static without re-laying the screen out when its size cannot change.

`Static.update` asks for a layout by default, and a layout repaints every widget of the screen: a status
line whose figures move each second (node CPU, the host line) re-rendered every table below it. A Static
whose width is not `auto` (unset: the container's) keeps its size when its new content is as many lines tall at its width: then
only the Static is repainted."""
from __future__ import annotations

from textual.widgets import Static


def update_static(widget: Static, content) -> None:
    width = widget.content_size.width
    if not widget.is_mounted or not width or (widget.styles.width is not None and widget.styles.width.is_auto):
        widget.update(content)
        return
    widget.update(content, layout=False)
    if widget.styles.height is not None and not widget.styles.height.is_auto:
        return  # a fixed height: the content cannot change the size
    # Textual annotates get_height's rules as RulesMap but passes the widget's styles itself (Widget's box model)
    if widget.visual.get_height(widget.styles, width) != widget.content_size.height:  # type: ignore[arg-type]
        widget.refresh(layout=True)
