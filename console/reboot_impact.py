"""Who a reboot hits: the VMs running (or paused) on the host and the GPUs each holds — named by every
plan or advice that needs a reboot (doctor fixes, a "reboot node" action) and by `nodeconsole
reboot-impact`. Read from the snapshot only."""
from __future__ import annotations

from dataclasses import dataclass

from nodeconsole.console.events import holders
from nodeconsole.console.model import HostSnapshot

LIVE = ("running", "paused")
SHOWN = 6  # VMs named in a one-line sentence; the rest counted


@dataclass(frozen=True)
class HitVm:
    name: str
    state: str
    gpus: tuple[str, ...]  # GPU addresses it holds (whole, MIG slice or vGPU)

    def to_dict(self) -> dict[str, object]:
        return {"vm": self.name, "state": self.state, "gpus": list(self.gpus)}


def reboot_impact(snap: HostSnapshot) -> list[HitVm]:
    """The running and paused VMs, by name, with the GPUs they hold."""
    gpus = {g.address for g in snap.gpus}
    held: dict[str, set[str]] = {}
    for address, vms in holders(snap).items():
        if address in gpus:
            for vm in vms:
                held.setdefault(vm, set()).add(address)
    return [HitVm(v.name, v.state, tuple(sorted(held.get(v.name, ())))) for v in sorted(snap.vms, key=lambda v: v.name)
            if v.state in LIVE]


def impact_sentence(snap: HostSnapshot) -> str:
    """'a reboot stops 9 running VMs: train-a (GPU 1), …' — '' when no VM runs (or libvirt is down: then
    it says that it cannot tell)."""
    if not snap.sources.libvirt.ok:
        return f"a reboot stops every running VM (which ones is unknown: libvirt {snap.sources.libvirt})"
    hit = reboot_impact(snap)
    if not hit:
        return ""
    index = {g.address: g.index for g in snap.gpus}

    def one(h: HitVm) -> str:
        return h.name + (f" (GPU {', '.join(str(index[a]) for a in h.gpus)})" if h.gpus else "")

    names = ", ".join(one(h) for h in hit[:SHOWN]) + (f" and {len(hit) - SHOWN} more" if len(hit) > SHOWN else "")
    return f"a reboot stops {len(hit)} running VM{'s' if len(hit) != 1 else ''}: {names}"
