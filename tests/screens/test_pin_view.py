"""The rebalance map (render only): letters per VM (running, paused and shut-off VMs drawn apart), shared
CPUs, cross-node vCPUs, offline CPUs."""
from __future__ import annotations

from nodeconsole.screens.pin_view import STOPPED_STYLE, overlaps, placements, rebalance_map
from tests.actions.test_pin_planner import gpu_vm, make_host


def _host():
    # 2 nodes x 2 cores x 2 threads: node 0 = CPUs 0,1,4,5; node 1 = 2,3,6 and CPU 7 offline
    return make_host(2, 2, 2, offline=frozenset({7}), gpus=[("0000:9b:00.0", 1)], vms=[
        gpu_vm("a-cross", 2, ("0000:9b:00.0",), pins=((1,), (3,))),
        gpu_vm("b-db", 1, (), pins=((3,),)),
        gpu_vm("c-free", 2, ("0000:9b:00.0",)),
        gpu_vm("d-off", 1, (), pins=((5,),), state="shut off"),
        gpu_vm("e-all", 1, (), pins=((0, 1, 2, 3, 4, 5, 6),)),  # every online CPU: no pin at all
    ])


def test_placements_and_overlaps():
    places = {p.vm: p for p in placements(_host())}
    # a shut-off VM's pins are shown too: its CPUs are held for its next start
    assert set(places) == {"a-cross", "b-db", "c-free", "d-off", "e-all"}
    assert places["d-off"].cpus == (5,) and places["d-off"].stopped and not places["a-cross"].stopped
    assert places["a-cross"].cpus == (1, 3) and places["a-cross"].nodes == (0, 1)
    assert places["a-cross"].status == "cross-numa" and places["c-free"].status == "unpinned"
    assert places["e-all"].cpus == ()
    assert overlaps(list(places.values())) == {3: ("a-cross", "b-db")}


def test_map_marks_shared_cross_node_and_offline_cpus():
    text = rebalance_map(_host())
    plain = text.plain
    lines = plain.splitlines()
    node0 = lines[lines.index("node 0") + 1]
    node1 = lines[lines.index("node 1  (GPU0)") + 1]
    assert node0 == "·A·D"  # CPUs 0,1,4,5: a-cross on CPU 1, shut-off d-off on CPU 5
    assert node1 == "·!·"  # CPUs 2,3,6: 3 shared by a-cross and b-db
    assert lines[lines.index("node ?") + 1] == "x"  # offline CPU 7: no topology, no node
    assert "A a-cross  CPU 1,3 on node 0-1  ✖ GPU on node 1" in plain
    assert "C c-free  unpinned  (GPU VM: n proposes a pinning)" in plain
    assert "shared CPUs: 3 a-cross+b-db" in plain
    assert "D d-off  (shut off)  CPU 5 on node 0" in plain
    assert "shut off (its CPUs held for its next start)" in plain.splitlines()[-1]  # the legend
    # CPU 1 of the cross VM sits off its GPU's node: drawn red
    start = plain.index(node0) + 1
    styles = [str(s.style) for s in text.spans if s.start == start]
    assert any("red" in s for s in styles), styles
    # the running VM's letter and the shut-off VM's are drawn apart
    running = {str(s.style) for s in text.spans if s.start == start}
    stopped = {str(s.style) for s in text.spans if s.start == start + 2}
    assert stopped == {STOPPED_STYLE} and not running & stopped


def test_a_stopped_vm_pinned_onto_a_running_vms_cpu_is_a_shared_cpu():
    snap = make_host(1, 2, 1, vms=[gpu_vm("run", 1, (), pins=((1,),)),
                                   gpu_vm("stop", 1, (), pins=((1,),), state="shut off"),
                                   gpu_vm("wait", 1, (), pins=((0,),), state="paused")])
    plain = rebalance_map(snap).plain
    assert plain.splitlines()[2] == "C!"  # CPU 0: the paused VM; CPU 1: both others
    assert "shared CPUs: 1 run+stop" in plain and "C wait  (paused)  CPU 0 on node 0" in plain
