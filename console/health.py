"""One health verdict per GPU, the only one: the Overview, the GPUs screen, every action's precondition,
the NCCL pick, the exporter and `fleet` read `Gpu.health` and judge nothing themselves.

unhealthy (actions refuse the GPU; `--allow-unhealthy` overrides, and the audit record says so):
  fallen off the bus, a fatal-severity Xid, an uncorrectable PCIe AER error (fatal or non-fatal) or a
  fatal host failure (console/host_failures.py: inaccessible after D3cold or another power change, not
  ready after resume, an FLR or a bus reset that timed out, RmInitAdapter failed, a BAR that can't be
  reserved — on the GPU or another function of its slot) in the event window; uncorrectable ECC errors
  since the driver loaded (volatile); a row remapping failure; an NVLink down on a GPU that uses NVLink
  (some links up, or a member of an NVLink fabric); NVML lost it.
degraded (allowed with a warning; the NCCL pick passes it over unless nothing else is left):
  row remapping pending; uncorrectable ECC errors only in the lifetime count; a PCIe link trained below
  its width; the hardware holding its clocks down (thermal or power slowdown); a warning-severity Xid or
  host failure (a reset with transactions pending, a refused power state change), or
  CORRECTED_AER_REPEATED or more corrected AER errors, in the window.
healthy otherwise. A link below its top *speed* is normal: GPUs lower it while idle (`link_state`, the
doctor's rule too).

The event window of a GPU starts at the later of the host's boot (events before it are of an earlier
boot) and the GPU's last reset the console saw (its driver unbound and bound again, which resets the
function; or a `gpu reset` the audit log records applied, console/resets.py), and reaches back at most
`$NODECONSOLE_HEALTH_WINDOW` (a duration: 30m, 6h, 2d; unset: no bound). Events without a wall-clock time
count (they cannot be placed before the window).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from nodeconsole.console.gpu_events import AER, DEGRADED, HEALTHY, HOST, UNHEALTHY, XID, Health, KernelEvent, local_text
from nodeconsole.console.host_failures import FAILURES
from nodeconsole.console.model import NA, Gpu, PciLink
from nodeconsole.console.xid import AER_FATAL, AER_NONFATAL, FALLEN_OFF_BUS, FATAL, WARNING, lookup

WINDOW_ENV = "NODECONSOLE_HEALTH_WINDOW"
CORRECTED_AER_REPEATED = 5  # corrected AER errors in the window that make a GPU degraded
# Clock-event reasons that mean the hardware protects itself (not a setting, not idleness, not the power
# cap a busy GPU runs at).
HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

# link_state's answers
LINK_OK, LINK_NARROW, LINK_SLOW, LINK_UNKNOWN = "ok", "narrow", "slow", "unknown"


def link_speed(text: str) -> float | None:
    """'16.0 GT/s PCIe' → 16.0; None when unreadable."""
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def link_state(link: PciLink) -> str:
    """The one rule for a GPU's PCIe link: NARROW (width below max: degraded, the link trained badly and
    stays so until a reset), SLOW (speed below max at full width: normal, GPUs lower it while idle), OK,
    or UNKNOWN (not readable)."""
    if not link.current_width or not link.max_width:
        return LINK_UNKNOWN
    if link.current_width < link.max_width:
        return LINK_NARROW
    cur, top = link_speed(link.current_speed), link_speed(link.max_speed)
    if cur is not None and top is not None and cur < top:
        return LINK_SLOW
    return LINK_OK


def window_bound() -> float | None:
    """$NODECONSOLE_HEALTH_WINDOW in seconds; None when unset or not a duration."""
    from nodeconsole.console.events import parse_duration

    text = os.environ.get(WINDOW_ENV, "")
    if not text:
        return None
    try:
        return float(parse_duration(text))
    except ValueError:
        return None


def window_start(btime: float | None, reset: float | None, now: float, bound: float | None) -> float | None:
    """Where a GPU's event window starts (wall clock); None: the whole log counts."""
    starts = [t for t in (btime, reset, (now - bound) if bound is not None else None) if t is not None]
    return max(starts) if starts else None


def in_window(events: Iterable[KernelEvent], start: float | None) -> list[KernelEvent]:
    return [ev for ev in events if start is None or ev.wall is None or ev.wall >= start]


def _at(ev: KernelEvent) -> str:
    return f" at {ev.when}" if ev.wall is not None or ev.uptime_s is not None or ev.time else ""


def _event_reasons(events: Sequence[KernelEvent]) -> tuple[list[str], list[str]]:
    bad: list[str] = []
    warn: list[str] = []
    corrected = 0
    for ev in reversed(events):  # newest first; one reason per kind of event
        if ev.kind == XID and ev.xid is not None:
            what = f"Xid {ev.xid} ({lookup(ev.xid).meaning}){_at(ev)}"
            if ev.xid == FALLEN_OFF_BUS or ev.severity == FATAL:
                bad.append(what)
            elif ev.severity == WARNING:
                warn.append(what)
        elif ev.kind == HOST and ev.failure in FAILURES:
            what = f"host failure {ev.failure} on {ev.gpu} ({FAILURES[ev.failure].meaning}){_at(ev)}"
            if ev.severity == FATAL:
                bad.append(what)
            elif ev.severity == WARNING:
                warn.append(what)
        elif ev.kind == AER:
            if ev.severity in (AER_FATAL, AER_NONFATAL):
                bad.append(f"uncorrectable AER error ({ev.severity}){_at(ev)}")
            else:
                corrected += 1
    if corrected >= CORRECTED_AER_REPEATED:
        warn.append(f"{corrected} corrected AER errors")
    return list(dict.fromkeys(bad)), list(dict.fromkeys(warn))


def _num(v: object) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _nvlink_down(g: Gpu) -> list[int]:
    if not g.nvlinks:
        return []
    down = [lk.link for lk in g.nvlinks if not lk.active]
    in_fabric = g.fabric_state not in (None, NA)
    return down if down and (len(down) < len(g.nvlinks) or in_fabric) else []


def _metric_reasons(g: Gpu) -> tuple[list[str], list[str]]:
    bad: list[str] = []
    warn: list[str] = []
    if g.nvml_error:
        bad.append(f"NVML: {g.nvml_error}")
    if (n := _num(g.ecc_volatile_uncorrected)) > 0:
        bad.append(f"{n:.0f} uncorrectable ECC error{'s' if n != 1 else ''} since the driver loaded")
    elif _num(g.ecc_aggregate_uncorrected) > 0:
        warn.append(f"{_num(g.ecc_aggregate_uncorrected):.0f} uncorrectable ECC errors in its lifetime")
    if _num(g.remapped_rows_failure) > 0 or g.remapped_rows_failure is True:
        bad.append("row remapping failed")
    if _num(g.remapped_rows_pending) > 0 or g.remapped_rows_pending is True:
        warn.append("row remapping pending (reset the GPU to apply it)")
    if down := _nvlink_down(g):
        bad.append(f"NVLink {','.join(map(str, down))} down")
    if link_state(g.link) == LINK_NARROW:
        warn.append(f"PCIe link x{g.link.current_width} of x{g.link.max_width}")
    events = g.clock_events if isinstance(g.clock_events, tuple) else ()
    if slow := [e for e in events if e in HW_SLOWDOWN]:
        warn.append(f"clocks held down ({', '.join(slow)})")
    return bad, warn


def judge(g: Gpu, events: Sequence[KernelEvent], start: float | None = None) -> Health:
    """The verdict on `g` from its metrics and its events (oldest first) in the window from `start`."""
    ev_bad, ev_warn = _event_reasons(in_window(events, start))
    m_bad, m_warn = _metric_reasons(g)
    bad, warn = ev_bad + m_bad, ev_warn + m_warn
    state = UNHEALTHY if bad else DEGRADED if warn else HEALTHY
    return Health(state, tuple(bad + warn), start)


def describe_window(h: Health) -> str:
    return f"events since {local_text(h.since)}" if h.since is not None else "every event in the log"


class HealthBook:
    """Judges every GPU of each snapshot (the collector's, off the UI thread). Remembers each GPU's driver
    to see it reset (bound to nvidia again after another driver or none: the function was reset and the
    driver reloaded for it), and hands on the very same Gpu when nothing it is judged on changed."""

    def __init__(self) -> None:
        self._drivers: dict[str, str | None] = {}
        self.resets: dict[str, float] = {}  # address → when the console saw the GPU reset (wall clock)
        self._memo: dict[str, tuple[Gpu, tuple[KernelEvent, ...], float | None, Gpu]] = {}

    def note_drivers(self, gpus: Sequence[Gpu], now: float) -> None:
        for g in gpus:
            was = self._drivers.get(g.address, g.driver)
            if g.driver == "nvidia" and was != "nvidia":
                self.resets[g.address] = now
            self._drivers[g.address] = g.driver

    def note_recorded(self, resets: dict[str, float]) -> None:
        """Resets the audit log records (console/resets.py): each GPU's window starts at the later one."""
        for addr, when in resets.items():
            if when > self.resets.get(addr, float("-inf")):
                self.resets[addr] = when

    def judge_all(self, gpus: Sequence[Gpu], events_of: dict[str, tuple[KernelEvent, ...]],
                  btime: float | None, now: float) -> tuple[Gpu, ...]:
        from dataclasses import replace

        self.note_drivers(gpus, now)
        bound = window_bound()
        out = []
        for g in gpus:
            evs = events_of.get(g.address, ())
            start = window_start(btime, self.resets.get(g.address), now, bound)
            kept = self._memo.get(g.address)
            if kept is not None and kept[0] is g and kept[1] == evs and kept[2] == start:
                out.append(kept[3])
                continue
            health = judge(g, evs, start)
            new = g if (health == g.health and evs == g.events) else replace(g, events=evs, health=health)
            self._memo[g.address] = (g, evs, start, new)
            out.append(new)
        return tuple(out)
