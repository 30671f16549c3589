"""`nodeconsole gpu drain GPU --reason TEXT` and `gpu undrain GPU`: the admin's "no new work" mark on a
GPU, kept in the drains file (console/drains.py reads it into the snapshot; actions/drain_gate.py refuses
work on a drained GPU).

One step kind, `gpu_drain`: `{"kind": "gpu_drain", "gpu": ADDR, "drain": ENTRY | null}` — the file's
entry for that GPU is ENTRY (null: the GPU is not drained). Its inverse is the entry there was, so undo
puts back exactly the previous mark (or none) of that GPU and leaves the other GPUs' marks alone. The
file is written whole by the one writer (console/outfile.write_atomic: mode 0644, fsynced, renamed over
it, the directory fsynced); a link in its place is refused, never followed.
"""
from __future__ import annotations

import datetime as dt
import os
from typing import Any

from nodeconsole.actions.audit import who
from nodeconsole.actions.boot_steps import read_exact
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import target_path
from nodeconsole.actions.plan import Check, Op, Plan, RequestError, Step, StepError, step_kind
from nodeconsole.actions.safe_files import ensure_dir
from nodeconsole.actions.targets import resolve_gpu
from nodeconsole.console.drains import DRAINS_FILE, parse, reason_problem, render, who_name
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.outfile import fsync_dir, write_atomic
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

FILE_MODE = 0o644  # the exporter (not root) reads it; a reason is no secret
DIR_MODE = 0o755


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def drain_who() -> dict[str, Any]:
    """Who drains: the audit's who() without the terminal and the SSH client (the file is world-readable)."""
    w = who()
    return {k: w[k] for k in ("user", "uid", "sudo_user") if k in w}


# -- the file ---------------------------------------------------------------------------------------------

def read_drains(root: Root) -> dict[str, dict[str, Any]]:
    """The file's entries. StepError when it is a link, unreadable or damaged: a change must not
    overwrite marks it cannot read (fix or remove the file by hand)."""
    data = read_exact(root, DRAINS_FILE)
    entries, problems = parse(data)
    if problems:
        raise StepError(f"{problems[0]}; fix or remove /{DRAINS_FILE} by hand, then plan again")
    return entries


def write_drains(root: Root, entries: dict[str, dict[str, Any]]) -> None:
    """Replace the file with `entries` (none: the file is removed), atomically and durably."""
    path = target_path(root, DRAINS_FILE)
    if os.path.islink(path):
        raise StepError(f"/{DRAINS_FILE} is a symbolic link: not followed (remove it)")
    if not entries:
        if os.path.lexists(path):
            os.unlink(path)
            fsync_dir(path.parent)
        return
    ensure_dir(path.parent, DIR_MODE)
    write_atomic(path, render(entries), FILE_MODE)


# -- the step kind ----------------------------------------------------------------------------------------

def _entry(op: Op) -> dict[str, Any] | None:
    want = op.get("drain")
    if want is None:
        return None
    if not isinstance(want, dict) or reason_problem(want.get("reason")) or not isinstance(want.get("when"), str):
        raise StepError("malformed gpu_drain operation: 'drain' must hold a reason and a time")
    return want


@step_kind("gpu_drain")
def gpu_drain_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when the GPU's entry already is the one asked for."""
    addr = parse_pci_address(op["gpu"])
    want = _entry(op)
    root = host.root
    current = read_drains(root).get(addr)
    if current == want:
        return None

    def apply() -> None:
        entries = read_drains(root)  # afresh: another GPU's mark made meanwhile is kept
        if want is None:
            entries.pop(addr, None)
        else:
            entries[addr] = want
        write_drains(root, entries)

    def verify() -> str | None:
        now = read_drains(root).get(addr)
        return None if now == want else f"/{DRAINS_FILE} does not hold the expected mark of {addr}"

    inverse = {"kind": "gpu_drain", "gpu": addr, "drain": current}
    if want is None:
        return Step(f"Lift the drain of GPU {addr} (/{DRAINS_FILE})",
                    "new work may go on the GPU again",
                    (f"nodeconsole gpu undrain {addr}",), dict(op), inverse, apply, verify)
    detail = f"reason: {want['reason']}\nby: {who_name(want.get('who'))}\nat: {want['when']}"
    return Step(f"Mark GPU {addr} drained (/{DRAINS_FILE})",
                "passthrough, MIG, vGPU, NIC pairing and the NCCL pick refuse it until `gpu undrain`",
                (f"nodeconsole gpu drain {addr} --reason …",), dict(op), inverse, apply, verify, detail=detail)


# -- planners ---------------------------------------------------------------------------------------------

def plan_drain(host: ActionHost, snap: HostSnapshot, gpu_text: str, reason: str,
               entry: dict[str, Any] | None = None) -> Plan:
    """Plan draining a GPU. RequestError for a bad reason or GPU; refused when it is drained already.
    `entry`: the mark to write (the re-plan under the lock writes the same who and when)."""
    problem = reason_problem(reason)
    if problem:
        raise RequestError(problem)
    g = resolve_gpu(snap, gpu_text)
    mark = entry or {"reason": reason, "who": drain_who(), "when": now_rfc3339()}
    checks = [Check("GPU not drained yet", True, "not drained")]
    steps = []
    if g.drain is not None:
        checks = [Check("GPU not drained yet", False, f"GPU {g.index} ({g.address}) is already {g.drain.summary}",
                        f"`nodeconsole gpu undrain {g.address}` first to drain it with another reason")]
    else:
        step = gpu_drain_step(host, {"kind": "gpu_drain", "gpu": g.address, "drain": mark})
        steps = [step] if step is not None else []
    plan = Plan("gpu drain", f"Drain GPU {g.index} ({g.address}): no new work until `gpu undrain`",
                {"gpu": g.address, "reason": reason}, checks=checks, steps=steps)
    if g.owner.vms:
        names = ", ".join(g.owner.vms)
        plan.notes.append(f"VM {names} holds this GPU: draining marks it, it does not stop or evict the VM "
                          "(its work goes on; new passthrough, MIG, vGPU and NCCL work is refused)")
    plan.rebuild = lambda: plan_drain(host, host.snapshot(), g.address, reason, mark)
    return plan


def plan_undrain(host: ActionHost, snap: HostSnapshot, gpu_text: str) -> Plan:
    """Plan lifting a GPU's drain (an empty plan when it is not drained)."""
    g = resolve_gpu(snap, gpu_text)
    step = gpu_drain_step(host, {"kind": "gpu_drain", "gpu": g.address, "drain": None})
    plan = Plan("gpu undrain", f"Undrain GPU {g.index} ({g.address}): new work may go on it again",
                {"gpu": g.address}, steps=[step] if step is not None else [])
    if g.drain is not None:
        plan.notes.append(f"it was {g.drain.summary}")
    plan.rebuild = lambda: plan_undrain(host, host.snapshot(), g.address)
    return plan
