"""MIG layouts across reboots. GPU instances never survive a reboot (nor MIG mode on Hopper), so
`plan_mig_save` writes every MIG GPU's layout, each instance pinned to its placement, to
/etc/nodeconsole/mig-layout.json plus a oneshot systemd unit that runs `nodeconsole mig restore` at
boot (before libvirtd and the vGPU manager), and enables it. `plan_mig_restore` plans re-creating the
saved layouts with actions/mig.py. Paths are under the host's root, so the demo keeps them in its tree.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import make_parents, missing_dirs, read_raw, remove_dirs, target_path
from nodeconsole.actions.mig import _label, mig_state_for, pinned, plan_mig
from nodeconsole.actions.mig_planner import format_layout
from nodeconsole.actions.plan import Check, Op, Plan, RequestError, Step, StepError, build_step, step_kind
from nodeconsole.console.model import HostSnapshot

LAYOUT_FILE = "etc/nodeconsole/mig-layout.json"
UNIT_NAME = "nodeconsole-mig-restore.service"
UNIT_FILE = f"etc/systemd/system/{UNIT_NAME}"
WANTS_LINK = f"etc/systemd/system/multi-user.target.wants/{UNIT_NAME}"
SCHEMA = 1


def _command(host: ActionHost) -> str:
    # The command of this installation (its interpreter's script), never whatever $PATH finds first.
    script = Path(sys.executable).parent / "nodeconsole"
    exe = str(script) if script.is_file() else f"{sys.executable} -m nodeconsole.console"
    option = host.seams.host_option  # the option naming this host (the demo's --demo)
    return f"{exe} mig restore --apply --yes" + (f" {option}" if option else "")


def render_unit(host: ActionHost) -> str:
    return "\n".join([
        "# Written by nodeconsole (`nodeconsole mig save`): re-creates the saved MIG layouts at boot.",
        "[Unit]",
        "Description=Re-create the saved MIG layouts (nodeconsole mig restore)",
        "After=systemd-modules-load.service nvidia-persistenced.service",
        "Before=libvirtd.service nvidia-vgpu-mgr.service nvidia-vgpud.service",
        f"ConditionPathExists=/{LAYOUT_FILE}",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        f"ExecStart={_command(host)}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def plan_mig_save(host: ActionHost, snap: HostSnapshot) -> Plan:
    """Plan writing the current MIG layouts and the boot unit that restores them."""
    plan = Plan(action="mig-save", title=f"Save the MIG layouts to /{LAYOUT_FILE} and restore them at boot",
                request={"file": f"/{LAYOUT_FILE}"}, rebuild=lambda: plan_mig_save(host, host.snapshot()))
    entries = []
    for g in snap.gpus:
        if g.mig.mode != "enabled" and g.mig.pending_mode != "enabled":
            continue
        try:
            st = mig_state_for(host, snap, g)
        except StepError as e:
            plan.checks.append(Check(f"NVML answers for {g.address}", False, str(e)))
            continue
        layout = format_layout(pinned(st), st.profiles)
        entries.append({"address": g.address, "uuid": g.uuid, "name": g.name, "layout": layout})
        plan.notes.append(f"{_label(g)}: {layout}")
    if not entries:
        plan.notes.append("no GPU has MIG mode on: the file lists none, and restore will change nothing")
    if not plan.ok:
        return plan
    content = json.dumps({"schema": SCHEMA, "written_by": "nodeconsole mig save", "gpus": entries},
                         indent=2) + "\n"
    ops: list[Op] = [{"kind": "file", "path": LAYOUT_FILE, "content": content},
                     {"kind": "file", "path": UNIT_FILE, "content": render_unit(host)},
                     {"kind": "symlink", "path": WANTS_LINK, "target": f"/{UNIT_FILE}"}]
    whys = {LAYOUT_FILE: "the layouts to re-create at boot, each instance pinned to its placement",
            UNIT_FILE: "runs `nodeconsole mig restore` at boot, before libvirtd and the vGPU manager start"}
    for op in ops:
        step = build_step(host, op)
        if step is not None:
            step.why = whys.get(op["path"], step.why)
            plan.steps.append(step)
    return plan


def read_saved(host: ActionHost) -> list[dict[str, Any]]:
    """The saved layouts. Raises RequestError when there are none or the file is broken."""
    text = read_raw(host.root, LAYOUT_FILE)
    if text is None:
        raise RequestError(f"no saved MIG layouts at /{LAYOUT_FILE}: run `nodeconsole mig save` first")
    try:
        data = json.loads(text)
        gpus = data["gpus"]
        if data.get("schema") != SCHEMA or not all(isinstance(e.get("address"), str) and
                                                   isinstance(e.get("layout"), str) for e in gpus):
            raise ValueError("unexpected content")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RequestError(f"/{LAYOUT_FILE} is not a saved MIG layout file ({e}); run `nodeconsole mig save` "
                           "again") from None
    return gpus


def plan_mig_restore(host: ActionHost, snap: HostSnapshot) -> Plan:
    """Plan re-creating every saved layout. GPUs that are gone, passed through or replaced (another UUID)
    are skipped with a note; any other refusal refuses the whole restore."""
    saved = read_saved(host)
    plan = Plan(action="mig-restore", title=f"Restore the MIG layouts saved in /{LAYOUT_FILE}",
                request={"file": f"/{LAYOUT_FILE}"}, rebuild=lambda: plan_mig_restore(host, host.snapshot()))
    for entry in saved:
        addr, layout = entry["address"], entry["layout"]
        g = snap.gpu(addr)
        if g is None:
            plan.notes.append(f"skipped {addr}: no such GPU on this host now")
            continue
        if entry.get("uuid") and g.uuid and entry["uuid"] != g.uuid:
            plan.notes.append(f"skipped {addr}: another GPU sits there now ({g.uuid}, saved {entry['uuid']})")
            continue
        if g.driver != "nvidia":
            plan.notes.append(f"skipped {addr}: it is on {g.driver or 'no driver'}, not the host's nvidia driver")
            continue
        sub = plan_mig(host, snap, addr, layout)
        plan.checks += [Check(f"{addr}: {c.title}", c.ok, c.reason, c.fix) for c in sub.checks]
        plan.steps += sub.steps
        plan.notes += [n for n in sub.notes if n not in plan.notes and "mig save" not in n]
    if not saved:
        plan.notes.append("the file lists no GPU")
    return plan


@step_kind("symlink")
def symlink_step(host: ActionHost, op: Op) -> Step | None:
    """`{"kind": "symlink", "path": REL, "target": TEXT|None}`: a symbolic link under the root pointing at
    `target` (None: no link). How `systemctl enable` enables a unit, done without systemctl."""
    rel, target = op["path"].lstrip("/"), op.get("target")
    if ".." in rel.split("/"):
        raise StepError(f"refusing a path outside the root: {rel}")
    path = target_path(host.root, rel)
    current = os.readlink(path) if os.path.islink(path) else None
    if current == target and (target is not None or not os.path.lexists(path)):
        return None
    if current is None and os.path.lexists(path):
        raise StepError(f"/{rel} exists and is not a link; remove it first")
    made = missing_dirs(host.root, rel) if current is None else []

    def apply() -> None:
        where = target_path(host.root, rel)
        if os.path.islink(where):
            os.unlink(where)
        if target is None:
            remove_dirs(host.root, op.get("remove_dirs") or [])
            return
        created = make_parents(host.root, rel)
        try:
            os.symlink(target, where)
        except BaseException:
            remove_dirs(host.root, created)  # a failed link leaves the host as it was
            raise

    def verify() -> str | None:
        now = os.readlink(path) if os.path.islink(path) else None
        return None if now == target else f"/{rel} points at {now or 'nothing'}, expected {target or 'no link'}"

    inverse = {"kind": "symlink", "path": rel, "target": current, "remove_dirs": made}
    if target is None:
        return Step(f"Disable {os.path.basename(rel)}", "nothing needs it any more", (f"rm /{rel}",), dict(op),
                    inverse, apply, verify)
    return Step(f"Enable {os.path.basename(rel)} at boot", "systemd starts it with multi-user.target",
                (f"systemctl enable {os.path.basename(rel)}  # = ln -s {target} /{rel}",), dict(op), inverse,
                apply, verify)
