"""Short texts about one GPU that several screens show in their tables and panels."""
from __future__ import annotations

from nodeconsole.console.model import Gpu
from nodeconsole.screens.widgets.text import metric


def short_name(name: str, width: int = 12) -> str:
    """"NVIDIA H100 80GB HBM3" → "H100 80GB HB"; pci.ids "GH100 [H100 SXM5 80GB]" → "H100 SXM5 80"."""
    if "[" in name and "]" in name:
        name = name[name.index("[") + 1:name.rindex("]")]
    return name.replace("NVIDIA ", "").strip()[:width]


def owner_text(g: Gpu) -> str:
    vms = ",".join(g.owner.vms)
    return f"{g.owner.kind}→{vms}" if vms else g.owner.kind


def memory_text(g: Gpu) -> str:
    """Used/total GiB; N/A or '-' when NVML has no value."""
    used, total = g.memory_used_mib, g.memory_total_mib
    if isinstance(used, (int, float)) and isinstance(total, (int, float)):
        return f"{used / 1024:.0f}/{total / 1024:.0f}G"
    return metric(used)


def link_text(g: Gpu) -> str:
    if g.link.current_width is None:
        return "-"
    state = f"x{g.link.current_width}"
    if g.link.max_width and g.link.current_width < g.link.max_width:
        return f"{state}/{g.link.max_width}↓"
    return state
