"""The MIG memory-slice bar: GPU instances drawn at their placement, with profile and VM."""
from __future__ import annotations

from rich.text import Text

from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Mig

PALETTE = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def slice_bar(mig: Mig, slices: int = 8, cell: int = 8) -> Text:
    """Two lines: the bar with one box per instance ([start, start+size)), and slice numbers."""
    slices = mig.memory_slices or slices
    owner: list[int | None] = [None] * slices
    for n, inst in enumerate(mig.instances):
        for s in range(inst.start, min(slices, inst.start + inst.size)):
            owner[s] = n
    bar = Text()
    s = 0
    while s < slices:
        k = owner[s]
        run = 1
        while s + run < slices and owner[s + run] == k:
            run += 1
        width = run * cell
        if k is None:
            bar.append(("·" * (width - 1)).center(width - 1) + "│", style="dim")
        else:
            inst = mig.instances[k]
            label = visible(inst.profile + (f" {inst.vm}" if inst.vm else ""))  # host text: visible escapes
            body = label[: width - 2].center(width - 2)
            bar.append("[" + body + "]", style=f"reverse {PALETTE[k % len(PALETTE)]}")
        s += run
    scale = "".join(str(i).ljust(cell) for i in range(slices))
    bar.append("\n" + scale, style="dim")
    return bar
