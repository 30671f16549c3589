"""The `nccl_guest_files` step kind: a VM's NCCL topology file and guest environment, kept on the host
where `nodeconsole nccl topo --vm` and `nccl command --vm` say they are (GUEST_FILES_DIR/VM/topo.xml and
nccl.env, below the root), for the admin to copy into the guest.

    {"kind": "nccl_guest_files", "vm": NAME, "dir": REL,              # computed from the VM's definition
     "nvlinks": {GPU: [[REMOTE, COUNT], ...]}}                        # (optional) NVLinks read at plan time
    {"kind": "nccl_guest_files", "vm": NAME, "dir": REL,
     "contents": {"topo.xml": TEXT|None, "nccl.env": TEXT|None}}      # exactly these (None: absent)

Without `contents` the files are computed when the step applies, from the host read afresh: `prepare` puts
the GPUs and VFs into the definition in earlier steps of the same plan, and libvirt gives them their guest
PCI addresses only then. A GPU on vfio-pci is invisible to NVML, so the NVLinks the plan read while the
GPUs were still on nvidia come with the operation. The inverse holds the files' contents before (None:
absent), and the directories the step made are removed again when they are empty.
"""
from __future__ import annotations

import re

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import make_parents, missing_dirs, read_raw, remove_dirs, target_path
from nodeconsole.actions.plan import Op, RequestError, Step, StepError, step_kind
from nodeconsole.console.outfile import write_atomic

GUEST_FILES_DIR = "etc/nodeconsole/guests"
TOPO, ENV = "topo.xml", "nccl.env"
NAMES = (TOPO, ENV)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,127}$")


def guest_files_dir(vm: str) -> str | None:
    """Where the host keeps VM `vm`'s NCCL files (root-relative); None for a name that is no plain file name."""
    return f"{GUEST_FILES_DIR}/{vm}" if _SAFE_NAME.match(vm) else None


def render_env(items: list) -> str:  # items: list[topo_xml.EnvItem]
    """The guest's environment as a file to source (`. nccl.env`): known values exported, the rest said."""
    out = ["# NCCL environment for this guest, written by nodeconsole prepare: source it (. nccl.env)"]
    for i in items:
        if i.value is None:
            out.append(f"# {i.name}: {i.note}")
        else:
            out.append(f"export {i.name}={i.value}" + (f"  # {i.note}" if i.note else ""))
    return "\n".join(out) + "\n"


def computed(host: ActionHost, vm: str, nvlinks: dict[str, list[tuple[str, int]]] | None = None) -> dict[str, str]:
    """The topology file and environment of `vm` as its definition is now (`nvlinks`: GPU → (remote, link
    count) where the snapshot cannot see them: GPUs on vfio-pci)."""
    from nodeconsole.actions.nccl.topo_xml import DEFAULT_TOPO_PATH, guest_env, snapshot_nvlinks, vm_topology

    snap = host.snapshot()
    links = None
    if nvlinks:
        vm_gpus = [h.address for v in snap.vms if v.name == vm for h in v.hostdevs if h.address and snap.gpu(h.address)]
        links = {**snapshot_nvlinks(snap, vm_gpus), **nvlinks}
    try:
        topo = vm_topology(snap, vm, cpuinfo=host.root.read("proc/cpuinfo") or "", nvlinks=links)
    except RequestError as e:
        raise StepError(str(e)) from None
    return {TOPO: topo.xml, ENV: render_env(guest_env(topo, DEFAULT_TOPO_PATH))}


def _check(op: Op) -> tuple[str, str, dict[str, str | None] | None]:
    vm, where = op.get("vm"), op.get("dir")
    if not isinstance(vm, str) or not isinstance(where, str) or guest_files_dir(vm) != where:
        raise StepError(f"malformed nccl_guest_files operation: dir must be {GUEST_FILES_DIR}/VM")
    links = op.get("nvlinks")
    if links is not None and (not isinstance(links, dict) or not all(
            isinstance(g, str) and isinstance(rs, list) and all(
                isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int for r in rs)
            for g, rs in links.items())):
        raise StepError("malformed nccl_guest_files operation: nvlinks must map a GPU to [remote, count] pairs")
    contents = op.get("contents")
    if contents is not None and (not isinstance(contents, dict) or set(contents) != set(NAMES) or not all(
            v is None or (isinstance(v, str) and len(v) <= 1 << 20) for v in contents.values())):
        raise StepError("malformed nccl_guest_files operation: contents must give topo.xml and nccl.env")
    return vm, where, contents


@step_kind("nccl_guest_files")
def nccl_guest_files_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when `contents` are given and the files already hold them."""
    vm, where, contents = _check(op)
    root = host.root
    for name in NAMES:
        target_path(root, f"{where}/{name}")
    before = {name: read_raw(root, f"{where}/{name}") for name in NAMES}
    if contents is not None and before == contents:
        return None
    made = missing_dirs(root, f"{where}/{TOPO}")
    inverse: Op = {"kind": "nccl_guest_files", "vm": vm, "dir": where, "contents": before, "remove_dirs": made}
    state: dict[str, dict[str, str | None]] = {}

    def apply() -> None:
        links = {g: [(r, n) for r, n in rs] for g, rs in (op.get("nvlinks") or {}).items()}
        want: dict[str, str | None] = dict(contents) if contents is not None else dict(computed(host, vm, links))
        state["want"] = want
        if any(v is not None for v in want.values()):
            make_parents(root, f"{where}/{TOPO}")
        for name, text in want.items():
            path = target_path(root, f"{where}/{name}")
            if text is None:
                if path.exists() or path.is_symlink():
                    path.unlink()
            else:
                write_atomic(path, text.encode("utf-8"), 0o644)
        if all(v is None for v in want.values()):
            remove_dirs(root, [d for d in op.get("remove_dirs") or [] if isinstance(d, str)  # only where's own
                               and d and (where == d or where.startswith(d + "/"))])

    def verify() -> str | None:
        want = state.get("want") or {}
        wrong = [name for name, text in want.items() if read_raw(root, f"{where}/{name}") != text]
        return f"/{where}/{', '.join(wrong)} do(es) not hold what was written" if wrong else None

    if contents is None:
        return Step(f"Write VM {vm}'s NCCL topology and environment to /{where}/",
                    "NCCL in the guest needs the host's topology (NCCL_TOPO_FILE) and its RDMA devices "
                    "(NCCL_IB_HCA); computed from the definition once the devices are in",
                    (f"nodeconsole nccl topo --vm {vm} -o /{where}/{TOPO}",
                     f"nodeconsole nccl command --vm {vm} > /{where}/{ENV}"), dict(op), inverse, apply, verify)
    gone = all(v is None for v in contents.values())
    return Step(f"{'Remove' if gone else 'Restore'} VM {vm}'s NCCL files in /{where}/", "as they were before",
                tuple(f"rm /{where}/{n}" for n in NAMES) if gone else (f"# restore /{where}/{TOPO}, {ENV}",),
                dict(op), inverse, apply, verify)
