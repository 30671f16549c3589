"""`nodeconsole nccl`: parse on the real outputs in ../shared/nccl, check on the demo host (preflight,
and --run through a stand-in all_reduce_perf), and the multi-node command builder."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from nodeconsole.actions.nccl.torch_allreduce import bus_factor, footer_lines, format_row, header_lines
from nodeconsole.console.collector import Collector
from nodeconsole.console.seams import demo_host

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fixtures" / "fake_all_reduce_perf.py"


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _readme(shared_dir: Path) -> dict[str, tuple[float, float, str]]:
    """file → (peak busbw, Avg, notes) from the table in ../shared/nccl/README.md."""
    rows = {}
    for line in (shared_dir / "nccl" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0].endswith(".txt"):
            rows[cells[0]] = (float(cells[2]), float(cells[3]), cells[4])
    return rows


def _field(out: str, name: str) -> str:
    m = re.search(rf"^{re.escape(name)}: (.*)$", out, re.M)
    assert m, f"no {name!r} line in:\n{out}"
    return m.group(1)


@pytest.fixture()
def host_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private demo host and an environment without NCCL settings of the machine running the tests."""
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    for k in list(os.environ):
        if k.startswith(("NCCL_", "FAKE_NCCL_")) or k == "NODECONSOLE_ALL_REDUCE_PERF":
            monkeypatch.delenv(k)
    return tmp_path / "demo"


@pytest.fixture()
def fake_exe(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "all_reduce_perf"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE)!r}\n"
                   f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    return exe


def synthetic_output(plateau: float, nranks: int = 2, min_bytes: int = 8, max_bytes: int = 1 << 30) -> str:
    """An all_reduce_perf output in nccl-tests' format whose bus bandwidth rises to `plateau` GB/s."""
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    devices = [(r, "gpu-node-01", 4000, r, f"0x{0x18 + r:02x}", "NVIDIA H100 80GB HBM3") for r in range(nranks)]
    lines = header_lines(nranks, min_bytes, max_bytes, 2, 5, 20, True, devices, "2.13.10", 22005)
    busbws = []
    for s in sizes:
        bus = plateau * s / (s + (4 << 20))  # small messages are latency-bound
        alg = bus / bus_factor(nranks)
        t = s / (alg * 1e3) if alg else 1.0
        busbws += [bus, bus]
        lines.append(format_row(s, s // 4, "float", "sum", -1, (t, alg, bus, 0), (t, alg, bus, 0)))
    return "\n".join(lines + footer_lines(busbws, 0)) + "\n"


# -- parse -----------------------------------------------------------------------------------------------
def test_parse_every_shared_output_as_the_readme_says(shared_dir: Path, capsys) -> None:
    table = _readme(shared_dir)
    files = sorted(p.name for p in (shared_dir / "nccl").glob("*.txt"))
    assert files and set(files) <= set(table), "every output has its line in the README"
    for name in files:
        peak, avg, notes = table[name]
        rc, out, err = _cli(capsys, "nccl", "parse", str(shared_dir / "nccl" / name))
        assert float(_field(out, "avg bus bandwidth").split()[0]) == avg, name
        assert float(_field(out, "peak bus bandwidth").split()[0]) == peak, name
        assert int(_field(out, "rows")) > 0
        assert rc == (1 if "CORRUPTION" in notes else 0), (name, out, err)
        rc_json, js, _ = _cli(capsys, "nccl", "parse", "--json", str(shared_dir / "nccl" / name))
        data = json.loads(js)
        assert rc_json == rc and data["avg_busbw"] == avg and data["peak_busbw"] == peak
        assert data["rows"] == int(_field(out, "rows")) == len(data["table"])


def test_parse_reports_the_corruption_of_5(shared_dir: Path, capsys) -> None:
    src = shared_dir / "nccl" / "5.txt"
    rc, out, _ = _cli(capsys, "nccl", "parse", str(src))
    assert rc == 1
    assert _field(out, "out of bounds") == "4 FAILED"
    assert "DATA CORRUPTION" in _field(out, "corruption")
    # the #wrong cells of the output itself (the README: 96 and 32)
    text = src.read_text()
    wrong = sum(int(m) for m in re.findall(r"^\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+(?:\s+\S+){3}\s+(\d+)", text, re.M))
    wrong += sum(int(m) for m in re.findall(r"^\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+(?:\s+\S+){7}\s+(\d+)", text, re.M))
    assert wrong == 128
    assert f"#wrong total {wrong}" in out
    data = json.loads(_cli(capsys, "nccl", "parse", "--json", str(src))[1])
    assert data["corrupted"] and data["oob_ok"] is False and data["oob_count"] == 4 and data["wrong_total"] == wrong
    assert "nccl.corruption" in [f["code"] for f in data["findings"]]


def test_parse_4_has_version_network_and_transports(shared_dir: Path, capsys) -> None:
    src = shared_dir / "nccl" / "4.txt"
    text = src.read_text()
    version = re.search(r"NCCL version (\d+\.\d+\.\d+)", text).group(1)
    p2p_lines = len(re.findall(r"via P2P/", text))
    rc, out, _ = _cli(capsys, "nccl", "parse", str(src))
    assert rc == 0
    assert _field(out, "NCCL version") == version
    assert _field(out, "network") == "Socket"
    assert _field(out, "transports") == f"P2P ×{p2p_lines}"
    assert _field(out, "corruption") == "none" and _field(out, "out of bounds") == "0 OK"


def test_parse_refuses_what_is_not_a_file(tmp_path: Path, capsys) -> None:
    rc, out, err = _cli(capsys, "nccl", "parse", str(tmp_path / "missing.txt"))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "missing.txt: no such file" in err
    rc, out, err = _cli(capsys, "nccl", "parse", str(tmp_path))
    assert rc == 2 and out == "" and "directory" in err


def test_parse_of_a_cut_off_output(tmp_path: Path, capsys) -> None:
    text = synthetic_output(20.0)
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(text.splitlines()[:20]) + "\n")
    rc, out, _ = _cli(capsys, "nccl", "parse", str(cut))
    assert rc == 0 and "cut off" in _field(out, "rows") and _field(out, "avg bus bandwidth") == "- GB/s"


# -- check -----------------------------------------------------------------------------------------------
def _demo_snapshot(state: Path):
    return Collector(demo_host(state)).collect()


def test_check_flags_the_cross_socket_pair(host_env: Path, capsys) -> None:
    snap = _demo_snapshot(host_env)
    g0, g4 = snap.gpus[0], snap.gpus[4]
    assert g0.numa_node != g4.numa_node  # the demo's pair on two sockets
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--json")
    data = json.loads(out)
    assert rc == 0, err
    assert [g["index"] for g in data["gpus"]] == [0, 4]
    numa = [f for f in data["preflight"] if f["code"] == "nccl.numa_split"]
    # the demo's baseboard joins them by NVLink (NV18 through the NVSwitches): the split is only noted
    assert len(numa) == 1 and numa[0]["severity"] == "info" and "sockets" in numa[0]["message"]
    assert "NVLink carries" in numa[0]["reason"]
    assert g0.address in numa[0]["message"] and g4.address in numa[0]["message"]
    assert data["topology"]["p2p"] is True and "NVLink" in data["topology"]["p2p_reason"]
    assert data["topology"]["nvlink"] is True and data["topology"]["nvlink_known"] is True
    assert data["expected"]["basis"] == "H100/H200 on NVSwitch, ring"
    # two GPUs on one socket: no such finding
    same = [g.index for g in snap.gpus if g.owner.kind == "host" and g.numa_node == g4.numa_node]
    assert len(same) >= 2
    data = json.loads(_cli(capsys, "nccl", "check", "--demo", "--gpus", ",".join(map(str, same[:2])), "--json")[1])
    assert "nccl.numa_split" not in [f["code"] for f in data["preflight"]]


def test_check_text_shows_findings_and_the_command(host_env: Path, fake_exe: Path, capsys) -> None:
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--binary", str(fake_exe))
    assert rc == 0
    assert "the GPUs sit on different sockets" in out
    line = _field(out, "would run (nccl-tests)")
    snap = _demo_snapshot(host_env)
    assert f"CUDA_VISIBLE_DEVICES={snap.gpus[0].uuid},{snap.gpus[4].uuid}" in line
    assert line.endswith(f"{fake_exe} -b 8 -e 1G -f 2 -g 2")


def test_check_names_gpus_the_host_cannot_use(host_env: Path, capsys) -> None:
    snap = _demo_snapshot(host_env)
    vfio = next(g for g in snap.gpus if g.owner.kind == "vfio")
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo", "--gpus", str(vfio.index), "--json")
    codes = [f["code"] for f in json.loads(out)["preflight"]]
    assert rc == 1 and "nccl.gpu_not_host" in codes
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", str(vfio.index), "--run")
    assert rc == 2 and "vfio-pci" in err and "running (" not in out


@pytest.mark.parametrize("gpus", ["0,99", "x", "0,0", "", "0;1", "-1"])
def test_check_refuses_bad_gpu_lists(host_env: Path, capsys, gpus: str) -> None:
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", gpus)
    assert rc == 2 and out == "" and err.startswith("nodeconsole: error: --gpus") and err.count("\n") == 1


def test_check_refuses_a_bad_timeout_and_binary(host_env: Path, tmp_path: Path, capsys) -> None:
    assert _cli(capsys, "nccl", "check", "--demo", "--timeout", "0")[0] == 2
    rc, _, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--run", "--binary", str(tmp_path / "nope"))
    assert rc == 2 and "not an executable file" in err


@pytest.mark.parametrize("argv,msg", [
    (["--ssh", "a;b@10.0.0.5"], "'a;b' is not a user name"),
    (["--ssh", "ubuntu@-oProxyCommand=x"], "expected USER@ADDRESS"),
    (["--ssh", "ubuntu@10.0.0.5", "--via", "agent"], "goes with the ssh method"),
])
def test_check_names_ssh_for_a_bad_ssh_value(host_env: Path, capsys, argv: list[str], msg: str) -> None:
    rc, out, err = _cli(capsys, "nccl", "check", "--demo", "--vm", "train-a", *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("nodeconsole: error: --ssh: ") and msg in err, err


@pytest.mark.parametrize("plateau,rc,code", [(330.0, 0, "nccl.bandwidth_ok"), (50.0, 1, "nccl.bandwidth_low")])
def test_check_run_with_the_stand_in(host_env: Path, fake_exe: Path, tmp_path: Path, monkeypatch, capsys,
                                     plateau: float, rc: int, code: str) -> None:
    output = tmp_path / "out.txt"
    output.write_text(synthetic_output(plateau))
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(output))
    monkeypatch.setenv("FAKE_NCCL_RECORD", str(record))
    got, out, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--run", "--binary", str(fake_exe),
                         "--timeout", "30")
    assert got == rc, (out, err)
    progress = re.findall(r"^\[\s*(\d+)/28\] ", out, re.M)
    assert progress == [str(i) for i in range(1, 29)]
    assert out.index("[28/28]") < out.index("verdict:")
    verdict = out[out.index("verdict:"):]
    assert "against expected ≈370 GB/s" in verdict
    assert ("[error]" in verdict) == (rc == 1)
    seen = json.loads(record.read_text())
    snap = _demo_snapshot(host_env)
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == f"{snap.gpus[0].uuid},{snap.gpus[4].uuid}"
    assert seen["argv"][-2:] == ["-g", "2"]
    data_rc, js, err = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--run", "--json", "--binary",
                            str(fake_exe))
    data = json.loads(js)
    assert data_rc == rc and data["run"]["rows"] == 28 and data["run"]["exit_code"] == 0
    assert code in [f["code"] for f in data["run"]["findings"]]
    assert err.count("/28]") == 28  # progress goes to stderr when stdout carries JSON


def test_check_run_with_corrupted_results_fails(host_env: Path, fake_exe: Path, shared_dir: Path, monkeypatch,
                                                capsys) -> None:
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(shared_dir / "nccl" / "5.txt"))
    monkeypatch.setenv("FAKE_NCCL_EXIT", "1")
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--run", "--binary", str(fake_exe))
    assert rc == 1
    assert "exited with status 1" in out and "DATA CORRUPTION" in out


def test_check_run_prints_rows_while_the_test_runs(host_env: Path, fake_exe: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.txt"
    output.write_text(synthetic_output(330.0))
    record = tmp_path / "record.json"
    env = {**os.environ, "FAKE_NCCL_OUTPUT": str(output), "FAKE_NCCL_DELAY": "0.05",
           "FAKE_NCCL_RECORD": str(record), "PYTHONUNBUFFERED": "1"}
    cli = "import sys; from nodeconsole.actions.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", cli, "nccl", "check", "--demo", "--gpus", "0,4",
                             "--run", "--binary", str(fake_exe)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("[ 1/28]"):
                break
        else:
            pytest.fail("no first row")
        pid = json.loads(record.read_text())["pids"][0]
        assert _alive(pid), "the first row is printed while the test still runs"
        rest = proc.stdout.read()
        assert proc.wait(30) == 0 and "[28/28]" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- command ---------------------------------------------------------------------------------------------
def test_command_builds_mpirun_and_torchrun(capsys) -> None:
    rc, out, _ = _cli(capsys, "nccl", "command", "--hosts", "node-a,node-b", "--gpus-per-host", "8")
    assert rc == 0
    assert out.strip() == ("mpirun -H node-a:8,node-b:8 -np 16 --bind-to none -x NCCL_DEBUG=INFO all_reduce_perf "
                           "-b 8 -e 1G -f 2 -g 1")
    rc, out, _ = _cli(capsys, "nccl", "command", "--hosts", "a,b.example.com", "--gpus-per-host", "4",
                      "--launcher", "torchrun", "--env", "NCCL_SOCKET_IFNAME==eth0", "--json")
    cmds = json.loads(out)["commands"]
    assert rc == 0 and [c["host"] for c in cmds] == ["a", "b.example.com"]
    assert [next(x for x in c["argv"] if x.startswith("--node_rank")) for c in cmds] == ["--node_rank=0",
                                                                                      "--node_rank=1"]
    assert all("--rdzv_endpoint=a:29500" in c["argv"] for c in cmds)
    assert all(c["env"]["NCCL_SOCKET_IFNAME"] == "=eth0" for c in cmds)


@pytest.mark.parametrize("hosts", ["a;reboot,b", "a b", "$(reboot)", "`id`", "a|b", "a&&b", "a,,b", "a,a",
                                   "-oProxyCommand=x", "a>b"])
def test_command_refuses_shell_metacharacters(capsys, hosts: str) -> None:
    rc, out, err = _cli(capsys, "nccl", "command", "--hosts", hosts, "--gpus-per-host", "2")
    assert rc == 2 and out == "" and err.count("\n") == 1


@pytest.mark.parametrize("extra", [["--gpus-per-host", "0"], ["--gpus-per-host", "2", "--env", "X=$(id)"],
                                   ["--gpus-per-host", "2", "--env", "NOEQUALS"], ["--gpus-per-host", "2", "-f", "1"],
                                   ["--gpus-per-host", "2", "--binary", "x;y"]])
def test_command_refuses_bad_options(capsys, extra: list[str]) -> None:
    rc, out, err = _cli(capsys, "nccl", "command", "--hosts", "a,b", *extra)
    assert rc == 2 and out == ""


# -- the snapshot's topology -------------------------------------------------------------------------------
def _acs_config(control: int) -> bytes:
    """A full PCIe config space whose only extended capability is ACS, with this control value."""
    from nodeconsole.actions.nccl.acs import ACS_CAP_ID

    cfg = bytearray(4096)
    cfg[0x100:0x104] = (ACS_CAP_ID | 1 << 16).to_bytes(4, "little")
    cfg[0x106:0x108] = control.to_bytes(2, "little")
    return bytes(cfg)


def test_p2p_needs_a_common_switch_and_no_acs_redirect(host_env: Path) -> None:
    from nodeconsole.actions.nccl.snapshot_topology import local_plan, select_gpus
    from nodeconsole.console.topology import relation

    seams = demo_host(host_env)
    snap = Collector(seams).collect()
    a, b = snap.gpus[0], snap.gpus[1]
    assert relation(snap, a.address, b.address) == "PIX"  # the demo's pair below one switch
    # the demo's switch ports have ACS redirect on, as Linux turns it on for IOMMU isolation: no P2P
    plan = local_plan(snap, select_gpus(snap, [0, 1]), seams.root)
    assert not plan.topology.p2p and "ACS" in plan.p2p_reason
    # ACS on both ports but only source validation: P2P across the switch
    ports = [seams.root.link_target(f"sys/bus/pci/devices/{g.address}").rsplit("/", 1)[0] for g in (a, b)]
    for d in ports:
        seams.root.p(f"{d}/config").write_bytes(_acs_config(1))
    plan = local_plan(snap, select_gpus(snap, [0, 1]), seams.root)
    assert plan.topology.p2p and plan.expected.basis == "GPUs on PCIe with P2P"
    # turn ACS P2P request redirect on at the switch port above GPU 1
    port_dir = ports[1]
    seams.root.p(f"{port_dir}/config").write_bytes(_acs_config(1 << 2 | 1 << 3))
    plan = local_plan(snap, select_gpus(snap, [0, 1]), seams.root)
    assert not plan.topology.p2p and "ACS" in plan.p2p_reason and port_dir.rsplit("/", 1)[1] in plan.p2p_reason
    assert plan.expected.basis.startswith("GPUs without P2P")
    # ACS present but not redirecting (only source validation): P2P again
    seams.root.p(f"{port_dir}/config").write_bytes(_acs_config(1))
    assert local_plan(snap, select_gpus(snap, [0, 1]), seams.root).topology.p2p


def test_plan_reads_sockets_models_and_nic_speeds(host_env: Path) -> None:
    from nodeconsole.actions.nccl.snapshot_topology import local_plan, nic_speeds, node_socket, select_gpus

    seams = demo_host(host_env)
    snap = Collector(seams).collect()
    sockets = node_socket(snap)
    for c in snap.cpus:
        if c.numa_node is not None and c.package >= 0:
            assert sockets[c.numa_node] == c.package
    plan = local_plan(snap, select_gpus(snap, [0, 4]), seams.root, nvlink=True)
    assert plan.topology.gpu_models == (snap.gpus[0].name, snap.gpus[4].name)
    assert plan.topology.nvlink and plan.nvlink_known and plan.expected.basis.startswith("H100/H200")
    assert plan.gpu_numa == {snap.gpus[0].address: snap.gpus[0].numa_node, snap.gpus[4].address: snap.gpus[4].numa_node}
    # the demo's RDMA ports: its 5 NICs and the 5 VFs on mlx5_core, all active at 400 Gb/s
    assert nic_speeds(snap, seams.root) == (400.0,) * 10
    for cls in ("sys/class/infiniband", "sys/class/net"):  # the rest builds its own
        shutil.rmtree(seams.root.p(cls))
    assert nic_speeds(snap, seams.root) == ()
    # an interface of a physical NIC that is up, one that is down, one of a VF, one virtual
    nic = next(d for d in snap.pci_devices if d.base_class == 0x02 and d.physfn is None)
    vf = next(d for d in snap.pci_devices if d.physfn is not None)
    for name, dev, state, speed in (("ens1", nic, "up", "200000"), ("ens2", nic, "down", "100000"),
                                    ("ens1v0", vf, "up", "50000"), ("virbr0", None, "up", "10000")):
        d = seams.root.p(f"sys/class/net/{name}")
        d.mkdir(parents=True)
        (d / "operstate").write_text(state + "\n")
        (d / "speed").write_text(speed + "\n")
        if dev is not None:
            target = seams.root.link_target(f"sys/bus/pci/devices/{dev.address}")
            (d / "device").symlink_to(seams.root.p(target))
    assert nic_speeds(snap, seams.root) == (200.0,)
    ib = seams.root.p("sys/class/infiniband/mlx5_0/ports/1")
    ib.mkdir(parents=True)
    (ib / "state").write_text("4: ACTIVE\n")
    (ib / "rate").write_text("400 Gb/sec (4X NDR)\n")
    assert nic_speeds(snap, seams.root) == (400.0,)  # NCCL prefers the RDMA ports
    assert local_plan(snap, select_gpus(snap, [0]), seams.root).topology.ib_present


def test_check_run_says_when_it_looks_stalled(state_ro: Path, fake_exe: Path, tmp_path: Path, monkeypatch,
                                              capsys) -> None:
    """Four rows, then silence: a line says it looks stalled, the run goes on until its timeout."""
    for k in list(os.environ):
        if k.startswith(("NCCL_", "FAKE_NCCL_")):
            monkeypatch.delenv(k)
    lines = synthetic_output(3.6, min_bytes=8, max_bytes=64).splitlines()
    last_row = max(i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].isdigit())
    output = tmp_path / "out.txt"
    output.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("FAKE_NCCL_OUTPUT", str(output))
    monkeypatch.setenv("FAKE_NCCL_HANG_AFTER", str(last_row + 1))
    rc, out, _ = _cli(capsys, "nccl", "check", "--demo", "--gpus", "0,4", "--run", "--binary", str(fake_exe),
                      "-e", "64", "--stall", "0.3", "--timeout", "1.5")
    assert rc == 1
    # (a slow start of the stand-in may add a notice before the first row)
    notice = [line for line in out.splitlines() if "looks stalled" in line and "before the first row" not in line]
    assert len(notice) == 1 and "no new row for" in notice[0] and "after row 4" in notice[0]
    assert out.index("[4/4]") < out.index("looks stalled") < out.index("verdict:")
    assert "avg busbw" in out and "over the 4 rows that came" in out
    assert "the check ran out of time" in out
