"""Short texts about one GPU that several screens show in their tables and panels."""
from __future__ import annotations

from nodeconsole.console.iommu import blocker_reasons, slot_of
from nodeconsole.console.model import LINKS_READ, NA, Gpu, HostSnapshot
from nodeconsole.screens.widgets.text import metric


def short_name(name: str, width: int = 0) -> str:
    """"NVIDIA H100 80GB HBM3" → "H100 80GB HBM3"; pci.ids "GH100 [H100 SXM5 80GB]" → "H100 SXM5 80GB".
    With `width`, cut to that many characters (a table cuts its cells itself, with "…")."""
    if "[" in name and "]" in name:
        name = name[name.index("[") + 1:name.rindex("]")]
    name = name.replace("NVIDIA ", "").strip()
    return name[:width] if width else name


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


def ecc_text(g: Gpu) -> str:
    """Uncorrected ECC errors since the driver loaded / in the GPU's lifetime: "0/2"; N/A or '-' alone
    when NVML has neither."""
    vol, agg = g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected
    if vol is None and agg is None:
        return "-"
    if vol == agg == NA:
        return NA
    return f"{metric(vol)}/{metric(agg)}"


def clocks_text(g: Gpu) -> str:
    """"SM 1755/1980 MHz, mem 2619/2619 MHz (sw_power_cap)"; '-' when not read."""
    if g.clock_sm_mhz is None and g.clock_mem_mhz is None:
        return "-"
    events = g.clock_events
    why = f" ({', '.join(events)})" if isinstance(events, tuple) and events else (
        " (reasons N/A)" if events == NA else "")
    return (f"SM {metric(g.clock_sm_mhz)}/{metric(g.clock_sm_max_mhz)} MHz, mem {metric(g.clock_mem_mhz)}/"
            f"{metric(g.clock_mem_max_mhz)} MHz{why}")


def nvlink_text(g: Gpu) -> str:
    """"18/18 active v4 to 4 NVSwitches, errors: link 7 crc_flit 3"; N/A without NVLink, '-' not read."""
    links = g.nvlinks
    if not links:
        return "none" if g.nvlink_state == LINKS_READ else metric(g.nvlink_state)
    active = sum(1 for lk in links if lk.active)
    version = next((lk.version for lk in links if isinstance(lk.version, int)), None)
    switches = {lk.remote for lk in links if lk.remote_type == "switch" and lk.remote}
    peers = {lk.remote for lk in links if lk.remote_type == "gpu" and lk.remote}
    to = (f" to {len(switches)} NVSwitch{'es' if len(switches) != 1 else ''}" if switches else "") + (
        f" to GPU {', '.join(sorted(peers))}" if peers else "")
    errors = [f"link {lk.link} " + " ".join(f"{k} {v}" for k in ("replay", "recovery", "crc_flit", "crc_data")
                                             if isinstance(v := getattr(lk, k), int) and v)
              for lk in links if lk.errors]
    text = f"{active}/{len(links)} active{f' v{version}' if version else ''}{to}"
    return text + (f", errors: {'; '.join(errors)}" if errors else "")


def fabric_text(g: Gpu) -> str:
    if g.fabric_state in (None, NA):
        return metric(g.fabric_state)
    return f"{g.fabric_state}" + ("" if g.fabric_status in ("ok", None) else f" ({g.fabric_status})")


def gpu_group_text(snap: HostSnapshot, g: Gpu) -> str:
    """The GPU's IOMMU group judged from this GPU's side: "IOMMU group 34: NOT viable for this GPU —
    shares group 34 with 0000:ba:00.1 …". The group's own verdict is about its main card; here the GPU's
    own functions never block it (GPU 7 must not read as blocked by 0000:bb:00.0, itself). The group's
    warnings (boot VGA, ACS override) follow. "" when the GPU has no group."""
    grp = snap.group(g.iommu_group)
    if grp is None:
        return ""
    by_addr = {a: d for a in grp.devices if (d := snap.pci(a)) is not None}
    blockers = blocker_reasons(grp, by_addr, [slot_of(g.address)])
    warnings = [n for n in grp.reason.split("; ") if n.startswith("warning:")]
    head = f"IOMMU group {grp.id}: " + ("NOT viable for this GPU — " + "; ".join(blockers) if blockers else "viable")
    return "; ".join([head, *warnings])
