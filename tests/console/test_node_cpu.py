"""CPU use per NUMA node: the mean of each node's online CPUs, checked against a plain computation over
random layouts (offline CPUs, CPU-less nodes, CPUs without a node, sparse ids)."""
from __future__ import annotations

import random

from nodeconsole.console.model import Cpu, NodeUse
from nodeconsole.console.sources.pressure import node_cpu_percent


def _plain(nodes, cpus, percent):
    online = sorted(c.id for c in cpus if c.online)
    node_of = {c.id: c.numa_node for c in cpus}
    out = []
    for n in nodes:
        values = [p for cpu, p in zip(online, percent) if node_of.get(cpu) == n.node]
        out.append(round(sum(values) / len(values), 1) if values else None)
    return out


def test_node_means_match_a_plain_computation():
    rng = random.Random(15)
    for _ in range(200):
        ids = sorted(rng.sample(range(64), rng.randint(1, 24)))
        node_ids = sorted(rng.sample(range(8), rng.randint(1, 4)))
        cpus = tuple(Cpu(id=i, package=0, core=i, numa_node=rng.choice([*node_ids, None]), online=rng.random() < 0.8)
                     for i in ids)
        nodes = tuple(NodeUse(node=n) for n in node_ids)
        percent = tuple(round(rng.uniform(0, 100), 1) for c in cpus if c.online)
        got = node_cpu_percent(nodes, cpus, percent)
        assert [n.cpu_percent for n in got] == _plain(nodes, cpus, percent)
        assert [n.node for n in got] == node_ids
        assert node_cpu_percent(nodes, cpus, percent[:-1] + (1.0, 2.0)) == nodes  # positions would not match
