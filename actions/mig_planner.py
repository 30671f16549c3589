"""MIG layout planning: pure functions over profile tables, no NVML calls (actions/mig.py feeds them what
NVML reports).

A layout is a multiset of GPU instance profile names as the GPU reports them: `3g.40gb,2g.20gb,1g.10gb*2`;
`3g.40gb@4` pins an instance to the placement starting at memory slice 4. `fit()` finds a placement for
every instance, in any order (the driver's own placement order is what makes hand-typed `-cgi` lines fail
with Insufficient Resources), keeping as many of the GPU's existing instances as it can. Instances in use
(a VM's vGPU, a process) are always kept. When nothing fits it says why, naming the slices in the way.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

Placement = tuple[int, int]  # (start, size) in memory slices
CiSpec = tuple[int, int, int]  # (compute instance profile id, start, size) inside its GPU instance

_ITEM = re.compile(r"^(?P<name>[A-Za-z0-9.+_-]+?)(?:@(?P<start>[0-9]+))?(?:\*(?P<count>[0-9]+))?$")
EMPTY_WORDS = ("", "none", "empty")
# Compute instance profile (NVML enum = id for CI profiles) spanning a whole GPU instance of N slices:
# what `nvidia-smi mig -cgi ... -C` creates.
FULL_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 6: 6, 7: 4, 8: 5}


class LayoutError(ValueError):
    """The layout text itself is wrong (syntax, unknown profile name)."""


@dataclass(frozen=True)
class Profile:
    """A GPU instance profile as NVML reports it (or the bundled table while MIG mode is off)."""
    name: str
    profile_id: int
    slice_count: int  # compute slices
    max_instances: int
    placements: tuple[Placement, ...]
    memory_mib: int = 0

    @property
    def size(self) -> int:
        """Memory slices one instance occupies."""
        return self.placements[0][1] if self.placements else 0

    def full_ci(self) -> CiSpec:
        return (FULL_CI_PROFILE.get(self.slice_count, 0), 0, self.slice_count)


@dataclass(frozen=True)
class Wanted:
    profile: str
    start: int | None = None  # a pinned placement start


@dataclass(frozen=True)
class Existing:
    """A GPU instance the GPU has now."""
    gi_id: int
    profile_id: int
    profile: str
    start: int
    size: int
    cis: tuple[CiSpec, ...] = ()
    users: tuple[str, ...] = ()  # who uses it ("VM x (vGPU)", "pid 42 python3"): it must not be destroyed

    def label(self) -> str:
        used = f", in use by {', '.join(self.users)}" if self.users else ""
        return f"{self.profile} (GI {self.gi_id}{used})"


@dataclass(frozen=True)
class Placed:
    profile: Profile
    start: int
    size: int


@dataclass
class Fit:
    keep: list[Existing] = field(default_factory=list)
    destroy: list[Existing] = field(default_factory=list)
    create: list[Placed] = field(default_factory=list)
    reason: str = ""  # why the layout cannot be made ('' when it can)

    @property
    def ok(self) -> bool:
        return not self.reason


def slices_text(start: int, size: int) -> str:
    return f"slice {start}" if size == 1 else f"slices {start}-{start + size - 1}"


def _or_list(items: Sequence[object]) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def geometry(profiles: Iterable[Profile]) -> tuple[int, int]:
    """(compute slices, memory slices) of a GPU, from its profiles: the largest profile spans it."""
    profiles = list(profiles)
    compute = max((p.slice_count for p in profiles), default=0)
    memory = max((s + n for p in profiles for s, n in p.placements), default=0)
    return compute, memory


def parse_layout(text: str, profiles: Sequence[Profile]) -> list[Wanted]:
    """`3g.40gb,1g.10gb*2,2g.20gb@4` → instances; "none" is the empty layout. Names are matched exactly,
    then ignoring case; a bare number is a profile id (what `nvidia-smi mig -cgi` takes)."""
    by_name = {p.name: p for p in profiles}
    if (text or "").strip().lower() in EMPTY_WORDS:
        return []
    offered = ", ".join(p.name for p in profiles) or "none"
    out: list[Wanted] = []
    for raw in text.split(","):
        item = raw.strip()
        m = _ITEM.match(item)
        if not m:
            raise LayoutError(f"{item!r} is not a layout item: write PROFILE, PROFILE*COUNT or PROFILE@START "
                              f"(e.g. 3g.40gb,1g.10gb*2)")
        name, start, count = m.group("name"), m.group("start"), m.group("count")
        if start is not None and count is not None:
            raise LayoutError(f"{item!r}: a pinned instance (@START) is one instance; list each one")
        prof = by_name.get(name) or next((p for p in profiles if p.name.lower() == name.lower()), None)
        if prof is None and name.isascii() and name.isdigit():
            prof = next((p for p in profiles if p.profile_id == int(name)), None)
        if prof is None:
            raise LayoutError(f"this GPU has no MIG profile {name!r}; it offers: {offered}")
        n = int(count) if count is not None else 1
        if not 1 <= n <= 64:
            raise LayoutError(f"{item!r}: the count must be between 1 and 64")
        out += [Wanted(prof.name, int(start) if start is not None else None)] * n
    return out


def format_layout(wanted: Iterable[Wanted], profiles: Sequence[Profile]) -> str:
    """The canonical text of a layout: largest profiles first, repeats as NAME*N, pins as NAME@START."""
    wanted = list(wanted)
    if wanted and all(w.start is not None for w in wanted):  # a fully pinned layout reads left to right
        return ",".join(f"{w.profile}@{w.start}" for w in sorted(wanted, key=lambda w: w.start or 0))
    order = {p.name: (-p.slice_count, -p.size, i) for i, p in enumerate(profiles)}
    items = sorted(wanted, key=lambda w: (order.get(w.profile, (0, 0, 99)), w.start is None, w.start or 0))
    parts: list[str] = []
    for name in dict.fromkeys(w.profile for w in items):
        mine = [w for w in items if w.profile == name]
        parts += [f"{name}@{w.start}" for w in mine if w.start is not None]
        free = sum(1 for w in mine if w.start is None)
        if free:
            parts.append(name if free == 1 else f"{name}*{free}")
    return ",".join(parts) or "none"


# -- fitting ------------------------------------------------------------------------------------------

@dataclass
class _Miss:
    """The deepest point a search got to without placing an item: for the reason text."""
    depth: int = -1
    item: Wanted | None = None
    taken: list[tuple[Placement, str]] = field(default_factory=list)


def _static_reason(wanted: list[Wanted], by_name: dict[str, Profile], compute: int, memory: int) -> str:
    counts = Counter(w.profile for w in wanted)
    for name, n in counts.items():
        p = by_name[name]
        if n > p.max_instances:
            return f"the layout has {n} × {name}; the GPU allows at most {p.max_instances}"
        if not p.placements:
            return f"{name} has no placement on this GPU"
    need = sum(by_name[w.profile].slice_count for w in wanted)
    if need > compute:
        parts = " + ".join(f"{n} × {name} ({by_name[name].slice_count})" if n > 1 else
                           f"{name} ({by_name[name].slice_count})" for name, n in counts.items())
        return f"the layout needs {need} compute slices ({parts}); the GPU has {compute}"
    mem = sum(by_name[w.profile].size for w in wanted)
    if mem > memory:
        return f"the layout needs {mem} memory slices; the GPU has {memory}"
    for w in wanted:
        p = by_name[w.profile]
        if w.start is not None and w.start not in [s for s, _ in p.placements]:
            return (f"{p.name} cannot start at memory slice {w.start}: its placements start at "
                    f"{_or_list([s for s, _ in p.placements])}")
    return ""


def _overlaps(a: Placement, b: Placement) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _search(items: list[Wanted], by_name: dict[str, Profile], taken: list[tuple[Placement, str]],
            miss: _Miss) -> list[Placement] | None:
    """Backtracking over placements. Identical unpinned items take placements in increasing order, so
    permutations of the same instances are never tried twice."""
    out: list[Placement] = []

    def go(i: int, floor: int) -> bool:
        if i == len(items):
            return True
        w = items[i]
        p = by_name[w.profile]
        cands = [pl for pl in p.placements if w.start is None or pl[0] == w.start]
        same_as_prev = i > 0 and items[i - 1] == w and w.start is None
        for k, pl in enumerate(cands):
            if same_as_prev and k < floor:
                continue
            if any(_overlaps(pl, t) for t, _ in taken):
                continue
            taken.append((pl, f"the layout's {p.name}"))
            out.append(pl)
            if go(i + 1, k + 1):
                return True
            taken.pop()
            out.pop()
        if i > miss.depth:
            miss.depth, miss.item, miss.taken = i, w, list(taken)
        return False

    return list(out) if go(0, 0) else None


def _miss_reason(miss: _Miss, by_name: dict[str, Profile]) -> str:
    w = miss.item
    assert w is not None
    p = by_name[w.profile]
    cands = [pl for pl in p.placements if w.start is None or pl[0] == w.start]
    starts = _or_list([s for s, _ in cands])
    noun = "slice" if p.size == 1 else "slices"
    blockers: list[str] = []
    for t, label in sorted(miss.taken):
        if any(_overlaps(t, c) for c in cands):
            blockers.append(f"{slices_text(*t)} {'is' if t[1] == 1 else 'are'} taken by {label}"
                            if not blockers else f"{slices_text(*t)} by {label}")
    return (f"{p.name} needs {p.size} free memory {noun} starting at {starts}; "
            + (", ".join(blockers) if blockers else "none is free"))


def fit(profiles: Sequence[Profile], wanted: list[Wanted], existing: Sequence[Existing] = ()) -> Fit:
    """Place `wanted` on a GPU that has `existing` instances: keep the most existing instances that
    still let the rest fit (always the ones in use), destroy the others, create the rest."""
    by_name = {p.name: p for p in profiles}
    for e in existing:  # a profile only NVML's instance list knows still needs a name and size
        by_name.setdefault(e.profile, Profile(e.profile, e.profile_id, 0, 1, ((e.start, e.size),)))
    compute, memory = geometry(profiles)
    reason = _static_reason(wanted, by_name, compute, memory)
    if reason:
        return Fit(reason=reason)
    counts = Counter(w.profile for w in wanted)
    busy = [e for e in existing if e.users]
    busy_count = Counter(e.profile for e in busy)
    for name, n in busy_count.items():
        if n > counts.get(name, 0):
            gone = [e for e in busy if e.profile == name][counts.get(name, 0):]
            return Fit(reason="; ".join(f"GI {e.gi_id} ({e.profile}, {slices_text(e.start, e.size)}) is in use "
                                        f"by {', '.join(e.users)}" for e in gone)
                       + f": {'the layout' if wanted else 'removing every instance'} would destroy "
                       + ("it" if len(gone) == 1 else "them"))
    keepable = [e for e in existing if e.profile in counts and not e.users]
    last_miss = _Miss()
    # items to place: pinned first, then larger instances (fewer placements) first
    for k in range(len(keepable), -1, -1):
        for extra in combinations(keepable, k):
            kept = busy + list(extra)
            rest = _unmatched(wanted, kept)
            if rest is None:
                continue
            items = sorted(rest, key=lambda w: (w.start is None, -by_name[w.profile].size, w.profile,
                                                w.start or 0))
            taken = [((e.start, e.size), e.label()) for e in kept]
            miss = _Miss()
            found = _search(items, by_name, taken, miss)
            if found is not None:
                kept_ids = {id(e) for e in kept}
                return Fit(keep=sorted(kept, key=lambda e: e.start),
                           destroy=[e for e in existing if id(e) not in kept_ids],
                           create=sorted((Placed(by_name[w.profile], s, n) for w, (s, n) in zip(items, found)),
                                         key=lambda c: c.start))
            last_miss = miss  # the last one tried keeps the fewest instances: the truest reason
    return Fit(reason=_miss_reason(last_miss, by_name))


def _unmatched(wanted: list[Wanted], kept: list[Existing]) -> list[Wanted] | None:
    """The wanted items left once each kept instance takes one (a pinned item needs its start); None
    when a kept instance matches no item."""
    rest = list(wanted)
    for e in sorted(kept, key=lambda e: e.start):
        pick = next((w for w in rest if w.profile == e.profile and w.start == e.start), None) or \
            next((w for w in rest if w.profile == e.profile and w.start is None), None)
        if pick is None:
            return None
        rest.remove(pick)
    return rest


def maximal_layouts(profiles: Sequence[Profile]) -> list[list[Wanted]]:
    """Every placement of instances of `profiles` that is valid and to which no further instance can be
    added, as pinned layouts (NAME@START). Over the base profiles of an A100/H100/H200 there are 19."""
    compute, _ = geometry(profiles)
    cands = [(p, pl) for p in profiles for pl in p.placements]

    def can_add(chosen: list[tuple[Profile, Placement]], c: tuple[Profile, Placement]) -> bool:
        p, pl = c
        return (sum(q.slice_count for q, _ in chosen) + p.slice_count <= compute
                and sum(1 for q, _ in chosen if q.name == p.name) < p.max_instances
                and not any(_overlaps(pl, t) for _, t in chosen))

    found: list[list[Wanted]] = []

    def grow(chosen: list[tuple[Profile, Placement]], i: int) -> None:
        if not any(can_add(chosen, c) for c in cands):
            found.append([Wanted(p.name, pl[0]) for p, pl in sorted(chosen, key=lambda c: c[1])])
        for k in range(i, len(cands)):
            if can_add(chosen, cands[k]):
                grow(chosen + [cands[k]], k + 1)

    grow([], 0)
    return sorted(found, key=lambda lay: [(w.start, w.profile) for w in lay])
