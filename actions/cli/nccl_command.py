"""`nodeconsole nccl command` and `nccl topo`: the multi-node command line (printed, never launched), a
VM's guest environment, and a VM's NCCL topology file (actions/cli/nccl.py registers them)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from nodeconsole.console.cli_base import seams_from_args
from nodeconsole.console.usage import UsageError

if TYPE_CHECKING:  # the NCCL checks are imported when a command runs
    pass

from nodeconsole.actions.cli.nccl_text import _sweep


def run_command(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.commands import format_command, mpirun_command, torchrun_commands, validate_env

    if args.vm is not None and args.hosts is None:
        return _vm_env(args)
    if args.topo_path is not None and args.vm is None:
        raise UsageError("--topo-path goes with --vm NAME")
    if args.hosts is None or (args.gpus_per_host is None and args.vm is None):
        raise UsageError("the following arguments are required: --hosts, --gpus-per-host (or --vm NAME)")
    if args.launcher == "torchrun" and args.binary is not None:
        raise UsageError("--binary is for --launcher mpirun (torchrun runs the PyTorch benchmark)")
    hosts = [h.strip() for h in args.hosts.split(",")]
    if any(not h for h in hosts):
        raise UsageError(f"--hosts {args.hosts!r}: an empty host name")
    env: dict[str, str] = _vm_command_env(args) if args.vm is not None else {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    sweep = _sweep(args)
    try:
        env = validate_env(env)
        if args.launcher == "mpirun":
            lines = [("", mpirun_command(hosts, args.gpus_per_host, args.binary or "all_reduce_perf", sweep, env))]
            envs: dict[str, str] = {}
        else:
            lines = list(torchrun_commands(hosts, args.gpus_per_host, sweep))
            envs = {"NCCL_DEBUG": "INFO", **env}
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(json.dumps({"launcher": args.launcher, "commands": [
            {"host": h or None, "argv": argv, "env": envs, "shell": format_command(argv, envs)}
            for h, argv in lines]}, indent=2))
        return 0
    for host, argv in lines:
        if host:
            print(f"# on {host}:")
        print(format_command(argv, envs))
    return 0


# -- topo and command --vm -------------------------------------------------------------------------------
def _vm_topology(args: argparse.Namespace):  # -> VmTopology
    from nodeconsole.actions.nccl.topo_xml import vm_topology
    from nodeconsole.actions.plan import RequestError
    from nodeconsole.console.collector import Collector

    seams = seams_from_args(args)
    snap = Collector(seams).collect()
    try:
        return vm_topology(snap, args.vm, cpuinfo=seams.root.read("proc/cpuinfo") or "")
    except RequestError as e:
        raise UsageError(str(e)) from None


def _kept_note(args: argparse.Namespace, topo) -> str | None:
    """Where `prepare` keeps this VM's NCCL files on the host, when it wrote them."""
    from nodeconsole.actions.nccl.guest_files import guest_files_dir

    where = guest_files_dir(topo.vm)
    if where is None or not seams_from_args(args).root.exists(where):
        return None
    return f"prepare keeps this VM's topology and environment in /{where}/ (topo.xml, nccl.env)"


def run_topo(args: argparse.Namespace) -> int:
    topo = _vm_topology(args)
    if (kept := _kept_note(args, topo)) is not None:
        print(f"note: {kept}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(topo.xml)
    else:
        write_file(args.output, topo.xml)
        print(f"wrote {args.output}: the NCCL topology of VM {topo.vm} ({len(topo.gpus)} GPU(s), "
              f"{len(topo.nics)} NIC function(s)); in the guest: NCCL_TOPO_FILE=<its path there>", file=sys.stderr)
    for note in topo.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def write_file(path: str, text: str) -> None:
    """Write `text` to `path` with mode 0644, never through a symlink (console/outfile.py)."""
    from nodeconsole.console.outfile import OutputError, write_output

    try:
        write_output(path, text.encode("utf-8"), 0o644)
    except OutputError as e:
        raise UsageError(str(e)) from None


SOCKET_IFNAME_DEFAULT = "^lo,docker"  # NCCL's exclusion form: any interface but loopback and docker's


def _topo_path(args: argparse.Namespace) -> str:
    from nodeconsole.actions.nccl.topo_xml import DEFAULT_TOPO_PATH

    path = args.topo_path or DEFAULT_TOPO_PATH
    if not path.startswith("/") or any(c.isspace() or c in "'\"$`\\;&|<>" for c in path):
        raise UsageError(f"--topo-path {path!r}: give an absolute path without spaces or shell characters")
    return path


def _vm_command_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of VM --vm's guest for every rank of a multi-node command (NCCL_TOPO_FILE,
    NCCL_IB_HCA, NCCL_SOCKET_IFNAME: the exclusion form when the host cannot know the guest's interface
    names); --gpus-per-host defaults to the VM's GPU count. --env entries override these."""
    from nodeconsole.actions.nccl.topo_xml import guest_env

    topo = _vm_topology(args)
    env = {i.name: i.value for i in guest_env(topo, _topo_path(args)) if i.value is not None}
    env.setdefault("NCCL_SOCKET_IFNAME", SOCKET_IFNAME_DEFAULT)
    if args.gpus_per_host is None:
        args.gpus_per_host = len(topo.gpus)
    print(f"# VM {topo.vm}'s guest environment ({len(topo.gpus)} GPU(s) per host); NCCL_SOCKET_IFNAME="
          f"{env['NCCL_SOCKET_IFNAME']} unless you set it (--env NCCL_SOCKET_IFNAME=IFACE)", file=sys.stderr)
    return env


def _vm_env(args: argparse.Namespace) -> int:
    from nodeconsole.actions.nccl.topo_xml import guest_env

    for flag, value in (("--gpus-per-host", args.gpus_per_host), ("--binary", args.binary)):
        if value is not None:
            raise UsageError(f"{flag} goes with --hosts (with --vm alone the guest's environment is printed)")
    if args.env or args.launcher != "mpirun":
        raise UsageError("--env and --launcher go with --hosts (with --vm alone the guest's environment is printed)")
    path = _topo_path(args)
    topo = _vm_topology(args)
    items = guest_env(topo, path)
    if args.json:
        print(json.dumps({"vm": topo.vm, "env": {i.name: i.value for i in items if i.value is not None},
                          "unknown": {i.name: i.note for i in items if i.value is None},
                          "notes": {i.name: i.note for i in items if i.value is not None and i.note},
                          "topology_notes": topo.notes}, indent=2))
        return 0
    print(f"# NCCL environment for VM {topo.vm} ({len(topo.gpus)} GPU(s), {len(topo.nics)} NIC function(s)): set it "
          "in the guest")
    for i in items:
        if i.value is None:
            print(f"# export {i.name}=...  # {i.note}")
        else:
            print(f"export {i.name}={i.value}" + (f"  # {i.note}" if i.note else ""))
    for note in topo.notes:
        print(f"# note: {note}")
    if (kept := _kept_note(args, topo)) is not None:
        print(f"# note: {kept}")
    return 0
