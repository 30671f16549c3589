"""read_sysfs against real captured hosts (../shared/hosts), with hwloc's lstopo 2.9 as the oracle.

Each NAME.tar.bz2 holds a /sys + /proc tree; NAME.lstopo.json is what lstopo reported for it.
"""
from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from nodeconsole.console.cpulist import parse_cpulist
from nodeconsole.console.root import Root
from nodeconsole.console.sources.sysfs import read_sysfs
from nodeconsole.console.sources.types import SysfsData

NO_TREES = "<no captured trees>"


def _tree_names() -> list[str]:
    """Names known at collection time, so each tree is its own test. When the folder is absent the
    single placeholder still runs and the `shared_dir` fixture skips it (or fails it in CI)."""
    env = os.environ.get("NODECONSOLE_SHARED")
    hosts = (Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared") / "hosts"
    return sorted(p.name[: -len(".tar.bz2")] for p in hosts.glob("*.tar.bz2")) or [NO_TREES]


# Run in parallel (pytest-xdist, --dist loadgroup), the tests of one tree stay in one worker, which
# extracts and reads it once (the cost of these tests) rather than once per worker.
TREES = [pytest.param(name, marks=pytest.mark.xdist_group(f"capture:{name}")) for name in _tree_names()]


class _Hosts:
    """Extracts each capture once per session, on first use, and reads it once."""

    def __init__(self, hosts_dir: Path, workdir: Path) -> None:
        self.hosts_dir, self.workdir = hosts_dir, workdir
        self.cache: dict[str, tuple[Path, SysfsData, dict]] = {}

    def get(self, name: str) -> tuple[Path, SysfsData, dict]:
        if name == NO_TREES:
            pytest.fail(f"no NAME.tar.bz2 captures found in {self.hosts_dir}")
        if name not in self.cache:
            oracle = self.hosts_dir / f"{name}.lstopo.json"
            assert oracle.exists(), f"capture {name} has no lstopo oracle {oracle.name}"
            dest = self.workdir / name
            with tarfile.open(self.hosts_dir / f"{name}.tar.bz2") as tf:
                # the "data" filter (3.11.4+) refuses members that would land outside dest
                tf.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            root = _find_root(dest)
            self.cache[name] = (root, read_sysfs(Root(root)), json.loads(oracle.read_text()))
        return self.cache[name]


def _find_root(dest: Path) -> Path:
    """The folder holding sys/: the archive's folder name can differ from the file's, or be absent."""
    if (dest / "sys").is_dir():
        return dest
    found = [p for p in dest.iterdir() if (p / "sys").is_dir()]
    assert len(found) == 1, f"expected one folder with sys/ in {dest}, found {found}"
    return found[0]


@pytest.fixture(scope="session")
def hosts(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> _Hosts:
    return _Hosts(shared_dir / "hosts", tmp_path_factory.mktemp("hosts"))


def _cpus(text: str) -> list[int]:
    return list(parse_cpulist(text))


@pytest.mark.parametrize("name", TREES)
def test_pus_online_and_offline(hosts: _Hosts, name: str) -> None:
    _, data, oracle = hosts.get(name)
    online = [c.id for c in data.cpus if c.online]
    offline = [c.id for c in data.cpus if not c.online]
    # lstopo's PUs are the online CPUs (its --disallowed view keeps those outside the cgroup, so they are
    # in `pus` too); offline CPUs are no PU, only part of the complete cpuset.
    assert online == oracle["pus"]
    assert offline == _cpus(oracle["offline_or_missing_pus"])
    assert set(_cpus(oracle["disallowed_pus"])) <= set(online)
    for cpu in data.cpus:
        if not cpu.online:  # no topology files for offline CPUs
            assert (cpu.package, cpu.core) == (-1, -1)
        else:
            assert cpu.package >= 0 and cpu.core >= 0 and cpu.id in cpu.siblings


@pytest.mark.parametrize("name", TREES)
def test_packages(hosts: _Hosts, name: str) -> None:
    _, data, oracle = hosts.get(name)
    ours: dict[int, list[int]] = {}
    for cpu in data.cpus:
        if cpu.online:
            ours.setdefault(cpu.package, []).append(cpu.id)
    assert ours == {p["os_index"]: _cpus(p["cpuset"]) for p in oracle["packages"]}


@pytest.mark.parametrize("name", TREES)
def test_cores(hosts: _Hosts, name: str) -> None:
    _, data, oracle = hosts.get(name)
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu in data.cpus:
        if cpu.online:
            cores.setdefault((cpu.package, cpu.core), []).append(cpu.id)
    # (package, core) identifies exactly the cores lstopo sees, each with the same PUs
    assert len(cores) == len(oracle["cores"])
    assert sorted((pkg, tuple(pus)) for (pkg, _), pus in cores.items()) == \
        sorted((c["package"], tuple(c["pus"])) for c in oracle["cores"])
    for (_, _), pus in cores.items():
        for cpu in pus:
            assert next(c for c in data.cpus if c.id == cpu).siblings == tuple(pus)


@pytest.mark.parametrize("name", TREES)
def test_numa_nodes(hosts: _Hosts, name: str) -> None:
    _, data, oracle = hosts.get(name)
    assert all(n.online for n in data.numa_nodes)  # these captures have no node dir for offline nodes
    ours = {n.id: (list(n.cpus), n.memory_kib * 1024) for n in data.numa_nodes}
    assert ours == {n["os_index"]: (_cpus(n["cpuset"]), n["local_memory"]) for n in oracle["numa_nodes"]}
    node_of = {cpu: n["os_index"] for n in oracle["numa_nodes"] for cpu in _cpus(n["cpuset"])}
    for cpu in data.cpus:
        if cpu.online:  # an online CPU in no node (offline-cpu0-node0's package 0) has none
            assert cpu.numa_node == node_of.get(cpu.id), f"cpu{cpu.id}"


def _secondary_bus(root: Path, address: str) -> int:
    config = (root / "sys/bus/pci/devices" / address / "config").read_bytes()
    return config[0x19]


@pytest.mark.parametrize("name", TREES)
def test_pci_functions(hosts: _Hosts, name: str) -> None:
    root, data, oracle = hosts.get(name)
    ours = {d.address: d for d in data.pci_devices}
    theirs = {p["busid"]: p for p in oracle["pci_devices"]}
    assert {a for a, d in ours.items() if not d.is_bridge} == {a for a, p in theirs.items() if not p["is_bridge"]}
    # Bridges: lstopo drops a bridge whose config space has secondary bus 0 (an unconfigured root port
    # with nothing behind it, e.g. 0000:00:11.0 in 32em64t-2n8c+dax+nvme+mic+dimms); we keep it.
    our_bridges = {a for a, d in ours.items() if d.is_bridge}
    their_bridges = {a for a, p in theirs.items() if p["is_bridge"]}
    assert their_bridges <= our_bridges
    for address in our_bridges - their_bridges:
        assert _secondary_bus(root, address) == 0, f"{address} is missing from lstopo for another reason"
    for address, p in theirs.items():
        d = ours[address]
        assert (f"{d.vendor_id:04x}", f"{d.device_id:04x}", f"{d.class_id >> 8:04x}") == \
            (p["vendor"], p["device"], p["class"]), address
        assert d.is_bridge == p["is_bridge"], address
        upstream = [u for u in p["upstream"] if not u.startswith("hostbridge")]
        assert d.parent == (upstream[0] if upstream else None), address


@pytest.mark.parametrize("name", TREES)
def test_pci_numa_locality(hosts: _Hosts, name: str) -> None:
    _, data, oracle = hosts.get(name)
    ours = {d.address: d for d in data.pci_devices}
    for p in oracle["pci_devices"]:
        # one node → that node; a locality spanning several nodes (the machine) → no single node
        expected = p["numa_nodes"][0] if len(p["numa_nodes"]) == 1 else None
        assert ours[p["busid"]].numa_node == expected, p["busid"]
