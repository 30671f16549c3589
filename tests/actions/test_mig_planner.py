"""The MIG planner: layout syntax, placement search in any order, reasons for layouts that cannot fit,
and — through the real pynvml wrappers over the simulated library — profiles read from NVML and every
maximal layout of every bundled GPU applied with explicit placements (passed by reference)."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pynvml
import pytest

from nodeconsole.actions.mig import layout_ops
from nodeconsole.actions.mig_planner import (
    Existing,
    LayoutError,
    Profile,
    Wanted,
    fit,
    format_layout,
    maximal_layouts,
    parse_layout,
)
from nodeconsole.actions.mig_steps import current_layout, read_mig_state
from nodeconsole.actions.plan import build_step
from nodeconsole.console import mig_profiles, nvml_mig
from nodeconsole.console.demo.nvml_sim import SimulatedNvml, uninstall
from nodeconsole.console.host_programs import NoCommands
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams
from tests.console.nvml_states import H100, mig_state

H100_TABLE = mig_profiles.table_for_model("H100-80GB-HBM3")
PROFILES = [Profile(p.name, p.profile_id, p.slice_count, p.max_instances, p.placements, p.memory_mib)
            for p in H100_TABLE.profiles]
BASE_IDS = (19, 14, 9, 5, 0)  # 1g, 2g, 3g, 4g, 7g on A100/H100/H200


@pytest.fixture(autouse=True)
def _no_library_left_behind():
    yield
    uninstall()


def _base(profiles):
    return [p for p in profiles if p.profile_id in BASE_IDS] if any(p.profile_id == 19 for p in profiles) \
        else [p for p in profiles if "+" not in p.name]


def _oracle_maximal(profiles) -> set[tuple[tuple[str, int], ...]]:
    """Brute force, independent of the planner: sets of (profile, placement) that respect overlap, the
    compute budget and per-profile maxima, and admit no further instance."""
    compute = max(p.slice_count for p in profiles)
    cands = [(p, pl) for p in profiles for pl in p.placements]

    def ok(sel):
        if sum(p.slice_count for p, _ in sel) > compute:
            return False
        if any(n > next(p.max_instances for p in profiles if p.name == name)
               for name, n in Counter(p.name for p, _ in sel).items()):
            return False
        return all(not (a[0] < b[0] + b[1] and b[0] < a[0] + a[1])
                   for i, (_, a) in enumerate(sel) for _, b in sel[i + 1:])

    out = set()

    def go(sel, i):
        if not any(ok(sel + [c]) for c in cands if c not in sel):
            out.add(tuple(sorted((p.name, pl[0]) for p, pl in sel)))
        for k in range(i, len(cands)):
            if ok(sel + [cands[k]]):
                go(sel + [cands[k]], k + 1)

    go([], 0)
    return out


# -- layout text --------------------------------------------------------------------------------------

def test_layout_syntax_counts_pins_ids_and_case():
    assert parse_layout("3g.40gb,2g.20gb,1g.10gb*2", PROFILES) == [
        Wanted("3g.40gb"), Wanted("2g.20gb"), Wanted("1g.10gb"), Wanted("1g.10gb")]
    assert parse_layout(" 3G.40GB@4 , 9 ", PROFILES) == [Wanted("3g.40gb", 4), Wanted("3g.40gb")]
    assert parse_layout("none", PROFILES) == [] and parse_layout("", PROFILES) == []
    assert format_layout(parse_layout("1g.10gb,3g.40gb,1g.10gb,2g.20gb", PROFILES), PROFILES) == \
        "3g.40gb,2g.20gb,1g.10gb*2"
    assert format_layout(parse_layout("1g.10gb@6,3g.40gb@0,2g.20gb@4", PROFILES), PROFILES) == \
        "3g.40gb@0,2g.20gb@4,1g.10gb@6"


@pytest.mark.parametrize("text, says", [
    ("3g.20gb", "no MIG profile '3g.20gb'; it offers: 1g.10gb, 1g.10gb+me"),
    ("3g.40gb,,1g.10gb", "not a layout item"),
    ("1g.10gb*0", "count must be between 1 and 64"),
    ("1g.10gb@2*2", "a pinned instance"),
    ("3g.40gb;1g.10gb", "not a layout item"),
])
def test_bad_layout_text_is_a_clear_error(text, says):
    with pytest.raises(LayoutError, match=None) as e:
        parse_layout(text, PROFILES)
    assert says in str(e.value)


# -- fitting ------------------------------------------------------------------------------------------

def test_order_that_defeats_the_driver_fits_with_explicit_placements():
    # created in this order without placements the driver fails the 3g with Insufficient Resources
    f = fit(PROFILES, parse_layout("1g.10gb,1g.10gb,2g.20gb,3g.40gb", PROFILES))
    assert f.ok and not f.keep and not f.destroy
    assert [(c.profile.name, c.start, c.size) for c in f.create] == [
        ("2g.20gb", 0, 2), ("1g.10gb", 2, 1), ("1g.10gb", 3, 1), ("3g.40gb", 4, 4)]


@pytest.mark.parametrize("layout, reason", [
    ("1g.10gb*8", "the layout has 8 × 1g.10gb; the GPU allows at most 7"),
    ("4g.40gb,3g.40gb,1g.10gb", "needs 8 compute slices (4g.40gb (4) + 3g.40gb (3) + 1g.10gb (1)); the GPU has 7"),
    ("3g.40gb*2,1g.10gb", "the layout needs 9 memory slices; the GPU has 8"),
    ("3g.40gb@2", "3g.40gb cannot start at memory slice 2: its placements start at 0 or 4"),
    ("1g.20gb@2,1g.20gb@6,3g.40gb",
     "3g.40gb needs 4 free memory slices starting at 0 or 4; slices 2-3 are taken by the layout's 1g.20gb, "
     "slices 6-7 by the layout's 1g.20gb"),
    ("2g.20gb@2,4g.40gb", "4g.40gb needs 4 free memory slices starting at 0; slices 2-3 are taken by the "
                          "layout's 2g.20gb"),
])
def test_layouts_that_cannot_fit_say_why(layout, reason):
    f = fit(PROFILES, parse_layout(layout, PROFILES))
    assert not f.ok and reason in f.reason


# the demo's MIG GPU: GI 1 carries VM mig-infer-a's vGPU
DEMO = [Existing(1, 9, "3g.40gb", 0, 4, ((2, 0, 3),), ("VM mig-infer-a (vGPU)",)),
        Existing(5, 14, "2g.20gb", 4, 2, ((1, 0, 2),)), Existing(13, 19, "1g.10gb", 6, 1, ((0, 0, 1),))]


def test_instances_in_use_are_kept_and_named_when_in_the_way():
    f = fit(PROFILES, parse_layout("4g.40gb,3g.40gb", PROFILES), DEMO)
    assert f.reason == ("4g.40gb needs 4 free memory slices starting at 0; slices 0-3 are taken by "
                        "3g.40gb (GI 1, in use by VM mig-infer-a (vGPU))")
    f = fit(PROFILES, parse_layout("3g.40gb,2g.20gb,1g.10gb*2", PROFILES), DEMO)
    assert "slices 0-3 are taken by 3g.40gb (GI 1, in use by VM mig-infer-a (vGPU))" in f.reason
    f = fit(PROFILES, parse_layout("7g.80gb", PROFILES), DEMO)
    assert f.reason == "GI 1 (3g.40gb, slices 0-3) is in use by VM mig-infer-a (vGPU): the layout would destroy it"
    f = fit(PROFILES, parse_layout("3g.40gb*2", PROFILES), DEMO)  # keeps GI 1, replaces the others
    assert f.ok and [e.gi_id for e in f.keep] == [1] and [e.gi_id for e in f.destroy] == [5, 13]
    assert [(c.profile.name, c.start) for c in f.create] == [("3g.40gb", 4)]


def test_a_layout_in_place_keeps_everything():
    f = fit(PROFILES, parse_layout("1g.10gb,2g.20gb,3g.40gb", PROFILES), DEMO)
    assert f.ok and f.keep == sorted(DEMO, key=lambda e: e.start) and not f.create and not f.destroy
    f = fit(PROFILES, parse_layout("3g.40gb@0,2g.20gb@4,1g.10gb@6", PROFILES), DEMO)
    assert f.ok and not f.create and not f.destroy


@pytest.mark.parametrize("model", sorted(mig_profiles.TABLES))
def test_maximal_layouts_match_a_brute_force_oracle(model):
    table = mig_profiles.table_for_model(model)
    base = _base([Profile(p.name, p.profile_id, p.slice_count, p.max_instances, p.placements)
                  for p in table.profiles])
    got = maximal_layouts(base)
    assert {tuple(sorted((w.profile, w.start) for w in lay)) for lay in got} == _oracle_maximal(base)
    if table.memory_slices == 8:
        assert len(got) == 19  # REFERENCE.md §3: exactly 19 on A100/H100/H200
    assert all(fit(base, lay).ok for lay in got)


# -- through pynvml over the simulated library -------------------------------------------------------

def _host(sim: SimulatedNvml, tmp_path) -> SimpleNamespace:
    seams = Seams(root=Root(tmp_path), libvirt_uri=None, nvml_lib=sim)
    return SimpleNamespace(seams=seams, root=seams.root, commands=NoCommands())


def _apply(host, st, f, mode_change=False):
    for op in layout_ops(H100, st, f, 1, mode_change):
        step = build_step(host, op)
        if step is not None:
            step.apply()
            assert step.verify() is None, step.title


@pytest.mark.parametrize("model", sorted(mig_profiles.TABLES))
def test_every_maximal_layout_applies_through_pynvml(model, tmp_path):
    sim = SimulatedNvml(mig_state(model), privileged=True)
    host = _host(sim, tmp_path)
    st = read_mig_state(host, H100)
    table = mig_profiles.table_for_model(model)
    # profiles come from NVML (MIG is on): names, ids, placements as the driver reports them
    assert [(p.name, p.profile_id, p.placements) for p in sorted(st.profiles, key=lambda p: p.profile_id)] == \
        [(p.name, p.profile_id, p.placements) for p in sorted(table.profiles, key=lambda p: p.profile_id)]
    for layout in maximal_layouts(_base(st.profiles)):
        st = read_mig_state(host, H100)
        f = fit(st.profiles, layout, st.instances)
        assert f.ok, f.reason
        _apply(host, st, f)
        mode, have = current_layout(host, H100)
        by_id = {p.profile_id: p.name for p in st.profiles}
        assert mode == 1 and all(cis == 1 for *_, cis in have)
        assert sorted((by_id[p], s) for p, s, _, _ in have) == sorted((w.profile, w.start) for w in layout)
    # placements went by reference, never left to the driver
    assert sim.calls["nvmlDeviceCreateGpuInstanceWithPlacement"] > 0
    assert sim.calls["nvmlGpuInstanceCreateComputeInstanceWithPlacement"] > 0
    assert sim.calls["nvmlDeviceCreateGpuInstance"] == 0


def test_the_driver_order_trap_and_the_planned_way(tmp_path):
    sim = SimulatedNvml(mig_state("H100-80GB-HBM3"), privileged=True).install()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for pid in (19, 19, 14):
        nvml_mig.create_gpu_instance(h, pid)  # the driver places them: highest free start first
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        nvml_mig.create_gpu_instance(h, 9)
    for gi in nvml_mig.gpu_instances(h, nvml_mig.gi_profiles(h)):
        nvml_mig.destroy_gpu_instance(gi.handle)
    pynvml.nvmlShutdown()
    host = _host(sim, tmp_path)
    st = read_mig_state(host, H100)
    _apply(host, st, fit(st.profiles, parse_layout("1g.10gb,1g.10gb,2g.20gb,3g.40gb", st.profiles)))
    assert current_layout(host, H100) == (1, [(9, 4, 4, 1), (14, 0, 2, 1), (19, 2, 1, 1), (19, 3, 1, 1)])


def test_mig_off_profiles_come_from_the_bundled_table(tmp_path):
    sim = SimulatedNvml(mig_state("A30-24GB", current=0), privileged=True)
    st = read_mig_state(_host(sim, tmp_path), H100)
    assert st.capable and st.current == 0 and st.table == "A30-24GB"
    assert [p.name for p in st.profiles] == [p.name for p in mig_profiles.table_for_model("A30-24GB").profiles]
