"""VM memory sizing within what its NUMA node(s) can hold in hugepages (console/vm_sizing.py), the rule the
doctor's vm-memory check and its fix plan share."""
from __future__ import annotations

from dataclasses import replace

from nodeconsole.console.model import HugepageUse, Load, NodeUse, Vm
from nodeconsole.console.vm_sizing import KEEP_FREE_KIB, memory_target
from tests.console.test_doctor import GIB, ready_snap

GPU = 80 * GIB


def _with_node1(free_pages: int, free_mem_gib: int, total_pages: int = 160):
    use = (NodeUse(0, memory_total_kib=256 * GIB, memory_free_kib=200 * GIB),
           NodeUse(1, memory_total_kib=256 * GIB, memory_free_kib=free_mem_gib * GIB,
                   hugepages=(HugepageUse(1048576, total_pages, free_pages),)))
    return replace(ready_snap(), load=Load(nodes=use))


def test_plain_vm_gets_factor_times_its_gpus_rounded_up():
    vm = Vm("web", "shut off", 2, memory_kib=4 * GIB)
    t = memory_target(_with_node1(0, 50), vm, 81559 * 1024, 2)
    assert t.size_kib == t.want_kib == 160 * GIB and t.page_kib is None and not t.capped


def test_running_hugepage_vm_counts_its_own_pages_and_asks_for_more():
    snap = _with_node1(free_pages=0, free_mem_gib=80)  # train holds all 160 pages of node 1
    train = replace(snap.vm("train"), memory_kib=128 * GIB)
    t = memory_target(snap, train, GPU, 2)
    # wants 160: its own 128 pages + 0 free → 32 more, which 80 GiB free memory (less the kept 4) can become
    assert t.size_kib == 160 * GIB and t.nodes == (1,) and t.page_kib == 1048576
    assert t.more_pages == {1: 32} and not t.capped


def test_capped_at_what_the_node_can_hold():
    snap = _with_node1(free_pages=0, free_mem_gib=20)
    train = replace(snap.vm("train"), memory_kib=128 * GIB)
    t = memory_target(snap, train, GPU, 2)
    room = 128 + (20 * GIB - KEEP_FREE_KIB) // GIB  # its own pages + what free memory can become
    assert t.size_kib == room * GIB < t.want_kib and "node(s) 1 can hold only" in t.capped
    assert t.more_pages == {1: room - 128}


def test_shut_off_vm_has_no_pages_of_its_own():
    snap = _with_node1(free_pages=10, free_mem_gib=20)
    train = replace(snap.vm("train"), state="shut off", memory_kib=128 * GIB)
    t = memory_target(snap, train, GPU, 2)
    assert t.size_kib == (10 + 16) * GIB and t.more_pages == {1: 16}
