"""Short texts about one GPU that several screens show in their tables and panels."""
from __future__ import annotations

from nodeconsole.console.model import Gpu
from nodeconsole.screens.widgets.text import metric


def short_name(name: str, width: int = 12) -> str:
    """"NVIDIA H100 80GB HBM3" → "H100 80GB HB"; pci.ids "GH100 [H100 SXM5 80GB]" → "H100 SXM5 80"."""
    if "[" in name and "]" in name:
        name = name[name.index("[") + 1:name.rindex("]")]
    return name.replace("NVIDIA ", "").strip()[:width]


def owner_text(g: Gpu, width: int = 0) -> str:
    """Who has the GPU: its mode (the snapshot's owner kind) and the VMs, each said as it holds it.

    `vfio→train-a`: on vfio-pci, given whole to the VM. `mig→a,b` / `vgpu→a,b`: VMs on its MIG slices
    or vGPUs. A VM whose config holds the whole GPU while the host has it (on nvidia, in MIG or vGPU
    mode, or unbound) cannot run with it now: `host→train-c (config)`, `mig; train-c (config)`.
    With `width`, the text is shortened to fit: `(cfg)`, then the VM names clipped with "…"."""
    kind = g.owner.kind
    on_slices = {i.vm for i in g.mig.instances if i.vm} | {i.vm for i in g.vgpu.instances if i.vm}
    shared = [v for v in g.owner.vms if v in on_slices]
    whole = [v for v in g.owner.vms if v not in on_slices]
    if kind == "vfio" or not whole:
        return _fit(kind, "→", g.owner.vms, "", width)
    if kind in ("mig", "vgpu"):
        head = _fit(kind, "→", shared, "", 0) if shared else kind
        return _fit(head, "; ", whole, " (config)", width)
    return _fit(kind, "→", whole, " (config)", width)


def _fit(head: str, sep: str, names: list[str] | tuple[str, ...], tail: str, width: int) -> str:
    if not names:
        return head
    text = f"{head}{sep}{','.join(names)}{tail}"
    if not width or len(text) <= width:
        return text
    tail = " (cfg)" if tail else ""
    room = width - len(head) - len(sep) - len(tail)
    listed = ",".join(names)
    if room < 2:  # not even one letter and "…": the head alone says the mode
        return head[:width]
    return f"{head}{sep}{listed if len(listed) <= room else listed[:room - 1] + '…'}{tail}"


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
