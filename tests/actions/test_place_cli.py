"""`nodeconsole place` on the demo host, in-process: the free pair is the H100 PCIe cards joined by NVLink
bridges on node 1's fifth switch (0000:da:00.0, 0000:db:00.0) with the ConnectX-7 VFs beside them
(0000:dc:00.1, .2); train-c keeps its own GPU (0000:9a:00.0) with the free VF at PIX beside it; a third
GPU is refused naming what holds each of the others; bad input is one line, exit 2; nothing changes."""
from __future__ import annotations

import json

import pytest

from nodeconsole.actions.cli import main
from tests.actions.test_passthrough import changed, tree_state


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("place-cli") / "demo"


@pytest.fixture
def cli(demo_dir, monkeypatch, capsys):
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(demo_dir))

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main([*argv, "--demo"])
        out = capsys.readouterr()
        return rc, out.out, out.err
    return run


def test_for_train_c_its_own_gpu_with_the_vf_beside_it(cli, demo_dir):
    rc, out, err = cli("place", "--gpus", "1", "--with-nic", "--vm", "train-c", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["gpus"] == ["0000:9a:00.0"] and d["nics"] == ["0000:9c:00.2"] and d["nodes"] == [1]
    # node 1: 64 CPUs, the host keeps 32-33,96-97: 70% of 60 = 42, capped by the whole cores no other VM holds
    assert d["vcpus"] == 32 and d["cpus"][:4] == [48, 112, 49, 113]
    assert d["memory_kib"] == 160 * 1048576
    assert d["hugepages"] == {"size_kib": 1048576, "per_node": {"1": 160}, "free": {"1": 80}}
    before = tree_state(demo_dir, skip=())
    rc, out, err = cli("place", "--gpus", "1", "--with-nic", "--vm", "train-c")
    assert rc == 0, err
    assert out.startswith("GPUs 0000:9a:00.0\n")  # its own, though 0000:da:00.0 is as good
    assert "  0000:da:00.0: takes fewer of the GPUs the VM holds already" in out
    assert "vCPUs         32 on CPU 48-63,112-127 (vCPU 2k and 2k+1 are sibling threads of one core)" in out
    assert "emulator      CPU 32-33,96-97" in out
    assert "hugepages     node 1: 160 x 1 GiB needed, 80 free of 144 reserved (80 to reserve)" in out
    assert "NIC VF        0000:9c:00.2 for 0000:9a:00.0" in out
    assert changed(before, tree_state(demo_dir, skip=())) == set()


def test_the_free_nvlink_pair_with_a_vf_at_pix_each(cli, demo_dir):
    before = tree_state(demo_dir, skip=())
    rc, out, err = cli("place", "--gpus", "2", "--with-nic", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["gpus"] == ["0000:da:00.0", "0000:db:00.0"] and d["nics"] == ["0000:dc:00.1", "0000:dc:00.2"]
    assert d["nodes"] == [1]
    assert d["reasons"][:4] == ["one NVLink domain (every pair joined by NVLink)", "one PCIe switch (PIX)",
                                "NUMA node 1", "a free VF at PIX for 2 of 2 GPU(s)"]
    # 70% of node 1's 60 CPUs outside the host's = 42, capped by the whole cores no other VM is pinned to
    # (train-c, shut off, holds 48-55,112-119; db-1, mig-infer-b, train-b and legacy-app the rest)
    assert d["vcpus"] == 16 and d["cpus"] == [c for k in range(56, 64) for c in (k, k + 64)]
    assert d["vcpus"] <= 0.7 * 64
    assert d["memory_kib"] == 319 * 1048576  # 2 × 2 × 81559 MiB of VRAM, in whole 1 GiB pages
    assert d["hugepages"] == {"size_kib": 1048576, "per_node": {"1": 319}, "free": {"1": 80}}
    assert "hugepages of 1 GiB on node 1: 319 needed, 80 free of 144 reserved; 239 more to reserve from its free " \
           "memory" in d["reasons"]
    assert d["alternatives"] == []  # no other two GPUs are free
    assert changed(before, tree_state(demo_dir, skip=())) == set()


def test_a_third_gpu_is_refused_with_what_holds_each(cli):
    rc, out, err = cli("place", "--gpus", "3")
    assert rc == 1
    assert out.startswith("no set of 3 GPU(s): 3 GPUs asked for; 2 free (GPU 8 (0000:da:00.0), GPU 9 "
                          "(0000:db:00.0))\n")
    assert len(out.splitlines()) == 9  # the head, then one line per GPU that is not free
    for held in ("GPU 0 (0000:18:00.0): busy: pid 4242 python3, pid 4310 torchrun",
                 "GPU 1 (0000:19:00.0): in VM train-a (running)'s definition",
                 "GPU 4 (0000:9a:00.0): in VM train-c (shut off)'s definition",
                 "GPU 6 (0000:ba:00.0): IOMMU group 34 not viable"):
        assert f"\n  {held}" in out
    rc, out, err = cli("place", "--gpus", "3", "--json")
    assert rc == 1 and json.loads(out)["refusal"].startswith("3 GPUs asked for; 2 free")


@pytest.mark.parametrize("argv, message", [
    (("--gpus", "0"), "argument --gpus: 0 is out of range"),
    (("--gpus", "1", "--memory-factor", "0"), "argument --memory-factor: '0': expected a positive number"),
    (("--gpus", "1", "--memory-factor", "nan"), "expected a positive number"),
    (("--gpus", "1", "--vm", "nope"), "unknown VM nope"),
])
def test_bad_input_is_one_line_exit_2(cli, argv, message):
    rc, out, err = cli("place", *argv)
    assert rc == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err
