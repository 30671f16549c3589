"""`nodeconsole mig`: show, plan and apply a GPU's MIG layout; save the layouts and restore them at boot.

    nodeconsole mig GPU                         # mode, layout, profiles and their placements
    nodeconsole mig GPU LAYOUT [--apply] [--yes]   # e.g. 3g.40gb,2g.20gb,1g.10gb*2 (NAME@START pins)
    nodeconsole mig GPU --off [--apply] [--yes]
    nodeconsole mig save [--apply] [--yes]      # layouts file + boot unit
    nodeconsole mig restore [--apply] [--yes]   # what the boot unit runs

Like every change: the plan is printed, nothing changes without --apply (exit 0 done / nothing to do,
1 refused / cancelled / failed, 2 bad arguments).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nodeconsole.actions.cli.change import allow_unhealthy_arg, change_args, run_request, session_for
from nodeconsole.console.cli_base import subcommand
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:  # the actions are imported when a command runs
    from nodeconsole.actions.host import ActionHost


@subcommand("mig", "plan and apply a GPU's MIG layout; `mig save` / `mig restore` keep layouts across reboots")
def configure_mig(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="GPU|save|restore",
                   help="console index, PCI address or UUID of a GPU; or `save` / `restore`")
    p.add_argument("layout", nargs="?", metavar="LAYOUT",
                   help="instances by profile name: 3g.40gb,2g.20gb,1g.10gb*2; NAME@START pins a placement; "
                        "`none` keeps MIG on with no instance")
    p.add_argument("--off", action="store_true", help="destroy every instance and turn MIG mode off")
    allow_unhealthy_arg(p)
    change_args(p)
    p.set_defaults(func=run_mig)


def run_mig(args: argparse.Namespace) -> int:
    from nodeconsole.actions.session import MigLayout, MigRestore, MigSave

    target = args.target
    session = session_for(args)
    if target in ("save", "restore"):
        if args.layout is not None or args.off:
            raise UsageError(f"`mig {target}` takes no layout and no --off")
        return run_request(args, MigSave() if target == "save" else MigRestore(), session)
    if args.layout is None and not args.off:
        if args.apply:
            raise UsageError("--apply needs a LAYOUT or --off")
        return _show(session.host, target)
    if args.allow_unhealthy and args.off:
        raise UsageError("--allow-unhealthy goes with a LAYOUT: turning MIG off is never refused for health")
    return run_request(args, MigLayout(target, args.layout, args.off, allow_unhealthy=args.allow_unhealthy), session)


def _show(host: ActionHost, target: str) -> int:
    from nodeconsole.actions.mig import mig_state_for, pinned
    from nodeconsole.actions.mig_planner import format_layout, slices_text
    from nodeconsole.actions.passthrough import resolve_gpu
    from nodeconsole.actions.plan import RequestError, StepError

    snap = host.snapshot()
    try:
        g = resolve_gpu(snap, target)
    except RequestError as e:
        raise UsageError(str(e)) from None
    print(f"GPU {g.index} ({g.address}, {g.name})")
    if g.driver != "nvidia" or g.nvml_index is None:
        print(f"  on {g.driver or 'no driver'}: NVML cannot see it, so it has no MIG state to show")
        return 1
    try:
        st = mig_state_for(host, snap, g)
    except StepError as e:
        print(f"  {e}")
        return 1
    if not st.capable:
        print("  MIG: not supported")
        return 0
    mode = {0: "off", 1: "on"}
    pending = "" if st.pending == st.current else f" (pending {mode[st.pending]})"
    print(f"  MIG mode {mode[st.current]}{pending}")
    if st.current:
        print(f"  layout: {format_layout(pinned(st), st.profiles)}")
        for inst in st.instances:
            used = f"  in use by {', '.join(inst.users)}" if inst.users else ""
            print(f"    GI {inst.gi_id:<3} {inst.profile:<11} {slices_text(inst.start, inst.size):<12} "
                  f"{len(inst.cis)} compute instance(s){used}")
    src = "NVML" if not st.table else f"nodeconsole's table for {st.table}; NVML lists them once MIG is on"
    print(f"  profiles ({src}):")
    for p in st.profiles:
        starts = ",".join(str(s) for s, _ in p.placements)
        print(f"    {p.name:<11} id {p.profile_id:<3} {p.slice_count} compute slice(s)  {p.memory_mib} MiB  "
              f"max {p.max_instances}  starts {starts} (size {p.size})")
    return 0
