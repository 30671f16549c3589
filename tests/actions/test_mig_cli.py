"""`nodeconsole mig` and `nodeconsole vgpu` on the demo host (in a temporary state directory): plans are
printed and change nothing without --apply; `mig save` writes the layouts and the boot unit under the
demo root, `mig restore` re-creates them."""
from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from nodeconsole.actions.cli import main
from tests.actions.test_passthrough import changed, tree_state

GPU = "0000:9a:00.0"
SAVED = "root/etc/nodeconsole/mig-layout.json"
UNIT = "root/etc/systemd/system/nodeconsole-mig-restore.service"
WANTS = "root/etc/systemd/system/multi-user.target.wants/nodeconsole-mig-restore.service"


def run(capsys, *args: str, stdin: str = "") -> tuple[int, str, str]:
    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        rc = main([*args, "--demo"])
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return rc, out, err


def _instances(state: Path) -> list[tuple[int, int, int]]:
    gpu = next(g for g in json.loads((state / "nvml.json").read_text())["gpus"] if g["address"] == GPU)
    return sorted((gi["profile_id"], gi["start"], gi["size"]) for gi in gpu["mig"]["instances"]) \
        if gpu["mig"]["current"] else []


def test_show_plan_apply_and_apply_again(state, capsys):
    rc, out, _ = run(capsys, "mig", "4")
    assert rc == 0 and "MIG mode off" in out and "3g.40gb     id 9" in out and "starts 0,4 (size 4)" in out
    before = tree_state(state)
    rc, out, _ = run(capsys, "mig", GPU, "3g.40gb,2g.20gb,1g.10gb*2")
    assert rc == 0 and "Enable MIG mode on 0000:9a:00.0" in out and "-cgi 9:4 -C" in out
    assert "Nothing was changed: add --apply" in out
    assert changed(before, tree_state(state)) == set()
    rc, out, _ = run(capsys, "mig", GPU, "3g.40gb,2g.20gb,1g.10gb*2", "--apply", stdin="n\n")
    assert rc == 1 and "cancelled" in _ and _instances(state) == []
    rc, out, err = run(capsys, "mig", GPU, "3g.40gb,2g.20gb,1g.10gb*2", "--apply", "--yes")
    assert rc == 0, err
    assert "ok          Verify the MIG layout of 0000:9a:00.0" in out
    assert _instances(state) == [(9, 4, 4), (14, 0, 2), (19, 2, 1), (19, 3, 1)]
    rc, out, _ = run(capsys, "mig", GPU, "1g.10gb,3g.40gb,1g.10gb,2g.20gb", "--apply", "--yes")
    assert rc == 0 and "Nothing to do" in out
    rc, out, _ = run(capsys, "mig", "4")
    assert "layout: 2g.20gb@0,1g.10gb@2,1g.10gb@3,3g.40gb@4" in out


@pytest.mark.parametrize("args, rc, says", [
    (("mig", GPU, "1g.10gb*8"), 1, "the layout has 8 × 1g.10gb; the GPU allows at most 7"),
    (("mig", GPU, "4g.40gb,3g.40gb,1g.10gb", "--apply", "--yes"), 1, "needs 8 compute slices"),
    (("mig", "0000:3a:00.0", "4g.40gb,3g.40gb"), 1, "taken by 3g.40gb (GI 1, in use by VM mig-infer-a"),
    (("mig", GPU, "foo"), 2, "this GPU has no MIG profile 'foo'"),
    (("mig", GPU, "7g.80gb", "--off"), 2, "not both"),
    (("mig", GPU, "--apply"), 2, "--apply needs a LAYOUT"),
    (("mig", "save", "7g.80gb"), 2, "takes no layout"),
    (("mig", "restore"), 2, "no saved MIG layouts at /etc/nodeconsole/mig-layout.json"),
    (("mig", "10", "7g.80gb"), 2, "no GPU with index 10"),
])
def test_refusals_and_bad_arguments_change_nothing(state, capsys, args, rc, says):
    before = tree_state(state)
    got, out, err = run(capsys, *args)
    assert got == rc and says in out + err
    assert changed(before, tree_state(state)) == set()


def test_save_shows_the_unit_writes_it_on_confirmation_and_restore_brings_layouts_back(state, capsys):
    assert run(capsys, "mig", GPU, "4g.40gb,3g.40gb", "--apply", "--yes")[0] == 0
    rc, out, _ = run(capsys, "mig", "save")
    assert rc == 0 and "ExecStart=" in out and "mig restore --apply --yes" in out
    assert '"layout": "4g.40gb@0,3g.40gb@4"' in out and '"layout": "3g.40gb@0,2g.20gb@4,1g.10gb@6"' in out
    assert not (state / SAVED).exists() and not (state / UNIT).exists()
    rc, out, err = run(capsys, "mig", "save", "--apply", "--yes")
    assert rc == 0, err
    saved = json.loads((state / SAVED).read_text())
    assert {g["address"]: g["layout"] for g in saved["gpus"]} == {
        "0000:3a:00.0": "3g.40gb@0,2g.20gb@4,1g.10gb@6", GPU: "4g.40gb@0,3g.40gb@4"}
    assert "WantedBy=multi-user.target" in (state / UNIT).read_text()
    assert os.readlink(state / WANTS) == "/etc/systemd/system/nodeconsole-mig-restore.service"
    assert run(capsys, "mig", "save")[1].count("Nothing to do") == 1

    # a reboot loses the instances (and MIG mode on Hopper): here, turn MIG off
    assert run(capsys, "mig", GPU, "--off", "--apply", "--yes")[0] == 0 and _instances(state) == []
    rc, out, err = run(capsys, "mig", "restore", "--apply", "--yes")
    assert rc == 0, err
    assert _instances(state) == [(5, 0, 4), (9, 4, 4)]
    assert "Nothing to do" in run(capsys, "mig", "restore")[1]

    # undoing the save (the record before the off/restore ones) removes the files and the link
    log = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    save_id = next(r["id"] for r in log if r.get("action") == "mig-save")
    rc, out, err = run(capsys, "undo", save_id, "--apply", "--yes")
    assert rc == 0, err
    assert not (state / SAVED).exists() and not (state / UNIT).exists() and not os.path.lexists(state / WANTS)


def test_vgpu_list_create_remove(state, capsys):
    rc, out, _ = run(capsys, "vgpu", "list", "--json")
    rows = {r["gpu"]: r for r in json.loads(out)}
    types = {t["type_id"]: t for t in rows["0000:3b:00.0"]["types"]}
    assert types["nvidia-1103"]["available"] == 6 and types["nvidia-1100"]["available"] == 0
    assert "one type per GPU" in types["nvidia-1100"]["why_none"]
    rc, out, _ = run(capsys, "vgpu", "list", "3")
    assert rc == 0 and "nvidia-1103  NVIDIA H100XM-10C        mdev  6 available" in out
    before = tree_state(state)
    uuid = "5eaf1e35-e09a-4873-a1f6-dbadc321b222"
    rc, out, err = run(capsys, "vgpu", "create", "3", "nvidia-1103", "--vm", "build-1", "--uuid", uuid,
                       "--apply", "--yes")
    assert rc == 0, err
    assert (state / "root/sys/bus/mdev/devices" / uuid).exists() and uuid in (state / "libvirt.xml").read_text()
    rc, out, err = run(capsys, "vgpu", "remove", uuid, "--apply", stdin="yes\n")  # the UUID must be typed
    assert rc == 1 and "cancelled" in err
    rc, out, err = run(capsys, "vgpu", "remove", uuid, "--apply", stdin=uuid + "\n")
    assert rc == 0, err
    assert changed(before, tree_state(state)) == set()
    rc, out, _ = run(capsys, "vgpu", "create", "3", "nvidia-1100")
    assert rc == 1 and "no instance available" in out
    assert run(capsys, "vgpu", "create", "3", "nope")[0] == 2
    assert run(capsys, "vgpu")[0] == 2
