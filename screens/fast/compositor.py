"""A compositor whose partial updates render only the widgets that can show in them.

For a partial update Textual renders every widget that overlaps the box around all changed regions
(the screen, its containers, every section between two changed lines) and then keeps, for each cell,
the front-most widget's. A widget's lines are opaque (its ancestors' backgrounds are blended in when it
renders), so within a changed region of widget W only W and the widgets in front of W can win; the
containers behind it, and widgets elsewhere in the box, never do. A console tick changes a few lines
of two tables: most of the widgets Textual rendered for it were behind them or beside them.

Here each changed region remembers the widget it came from (`update_widgets`), and a partial update
renders W and the widgets in front of W that overlap the region. A changed region that came another
way (a reflow, a scroll, a refresh of the screen itself) makes the update Textual's own.

Relies on Textual's Compositor internals (`update_widgets`, `_dirty_regions`, `_get_renders`,
`visible_widgets`, `_full_map_invalidated`, Widget._exchange_repaint_regions);
tests/screens/test_compositor.py renders every update both ways and compares them.
"""
from __future__ import annotations

from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate
from textual.geometry import Region
from textual.widget import Widget


class FrontCompositor(Compositor):
    def __init__(self) -> None:
        super().__init__()
        self._owners: dict[Region, list[Widget]] = {}  # changed region -> the widgets it came from
        self._needed: set[Widget] | None = None  # while a partial update renders: the widgets it needs

    def update_widgets(self, widgets: set[Widget]) -> None:
        """Compositor.update_widgets, noting which widget each changed region came from."""
        if not self._full_map_invalidated and not widgets.issubset(self.visible_widgets.keys()):
            self._full_map_invalidated = True
        regions: list[Region] = []
        owners = self._owners
        visible = self.visible_widgets
        for widget in visible.keys() & widgets:
            region, clip = visible[widget]
            offset = region.offset
            for dirty_region in widget._exchange_repaint_regions():
                if update_region := clip.intersection(dirty_region.translate(offset)):
                    regions.append(update_region)
                    owners.setdefault(update_region, []).append(widget)
        self._dirty_regions.update(regions)

    def reflow(self, parent: Widget, size):
        self._owners.clear()  # widgets moved: a region's widget may be another now
        return super().reflow(parent, size)

    def reflow_visible(self, parent: Widget, size):
        self._owners.clear()
        return super().reflow_visible(parent, size)

    def render_full_update(self, simplify: bool = False) -> LayoutUpdate:
        self._owners.clear()
        return super().render_full_update(simplify)

    def needed_for(self, regions: set[Region], owners: dict[Region, list[Widget]]) -> set[Widget] | None:
        """The widgets that can show in `regions`: each region's widget and those in front of it that
        overlap it. None when a region came from no widget (then every widget may show)."""
        if not all(r in owners for r in regions):
            return None
        needed: set[Widget] = set()
        order = [(w, clip.intersection(region)) for w, (region, clip) in self.visible_widgets.items()]
        for r in regions:
            mine = owners[r]
            for widget, shown in order:  # front to back
                if widget in mine:
                    needed.add(widget)
                    break
                if shown.overlaps(r):
                    needed.add(widget)
        return needed

    def render_partial_update(self) -> ChopsUpdate | None:
        owners, self._owners = self._owners, {}
        self._needed = self.needed_for(self._dirty_regions, owners) if self._dirty_regions else None
        try:
            return super().render_partial_update()
        finally:
            self._needed = None

    def _get_renders(self, crop: Region | None = None):
        needed = self._needed
        if needed is None:
            yield from super()._get_renders(crop)
            return
        yield from self._renders_of(needed, crop)

    def _renders_of(self, needed: set[Widget], crop: Region | None):
        """Compositor._get_renders for the widgets in `needed` only (same order, same lines)."""
        visible = self.visible_widgets
        overlaps = crop.overlaps if crop else None
        for widget, (region, clip) in visible.items():
            if widget not in needed or (overlaps is not None and not overlaps(clip)):
                continue
            if clip.contains_region(region):
                yield region, clip, widget.render_lines(Region(0, 0, region.width, region.height))
            else:
                x, y, width, height = region.intersection(clip)
                if width and height:
                    yield region, clip, widget.render_lines(Region(x - region.x, y - region.y, width, height))
