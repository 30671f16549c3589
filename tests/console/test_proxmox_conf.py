"""Proxmox VE VM configs (qm.conf as pve-docs describes it) and pci.cfg mappings: what Proxmox derives.

Each config is small and written from the documentation (qm.conf options, the PCI passthrough chapter,
resource mappings); each test asserts what Proxmox makes of it."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.console.root import Root
from nodeconsole.console.vms.proxmox_conf import (
    CLOUDINIT,
    PENDING,
    HostPci,
    parse_conf,
    parse_hostpci,
    pci_host_id,
    settings,
    with_pending,
)
from nodeconsole.console.vms.proxmox_mapping import (
    PciMappings,
    node_name,
    parse_pci_cfg,
    resolve_hostpci,
)
from tests.console.sysfs_tree import FakeSys

P = "/etc/pve/qemu-server/100.conf"


def derived(text: str):  # type: ignore[no-untyped-def]
    conf = parse_conf(100, P, text)
    return conf, settings(conf.main, P)


def test_vcpus_are_sockets_times_cores():
    _, s = derived("cores: 8\nsockets: 2\nmemory: 65536\nname: train-a\n")
    assert (s.vcpus, s.sockets, s.cores, s.memory_mib, s.name) == (16, 2, 8, 65536, "train-a")


def test_vcpus_option_is_the_hotplugged_count():
    _, s = derived("cores: 4\nsockets: 2\nvcpus: 6\n")
    assert s.vcpus == 6


def test_vcpus_above_the_topology_is_reported_with_its_line():
    _, s = derived("cores: 2\nvcpus: 3\n")
    assert s.vcpus == 2
    assert s.problems == (f"{P}:2: vcpus: 3 is more than sockets × cores = 2",)


def test_defaults_one_cpu_and_512_mib():
    _, s = derived("name: tiny\n")
    assert (s.vcpus, s.memory_mib, s.hugepages, s.numa, s.affinity) == (1, 512, None, False, ())


def test_memory_current_form_and_balloon():
    _, s = derived("memory: current=8192\nballoon: 2048\n")
    assert (s.memory_mib, s.balloon_mib) == (8192, 2048)


def test_hugepages_1024_with_numa_and_cells():
    _, s = derived("memory: 16384\nnuma: 1\nhugepages: 1024\ncores: 8\n"
                   "numa0: cpus=0-3,hostnodes=0,memory=8192,policy=bind\n"
                   "numa1: cpus=4-7,hostnodes=1,memory=8192,policy=bind\n")
    assert s.hugepages == "1024" and s.numa and not s.problems
    assert [(c.index, c.cpus, c.hostnodes, c.memory_mib, c.policy) for c in s.cells] == [
        (0, (0, 1, 2, 3), (0,), 8192, "bind"), (1, (4, 5, 6, 7), (1,), 8192, "bind")]


def test_numa_cell_lists_joined_by_semicolons():
    _, s = derived("numa: 1\nnuma0: cpus=0-1;4-5,hostnodes=0;2-3,policy=interleave\n")
    assert (s.cells[0].cpus, s.cells[0].hostnodes, s.cells[0].policy) == ((0, 1, 4, 5), (0, 2, 3), "interleave")


def test_numa_cells_ignored_without_numa_1():
    _, s = derived("numa0: cpus=0-3,hostnodes=0,policy=bind\n")
    assert s.cells == ()


def test_hugepages_without_numa_is_reported():
    _, s = derived("memory: 4096\nhugepages: 2\n")
    assert s.hugepages == "2"
    assert s.problems == (f"{P}:2: hugepages: needs numa: 1 (Proxmox refuses to start the VM)",)


def test_hugepages_bad_size_is_reported_and_read_as_none():
    _, s = derived("numa: 1\nhugepages: 4\n")
    assert s.hugepages is None and s.problems == (f"{P}:2: hugepages: '4' is not any, 2 or 1024",)


def test_hostnodes_without_policy_is_reported():
    _, s = derived("numa: 1\nnuma0: cpus=0-3,hostnodes=0\n")
    assert s.cells == () and "needs a policy=" in s.problems[0] and s.problems[0].startswith(f"{P}:2: numa0:")


def test_affinity_whole_process():
    _, s = derived("affinity: 0-3,8-11\n")
    assert s.affinity == (0, 1, 2, 3, 8, 9, 10, 11)


def test_hostpci_full_address_with_options():
    h = parse_hostpci(0, "0000:41:00.0,pcie=1,x-vga=1,rombar=0,romfile=vbios.bin")
    assert (h.hosts, h.pcie, h.x_vga, h.mapping) == (("0000:41:00.0",), True, True, None)
    assert dict(h.options)["romfile"] == "vbios.bin"


def test_hostpci_address_without_domain_or_function():
    assert parse_hostpci(1, "41:00").hosts == ("0000:41:00",)
    assert parse_hostpci(1, "host=01:00.0;01:00.1").hosts == ("0000:01:00.0", "0000:01:00.1")
    assert pci_host_id("10000:5A:00.1") == "10000:5a:00.1"


def test_hostpci_mapping_mdev_and_driver():
    h = parse_hostpci(2, "mapping=gpu-pool,mdev=nvidia-660,driver=keep")
    assert (h.mapping, h.mdev, h.driver, h.hosts) == ("gpu-pool", "nvidia-660", "keep", ())


@pytest.mark.parametrize("value, why", [
    ("mapping=a,host=41:00.0", "exclude each other"), ("pcie=1", "either host=ADDR or mapping=ID"),
    ("41:00.0,bogus=1", "unknown option 'bogus'"), ("41:00.9", "not a PCI address"),
    ("41:00.0,pcie=maybe", "not a boolean"), ("41:00.0,driver=nouveau", "not vfio or keep"),
    ("41:00.0,vendor-id=10de1", "not a hex id")])
def test_hostpci_refused_values(value, why):
    with pytest.raises(ValueError, match=why):
        parse_hostpci(0, value)


def test_hostpci_bad_line_reported_others_kept():
    _, s = derived("hostpci0: 41:00.0,pcie=1\nhostpci1: 41:00.9\nhostpci16: 42:00.0\n")
    assert [h.index for h in s.hostpci] == [0]
    assert s.problems[0].startswith(f"{P}:2: hostpci1: ") and s.problems[1].startswith(f"{P}:3: hostpci16: ")


def test_sections_description_pending_cloudinit_snapshots():
    text = ("#GPU training VM\n#owner%3A ml-team\nboot: order=scsi0\ncores: 4\nhostpci0: 41:00.0\n"
            "lock: snapshot\nparent: before-driver\n\n"
            "[PENDING]\ndelete: hostpci0,!net1\naffinity: 0-7\ncores: 8\n\n"
            "[before-driver]\n#snapshot note\ncores: 2\nsnaptime: 1700000000\nvmstate: local:100/vm-100-state.raw\n\n"
            "[special:cloudinit]\nipconfig0: ip=dhcp\n")
    conf, s = derived(text)
    assert conf.errors == ()
    assert conf.main.description == "GPU training VM\nowner: ml-team"
    assert (s.vcpus, s.lock, [h.index for h in s.hostpci]) == (4, "snapshot", [0])
    assert conf.pending is not None and conf.pending.name == PENDING
    assert (conf.pending.delete, conf.pending.keys()) == (("hostpci0", "net1"), ("affinity", "cores"))
    assert [(sn.name, sn.description, sn.get("cores").value) for sn in conf.snapshots] == [
        ("before-driver", "snapshot note", "2")]
    assert conf.cloudinit is not None and conf.cloudinit.name == CLOUDINIT
    after = settings(with_pending(conf), P)
    assert (after.vcpus, after.affinity, after.hostpci) == (8, tuple(range(8)), ())


def test_malformed_lines_reported_with_file_and_line():
    conf, s = derived("cores: 2\nthis is not a key\n: nothing\ndelete: net0\nmemory: lots\n")
    assert conf.errors == (f"{P}:2: cannot parse 'this is not a key'", f"{P}:3: cannot parse ': nothing'",
                           f"{P}:4: 'delete' is only allowed in [PENDING]")
    assert s.vcpus == 2 and s.memory_mib == 512 and s.problems == (
        f"{P}:5: memory: current='lots' is not a whole number of at least 16",)


def test_template_and_lock_values():
    _, s = derived("template: 1\nlock: migrate\n")
    assert (s.template, s.lock) == (True, "migrate")
    _, bad = derived("lock: mine\n")
    assert bad.lock is None and "is not a lock Proxmox sets" in bad.problems[0]


# -- pci.cfg and the host's sysfs -----------------------------------------------------------------------

PCI_CFG = ("gpu-pool\n\tmap node=pve1,path=0000:41:00.0,id=10de:2330,iommugroup=41\n"
           "\tmap node=pve1,path=0000:42:00.0,id=10de:2330,iommugroup=42\n"
           "\tmap node=pve2,path=0000:01:00.0,id=10de:2330\n\tdescription H100 pool\n"
           "vgpu\n\tmap node=pve1,path=0000:43:00.0,id=10de:2330\n\tmdev 1\n")


def host(tmp_path: Path) -> Root:
    fs = FakeSys(tmp_path)
    fs.host(hostname="pve1.example.org")
    for n, addr in enumerate(("0000:41:00.0", "0000:42:00.0", "0000:43:00.0")):
        fs.pci(addr, iommu_group=41 + n)
    fs.pci("0000:41:00.1", device=0x22A3, cls=0x040300, iommu_group=41)
    return Root(tmp_path)


def test_pci_cfg_parsed():
    maps = parse_pci_cfg(PCI_CFG)
    assert maps.errors == ()
    pool = maps.mappings["gpu-pool"]
    assert [(e.node, e.paths, e.id, e.iommugroup) for e in pool.entries][:2] == [
        ("pve1", ("0000:41:00.0",), "10de:2330", 41), ("pve1", ("0000:42:00.0",), "10de:2330", 42)]
    assert pool.description == "H100 pool" and not pool.mdev and maps.mappings["vgpu"].mdev


def test_pci_cfg_bad_lines_reported():
    maps = parse_pci_cfg("\tmap node=a,path=01:00.0\nx\n\tmap path=01:00.0\n\tcolour red\n", "/pci.cfg")
    assert maps.errors == ("/pci.cfg:1: 'map' outside a mapping", "/pci.cfg:3: map: node= is required",
                           "/pci.cfg:4: unknown property 'colour'")


def test_functionless_address_passes_every_function(tmp_path):
    root = host(tmp_path)
    r = resolve_hostpci(root, HostPci(0, ("0000:41:00",)), 100, False, PciMappings({}), "pve1", {})
    assert r.addresses == ("0000:41:00.0", "0000:41:00.1") and r.problems == ()


def test_absent_address_is_reported(tmp_path):
    r = resolve_hostpci(host(tmp_path), HostPci(3, ("0000:99:00",)), 100, False, PciMappings({}), "pve1", {})
    assert r.addresses == () and r.problems == ("hostpci3: no PCI device 0000:99:00 on this host",)


def test_mapping_takes_the_first_path_of_this_node(tmp_path):
    root = host(tmp_path)
    assert node_name(root) == "pve1"
    r = resolve_hostpci(root, HostPci(0, (), "gpu-pool"), 100, False, parse_pci_cfg(PCI_CFG), "pve1", {})
    assert r.addresses == ("0000:41:00.0",) and r.problems == ()


def test_running_vm_holds_its_reserved_path(tmp_path):
    root = host(tmp_path)
    r = resolve_hostpci(root, HostPci(0, (), "gpu-pool"), 101, True, parse_pci_cfg(PCI_CFG), "pve1",
                        {"0000:41:00.0": 100, "0000:42:00.0": 101})
    assert r.addresses == ("0000:42:00.0",)


def test_unknown_mapping_is_a_problem(tmp_path):
    r = resolve_hostpci(host(tmp_path), HostPci(1, (), "nope"), 100, False, parse_pci_cfg(PCI_CFG), "pve1", {})
    assert r.addresses == () and r.problems == ("hostpci1: mapping 'nope' is not in /etc/pve/mapping/pci.cfg",)


def test_mapping_whose_id_no_longer_matches_sysfs(tmp_path):
    root = host(tmp_path)
    cfg = "gpu\n\tmap node=pve1,path=0000:41:00.0,id=10de:20b5\n\tmap node=pve1,path=0000:42:00.0,id=10de:2330\n"
    r = resolve_hostpci(root, HostPci(0, (), "gpu"), 100, False, parse_pci_cfg(cfg), "pve1", {})
    assert r.addresses == ("0000:42:00.0",)  # the matching one is taken
    assert r.problems == ("hostpci0: mapping 'gpu' (/etc/pve/mapping/pci.cfg:2): 0000:41:00.0 is 10de:2330 in "
                          "sysfs, the mapping says id=10de:20b5",)


def test_mapping_without_this_node(tmp_path):
    r = resolve_hostpci(host(tmp_path), HostPci(0, (), "gpu-pool"), 100, False, parse_pci_cfg(PCI_CFG), "pve9", {})
    assert r.problems == ("hostpci0: mapping 'gpu-pool' has no device on node pve9",)


def test_node_name_from_pve_local_link(tmp_path):
    root = host(tmp_path)
    (tmp_path / "etc/pve/nodes/alpha").mkdir(parents=True)
    (tmp_path / "etc/pve/local").symlink_to("nodes/alpha")
    assert node_name(root) == "alpha"


def test_a_key_given_twice_is_reported_and_the_later_kept():
    conf, s = derived("hostpci0: 41:00.0\ncores: 2\nhostpci0: 42:00.0\n")
    assert conf.errors == (f"{P}:3: hostpci0 is given again (first on line 1): Proxmox keeps this one",)
    assert [h.hosts for h in s.hostpci] == [("0000:42:00.0",)]
