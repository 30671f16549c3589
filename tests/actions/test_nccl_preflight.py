"""NCCL preflight on generated host trees (and two real captured ones)."""
from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from nodeconsole.actions.nccl.acs import ACS_CAP_ID, acs_control, decode_acs, find_ext_cap, pci_chain
from nodeconsole.actions.nccl.libs import NcclLib, find_nccl_libs, version_in_binary
from nodeconsole.actions.nccl.preflight import (
    IfList,
    check_drift,
    check_ib,
    check_leftovers,
    check_numa,
    check_socket_ifname,
    default_interfaces,
    preflight,
    read_ib_ports,
)
from nodeconsole.console.root import Root


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _nets(root: Path, states: dict[str, str | None]) -> Root:
    for name, state in states.items():
        d = root / "sys/devices/virtual/net" / name
        d.mkdir(parents=True)
        if state is not None:
            (d / "operstate").write_text(state + "\n")
        _link(root / "sys/class/net" / name, f"../../devices/virtual/net/{name}")
    return Root(root)


def _ib(root: Path, dev: str, state: str = "4: ACTIVE", layer: str = "InfiniBand") -> None:
    _write(root / f"sys/class/infiniband/{dev}/ports/1/state", state + "\n")
    _write(root / f"sys/class/infiniband/{dev}/ports/1/link_layer", layer + "\n")


def _codes(findings) -> dict[str, str]:
    return {f.code: f.severity for f in findings}


# ---- NCCL_SOCKET_IFNAME ----

@pytest.mark.parametrize("spec,selected", [
    ("eth", ["eth0", "eth1", "eth10"]), ("=eth1", ["eth1"]), ("=eth0,eth1", ["eth0", "eth1"]),
    ("=eth", []), ("^docker", ["eth0", "eth1", "eth10", "ib0", "lo"]),
    ("^=eth1", ["docker0", "eth0", "eth10", "ib0", "lo"]),
    ("^eth,docker,lo", ["ib0"]), ("ib0:1", ["ib0"]), ("eth1", ["eth1", "eth10"]), ("", []),
])
def test_iflist_follows_nccl_rules(spec: str, selected: list[str]) -> None:
    names = ["docker0", "eth0", "eth1", "eth10", "ib0", "lo"]
    assert [n for n in names if IfList.parse(spec).selects(n)] == selected


def test_default_interfaces() -> None:
    assert default_interfaces(["docker0", "eth0", "lo", "virbr0"]) == ["eth0", "virbr0"]
    assert default_interfaces(["eth0", "ib0", "ib1", "lo"]) == ["ib0", "ib1"]


def test_wrong_nic_name(tmp_path: Path) -> None:
    root = _nets(tmp_path, {"eth0": "up", "lo": "unknown"})
    found = preflight({"NCCL_SOCKET_IFNAME": "eht0"}, root).findings
    codes = _codes(found)
    assert codes["nccl.ifname_missing"] == "warning" and codes["nccl.ifname_none"] == "error"
    missing = next(f for f in found if f.code == "nccl.ifname_missing")
    assert "'eht0'" in missing.message and "eth0, lo" in missing.message and missing.fix
    assert found[0].severity == "error"  # errors first
    assert "nccl.ifname_none" not in _codes(preflight({"NCCL_SOCKET_IFNAME": "eth0"}, root).findings)


def test_interface_down_and_exclusion_leaving_loopback(tmp_path: Path) -> None:
    root = _nets(tmp_path, {"eth0": "up", "eth1": "down", "lo": "unknown", "virbr0": "up"})
    ifs = {n: root.read(f"sys/class/net/{n}/operstate") or "" for n in root.listdir("sys/class/net")}
    assert _codes(check_socket_ifname({"NCCL_SOCKET_IFNAME": "eth"}, ifs)) == {"nccl.ifname_down": "warning"}
    assert _codes(check_socket_ifname({"NCCL_SOCKET_IFNAME": "=eth1"}, ifs)) == {"nccl.ifname_down": "error"}
    assert check_socket_ifname({"NCCL_SOCKET_IFNAME": "=eth0"}, ifs) == []
    found = check_socket_ifname({"NCCL_SOCKET_IFNAME": "^docker,eth1"}, ifs)
    f = next(f for f in found if f.code == "nccl.ifname_virtual")
    assert "lo" in f.message and "virbr0" in f.message and "^docker,eth1,lo,virbr" in f.fix
    # unset on a libvirt host: NCCL's default may take the NAT bridge
    f = check_socket_ifname({}, ifs)
    assert _codes(f) == {"nccl.ifname_default_virtual": "warning"} and "virbr0" in f[0].message
    # with IPoIB present NCCL's default prefers ib*: nothing to say
    assert check_socket_ifname({}, {**ifs, "ib0": "up"}) == []


def _extract(shared_dir: Path, name: str, dest: Path, parts: tuple[str, ...], ends: tuple[str, ...] = ()) -> Root:
    """Extract the members of a captured tree whose path holds one of `parts` (and, for files, ends with
    one of `ends`): all of it takes seconds."""
    with tarfile.open(shared_dir / "hosts" / f"{name}.tar.bz2") as t:
        members = [m for m in t.getmembers() if any(p in m.name for p in parts)
                   and (not ends or not m.isfile() or m.name.endswith(ends))]
        t.extractall(dest, members=members, filter="tar")
    top = next(p.parent for p in dest.rglob("sys") if (p / "class").is_dir() or (p / "bus").is_dir())
    return Root(top)


def test_real_tree_with_infiniband(shared_dir: Path, tmp_path: Path) -> None:
    """A captured host: eth0 up, eth1-3 down, ib0 up, a QLogic HCA qib0 with an active port."""
    root = _extract(shared_dir, "40intel64-2g2n4c+pcilocality", tmp_path, ("/net", "infiniband"))
    assert [(p.device, p.state, p.link_layer) for p in read_ib_ports(root)] == [("qib0", "ACTIVE", "InfiniBand")]
    rep = preflight({"NCCL_SOCKET_IFNAME": "=eth1", "NCCL_IB_DISABLE": "1", "NCCL_IB_TIMEOUT": "22"}, root)
    codes = _codes(rep.findings)
    assert codes["nccl.ifname_down"] == "error" and codes["nccl.ib_disabled"] == "warning"
    assert "nccl.ib_timeout_unset" not in codes and "nccl.ib_value_low" not in codes
    assert rep.interfaces["eth0"] == "up" and rep.interfaces["eth2"] == "down"
    assert "nccl.ifname_down" not in _codes(preflight({"NCCL_SOCKET_IFNAME": "ib"}, root).findings)


# ---- InfiniBand ----

def test_ib_present_but_disabled(tmp_path: Path) -> None:
    _ib(tmp_path, "mlx5_0", layer="Ethernet")
    root = Root(tmp_path)
    f = next(f for f in preflight({"NCCL_IB_DISABLE": "1"}, root).findings if f.code == "nccl.ib_disabled")
    assert f.severity == "warning" and "RoCE" in f.message and "mlx5_0" in f.message
    assert "nccl.ib_disabled" not in _codes(preflight({"NCCL_IB_DISABLE": "0"}, root).findings)
    assert "nccl.ib_disabled" not in _codes(preflight({"NCCL_IB_DISABLE": "1"}, Root(tmp_path / "none")).findings)


def test_ib_hca_ports_and_tuning(tmp_path: Path) -> None:
    _ib(tmp_path, "mlx5_0")
    _ib(tmp_path, "mlx5_1", state="1: DOWN")
    ports = read_ib_ports(Root(tmp_path))
    assert _codes(check_ib({"NCCL_IB_HCA": "mlx5_9", "NCCL_IB_TIMEOUT": "22"}, ports)) == {"nccl.ib_hca_none": "error"}
    assert check_ib({"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_TIMEOUT": "22"}, ports) == []
    assert "nccl.ib_hca_none" in _codes(check_ib({"NCCL_IB_HCA": "=mlx5_0:2"}, ports))
    assert _codes(check_ib({}, ports)) == {"nccl.ib_timeout_unset": "info"}
    cases = {("18", "7"): {"nccl.ib_value_low": "warning"}, ("22", "3"): {"nccl.ib_value_low": "warning"},
             ("40", "7"): {"nccl.ib_value_invalid": "error"}, ("x", "7"): {"nccl.ib_value_invalid": "error"},
             ("22", "8"): {"nccl.ib_value_invalid": "error"}, ("23", "7"): {}}
    for (timeout, retry), want in cases.items():
        got = check_ib({"NCCL_IB_TIMEOUT": timeout, "NCCL_IB_RETRY_CNT": retry}, ports)
        assert _codes(got) == want, (timeout, retry)
    down = [p for p in ports if p.device == "mlx5_1"]
    assert "nccl.ib_no_active_port" in _codes(check_ib({"NCCL_IB_TIMEOUT": "22"}, down))


def test_leftover_switches() -> None:
    assert check_leftovers({}) == []
    assert check_leftovers({"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0"}) == []
    assert _codes(check_leftovers({"NCCL_P2P_DISABLE": "1"})) == {"nccl.p2p_disabled": "warning"}
    assert _codes(check_leftovers({"NCCL_SHM_DISABLE": "1"})) == {"nccl.shm_disabled": "warning"}
    assert _codes(check_leftovers({"NCCL_P2P_LEVEL": "LOC"})) == {"nccl.p2p_level": "warning"}
    assert _codes(check_leftovers({"NCCL_P2P_LEVEL": "PHB"})) == {"nccl.p2p_level": "info"}
    assert _codes(check_leftovers({"NCCL_P2P_LEVEL": "bogus"})) == {"nccl.p2p_level": "warning"}
    f = check_leftovers({"NCCL_ALGO": "Ring", "NCCL_NVLS_ENABLE": "0"})
    assert _codes(f) == {"nccl.tuning_forced": "info"} and "NCCL_ALGO=Ring" in f[0].message


# ---- libraries ----

def _libtree(root: Path) -> None:
    sysdir = root / "usr/lib/x86_64-linux-gnu"
    _write(sysdir / "libnccl.so.2.21.5", b"\x7fELF...NCCL version 2.21.5+cuda12.4\x00")
    _link(sysdir / "libnccl.so.2", "libnccl.so.2.21.5")
    _link(sysdir / "libnccl.so", "libnccl.so.2")
    _write(sysdir / "libnccl-net.so", b"plugin")  # a network plugin, not NCCL itself
    _write(root / "usr/local/cuda-12.4/lib64/libnccl.so.2.18.3", b"x")
    _link(root / "usr/local/cuda", "cuda-12.4")  # the same directory twice through the link
    site = root / "usr/local/lib/python3.11/dist-packages"
    _write(site / "nvidia/nccl/lib/libnccl.so.2", b"no banner here")
    (site / "nvidia_nccl_cu12-2.21.5.dist-info").mkdir(parents=True)
    _write(site / "torch-2.4.1.dist-info/METADATA",
           "Name: torch\nVersion: 2.4.1\nRequires-Dist: filelock\n"
           "Requires-Dist: nvidia-nccl-cu12==2.20.5; platform_system == \"Linux\"\n")
    _write(site / "torch/lib/libnccl.so.2", b"....NCCL version 2.19.3+cuda12.1....")


def test_finds_system_pip_and_torch_libraries(tmp_path: Path) -> None:
    _libtree(tmp_path)
    libs = find_nccl_libs(Root(tmp_path))
    got = sorted((lib.source, lib.version, lib.path) for lib in libs)
    assert got == sorted([
        ("system", "2.21.5", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"),
        ("system", "2.18.3", "/usr/local/cuda-12.4/lib64/libnccl.so.2.18.3"),
        ("pip", "2.21.5", "/usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2"),
        ("torch", "2.19.3", "/usr/local/lib/python3.11/dist-packages/torch/lib/libnccl.so.2"),
        ("torch", "2.20.5", "/usr/local/lib/python3.11/dist-packages/torch"),
    ])
    pip = next(lib for lib in libs if lib.source == "pip")
    assert pip.package == "nvidia-nccl-cu12"
    rep = preflight({}, Root(tmp_path))
    codes = _codes(rep.findings)
    assert codes["nccl.versions_mixed"] == "info" and codes["nccl.torch_pin_mismatch"] == "warning"
    pin = next(f for f in rep.findings if f.code == "nccl.torch_pin_mismatch")
    assert "2.20.5" in pin.message and "2.21.5" in pin.message and "nvidia-nccl-cu12==2.20.5" in pin.fix


def test_site_packages_list_is_configurable(tmp_path: Path) -> None:
    site = tmp_path / "srv/venv/lib/python3.12/site-packages"
    _write(site / "nvidia/nccl/lib/libnccl.so.2", b"x")
    (site / "nvidia_nccl_cu12-2.23.4.dist-info").mkdir()
    assert find_nccl_libs(Root(tmp_path)) == []
    libs = find_nccl_libs(Root(tmp_path), site_packages=["srv/*/lib/python3*/site-packages"])
    assert [(lib.source, lib.version) for lib in libs] == [("pip", "2.23.4")]
    assert _codes(preflight({}, Root(tmp_path)).findings) == {"nccl.no_library": "info"}


def test_version_from_binary_banner(tmp_path: Path) -> None:
    assert version_in_binary(_write(tmp_path / "a", b"\0" * 5000 + b"NCCL version 2.26.2+cuda12.8\0")) == "2.26.2"
    assert version_in_binary(_write(tmp_path / "b", b"NCCL version %s")) is None
    assert version_in_binary(_write(tmp_path / "c", b"")) is None
    assert version_in_binary(tmp_path / "missing") is None


def test_version_drift_between_hosts(tmp_path: Path) -> None:
    _write(tmp_path / "usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5", b"x")
    root = Root(tmp_path)
    other = [{"path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.20.5", "version": "2.20.5", "source": "system"}]
    rep = preflight({}, root, snapshots={"gpu-2": other}, host="gpu-1")
    drift = [f for f in rep.findings if f.code == "nccl.version_drift"]
    assert len(drift) == 1 and drift[0].severity == "warning"
    assert "gpu-1: 2.21.5" in drift[0].message and "gpu-2: 2.20.5" in drift[0].message
    same = [{"path": "/x/libnccl.so.2.21.5", "version": "2.21.5", "source": "system"}]
    assert "nccl.version_drift" not in _codes(preflight({}, root, snapshots={"gpu-2": same}).findings)
    # kinds are compared separately: a pip wheel elsewhere is not drift of the system library
    pip = [NcclLib("/site/nvidia/nccl/lib/libnccl.so.2", "2.18.1", "pip")]
    assert check_drift({"a": [NcclLib("/l", "2.21.5", "system")], "b": pip}) == []


# ---- ACS ----

def _config(acs_ctrl: int | None, *, size: int = 4096, loop: bool = False) -> bytes:
    """A PCIe config space with an AER capability at 0x100 chained to ACS at 0x148."""
    cfg = bytearray(size)
    cfg[0:4] = (0x10b5 | 0x8747 << 16).to_bytes(4, "little")  # a PLX switch port
    if size < 4096:
        return bytes(cfg)
    nxt = 0x100 if loop else (0x148 if acs_ctrl is not None else 0)
    cfg[0x100:0x104] = (0x0001 | 1 << 16 | nxt << 20).to_bytes(4, "little")
    if acs_ctrl is not None and not loop:
        cfg[0x148:0x14C] = (ACS_CAP_ID | 1 << 16).to_bytes(4, "little")
        cfg[0x14C:0x14E] = (0x5F).to_bytes(2, "little")  # ACS capability register
        cfg[0x14E:0x150] = acs_ctrl.to_bytes(2, "little")
    return bytes(cfg)


def _pcie_tree(root: Path, ctrl: int | None, size: int = 4096) -> Root:
    """root port 00:01.0 → switch 01:00.0 → ports 02:08.0 / 02:10.0 → GPUs 03:00.0 / 04:00.0, plus a GPU
    on another root port 00:03.0 → 05:00.0."""
    top = "sys/devices/pci0000:00"
    chains = {"0000:03:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"],
              "0000:04:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:10.0"],
              "0000:05:00.0": ["0000:00:03.0"]}
    for gpu, chain in chains.items():
        path = top
        for addr in chain + [gpu]:
            path = f"{path}/{addr}"
            cfg = root / path / "config"
            if not cfg.exists():
                _write(cfg, _config(ctrl, size=size) if addr != gpu else bytes(4096))
            link = root / "sys/bus/pci/devices" / addr
            if not link.is_symlink():
                _link(link, "../../../" + path[len("sys/"):])
    return Root(root)


def test_acs_capability_parsing() -> None:
    assert acs_control(_config(0x1D)) == 0x1D
    assert find_ext_cap(_config(0x1D), ACS_CAP_ID) == 0x148
    assert acs_control(_config(None)) == 0  # no ACS capability at all
    assert acs_control(_config(0x1D, size=256)) is None  # not root: extended space unreadable
    assert acs_control(_config(0x1D, loop=True)) == 0  # a chain that loops ends
    assert decode_acs(0x1D) == "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"


def test_acs_on_between_gpus(tmp_path: Path) -> None:
    root = _pcie_tree(tmp_path, 0x1D)
    assert [a for a, _ in pci_chain(root, "0000:03:00.0")] == ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0",
                                                                 "0000:03:00.0"]
    found = preflight({}, root, gpus=["0000:03:00.0", "04:00.0"]).findings
    acs = [f for f in found if f.code == "nccl.acs_redirect"]
    # the two switch downstream ports; the switch's upstream port above both only forwards
    assert sorted(f.subject for f in acs) == ["0000:02:08.0", "0000:02:10.0"]
    assert all(f.severity == "warning" and "ReqRedir+" in f.message and "setpci -s" in f.fix for f in acs)
    assert "0000:03:00.0↔0000:04:00.0" in acs[0].message and "VM" in acs[0].fix
    # GPUs under different root ports: the root ports are between them
    far = [f.subject for f in preflight({}, root, gpus=["0000:03:00.0", "0000:05:00.0"]).findings
           if f.code == "nccl.acs_redirect"]
    assert far == ["0000:00:01.0", "0000:00:03.0", "0000:01:00.0", "0000:02:08.0"]


@pytest.mark.parametrize("ctrl", [0x0, 0x1, 0x11])  # off, or only source validation / upstream forwarding
def test_acs_without_redirect_is_fine(tmp_path: Path, ctrl: int) -> None:
    root = _pcie_tree(tmp_path, ctrl)
    assert [f for f in preflight({}, root, gpus=["0000:03:00.0", "0000:04:00.0"]).findings
            if f.code.startswith("nccl.acs")] == []


def test_acs_unknown_without_full_config(tmp_path: Path) -> None:
    root = _pcie_tree(tmp_path, 0x1D, size=256)
    found = preflight({}, root, gpus=["0000:03:00.0", "0000:04:00.0"]).findings
    f = [f for f in found if f.code.startswith("nccl.acs")]
    assert _codes(f) == {"nccl.acs_unknown": "info"} and "2 PCIe port(s)" in f[0].message


def test_acs_on_a_real_switch_tree(shared_dir: Path, tmp_path: Path) -> None:
    """Accelerators behind a PLX switch in a real capture (config files of 64 bytes: state unknown)."""
    root = _extract(shared_dir, "32intel64-2p8co2t+8ve", tmp_path, ("sys/bus/pci/devices", "sys/devices/pci"),
                    ("/config",))
    found = preflight({}, root, gpus=["0000:1b:00.0", "0000:1c:00.0"]).findings
    f = next(f for f in found if f.code == "nccl.acs_unknown")
    assert "0000:19:08.0" in f.message and "0000:19:0c.0" in f.message and "2 PCIe port(s)" in f.message


# ---- NUMA ----

def test_gpus_on_different_numa_nodes() -> None:
    gpus = {"0000:17:00.0": 0, "0000:65:00.0": 0, "0000:ca:00.0": 1}
    f = check_numa(gpus, node_socket={0: 0, 1: 1})
    assert _codes(f) == {"nccl.numa_split": "warning"} and "sockets" in f[0].message
    assert "node 1: 0000:ca:00.0" in f[0].message
    assert _codes(check_numa(gpus, node_socket={0: 0, 1: 0})) == {"nccl.numa_split": "info"}  # one socket
    assert _codes(check_numa(gpus)) == {"nccl.numa_split": "warning"}  # sockets unknown
    assert _codes(check_numa(gpus, nvlink=True)) == {"nccl.numa_split": "info"}
    assert check_numa({"a": 0, "b": 0}) == []
    assert check_numa({"a": 0, "b": -1, "c": None}) == []  # unknown nodes say nothing
    rep = preflight({}, Root("/nonexistent"), gpu_numa=gpus, node_socket={0: 0, 1: 1})
    assert "nccl.numa_split" in _codes(rep.findings)
