"""Proxmox VE: what a Proxmox host needs for its GPU VMs that a libvirt host does not (skipped elsewhere).

- pve-vfio: the GPUs its VMs take whole are claimed by vfio-pci before their own driver (Proxmox's PCI
  passthrough guide: `options vfio-pci ids=…` and `softdep nvidia pre: vfio-pci` in /etc/modprobe.d, or the
  driver blacklisted; or a driverctl override of the address); a vfio-pci `ids=` that also names the model
  of GPUs the host keeps takes those too.
- pve-mappings: the resource mappings of /etc/pve/mapping/pci.cfg for this node still match sysfs (a
  mismatch refuses the start of every VM that uses the mapping: "hardware probably changed").
- pve-hookscripts: every `hookscript:` a VM config names is there (else its start fails).
"""
from __future__ import annotations

from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.checks_common import Context, Verdict, names, not_applicable
from nodeconsole.console.doctor.files import MODPROBE_DIRS, modprobe_lines
from nodeconsole.console.doctor.model import CheckResult, Fix
from nodeconsole.console.hosttext import visible
from nodeconsole.console.model import Gpu, Vm
from nodeconsole.console.vms.proxmox import read_conf, vm_ids
from nodeconsole.console.vms.proxmox_mapping import PCI_CFG, entry_mismatch, node_name, read_mappings

NOT_PROXMOX = "not a Proxmox VE host (no /etc/pve/qemu-server)"
VFIO = ("vfio-pci", "vfio_pci")
GPU_DRIVERS = ("nvidia", "nouveau")  # what takes an NVIDIA GPU at boot when vfio-pci does not first
DRIVERCTL_DIR = "etc/driverctl.d"  # driverctl's saved overrides (pci-ADDRESS: the driver), applied at boot
STORAGE_CFG = "etc/pve/storage.cfg"
DEFAULT_DIRS = {"local": "/var/lib/vz"}  # Proxmox's own `dir: local` when storage.cfg says nothing of it


# What to do by hand (no plan fixes these): (why no plan, what to do), for actions/doctor_fixes.py's BY_HAND
PVE_BY_HAND: dict[str, tuple[str, str]] = {
    "pve-vfio": ("which GPUs a Proxmox host keeps and which its VMs take is the admin's choice",
                 "bind the GPUs the VMs take to vfio-pci at boot (driverctl set-override ADDRESS vfio-pci, or "
                 "options vfio-pci ids= with softdep nvidia pre: vfio-pci when no kept GPU shares the model)"),
    "pve-mappings": ("a resource mapping names the cluster's hardware", "edit the mapping to this node's devices "
                     "(Datacenter → Resource Mappings)"),
    "pve-hookscripts": ("a hookscript is the admin's own program", "put the script back, or take it out of the VM's "
                        "config (qm set VMID --delete hookscript)"),
}


def is_proxmox(ctx: Context) -> bool:
    return ctx.files.isdir(facts.PVE_QEMU_SERVER)


def _modprobe(ctx: Context) -> tuple[set[str], set[str], set[str], list[str]]:
    """(vfio-pci ids, modules with `softdep MOD pre: vfio-pci`, blacklisted modules, the files) from
    modprobe.d and the kernel command line's vfio-pci.ids=."""
    ids: set[str] = set()
    soft: set[str] = set()
    black: set[str] = set()
    seen: list[str] = []
    for path, text in ctx.files.conf_files(MODPROBE_DIRS):
        for words in modprobe_lines(text):
            if words[:2] in (["options", v] for v in VFIO):
                for w in words[2:]:
                    if w.startswith("ids="):
                        ids.update(i.lower() for i in w[4:].split(",") if i)
                        seen.append(path)
            elif words[:1] == ["softdep"] and len(words) > 2 and "pre:" in words:
                pre = words[words.index("pre:") + 1:]
                if any(p in VFIO for p in (pre[:pre.index("post:")] if "post:" in pre else pre)):
                    soft.add(words[1].replace("-", "_"))
                    seen.append(path)
            elif words[:1] == ["blacklist"] and len(words) > 1:
                black.add(words[1].replace("-", "_"))
    for word in ctx.cmdline or []:
        if word.startswith(("vfio-pci.ids=", "vfio_pci.ids=")):
            ids.update(i.lower() for i in word.split("=", 1)[1].split(",") if i)
    return ids, soft, black, seen


def _pci_id(ctx: Context, address: str) -> str | None:
    dev = ctx.snap.pci(address)
    return f"{dev.vendor_id:04x}:{dev.device_id:04x}" if dev is not None else None


def check_pve_vfio(ctx: Context) -> CheckResult:
    v = Verdict("pve-vfio")
    if not is_proxmox(ctx):
        return not_applicable(v.check_id, NOT_PROXMOX)
    passed = {h.gpu: vm for vm in ctx.snap.vms for h in vm.hostdevs if h.type == "pci" and h.gpu and h.address == h.gpu}
    kept = [g for g in ctx.snap.gpus if g.address not in passed]
    ids, soft, black, seen = _modprobe(ctx)
    listed = sorted(black & set(GPU_DRIVERS))
    v.read(facts.MODPROBE_D, f"vfio-pci ids={','.join(sorted(ids)) or 'none'}; softdep pre vfio-pci: "
                             f"{','.join(sorted(soft)) or 'none'}; blacklisted: {','.join(listed) or 'none'}")
    late = [d for d in GPU_DRIVERS if d not in soft and d not in black]
    bare: list[str] = []
    early: list[str] = []
    for addr, vm in sorted(passed.items()):
        gpu, pid = ctx.snap.gpu(addr), _pci_id(ctx, addr)
        label = f"{ctx.label(gpu) if gpu else addr} ({pid or '?'}, in VM {vm.vmid or vm.name}'s config)"
        if (ctx.files.read(f"{DRIVERCTL_DIR}/pci-{addr}") or "").strip() in VFIO:
            v.read(f"{DRIVERCTL_DIR}/pci-{addr}", "vfio-pci")
        elif pid is None or pid not in ids:
            bare.append(label)
        elif late:
            early.append(label)
    if early:
        v.fails.append(f"{names(early)}: vfio-pci's ids name {'it' if len(early) == 1 else 'them'} but nothing loads "
                       f"vfio-pci before {' and '.join(late)} (no softdep, not blacklisted): the driver may take "
                       f"{'it' if len(early) == 1 else 'them'} first")
    if bare:
        v.warns.append(f"{names(bare)}: not claimed by vfio-pci at boot: the NVIDIA driver takes "
                       f"{'it' if len(bare) == 1 else 'them'} and Proxmox has to tear it off at each VM start")
    shared = sorted({ctx.label(g) for g in kept if (_pci_id(ctx, g.address) or "") in ids})
    if shared:
        (v.notes if v.fails else v.warns).append(f"vfio-pci ids= also takes {names(shared)}, which the host keeps (same model): "
                       "bind the passed GPUs by address instead (driverctl set-override ADDRESS vfio-pci)")
    v.fix = _vfio_fix(ctx, passed, kept, late)
    if not passed:
        return v.result("no VM config takes a GPU whole")
    return v.result(f"vfio-pci claims the GPUs the VMs take ({names(sorted(passed))}) before "
                    f"{' and '.join(GPU_DRIVERS)}")


def _vfio_fix(ctx: Context, passed: dict[str, Vm], kept: list[Gpu], late: list[str]) -> Fix:
    kept_ids = {_pci_id(ctx, g.address) for g in kept}
    wanted = sorted({i for a in passed if (i := _pci_id(ctx, a)) is not None})
    if any(i in kept_ids for i in wanted):  # the model is also the host's: by address
        return Fix("bind the GPUs the VMs take to vfio-pci by address (their model is also the host's GPUs')",
                   tuple(f"driverctl set-override {a} vfio-pci" for a in sorted(passed)), False, False)
    conf = f"/{facts.MODPROBE_D}/vfio.conf"
    cmds = [f"echo 'options vfio-pci ids={','.join(wanted)}' >> {conf}"]
    cmds += [f"echo 'softdep {d} pre: vfio-pci' >> {conf}" for d in late]
    return Fix("have vfio-pci claim them at boot, before the GPU drivers, and rebuild the initramfs",
               (*cmds, "update-initramfs -u -k all"), True, False)


def check_pve_mappings(ctx: Context) -> CheckResult:
    v = Verdict("pve-mappings")
    if not is_proxmox(ctx):
        return not_applicable(v.check_id, NOT_PROXMOX)
    root = ctx.files.root
    if not ctx.files.exists(PCI_CFG):
        return v.result(f"no PCI resource mappings (/{PCI_CFG})")
    maps, node = read_mappings(root), node_name(root)
    v.read(PCI_CFG, f"{len(maps.mappings)} mapping(s); this node: {node or '?'}")
    v.fails += [visible(e) for e in maps.errors]
    here = 0
    for m in maps.mappings.values():
        for e in m.entries:
            if e.node != node:
                continue
            here += 1
            why = entry_mismatch(root, e)
            if why is not None:
                v.fails.append(f"mapping {visible(m.name)} (/{PCI_CFG}:{e.line}): {visible(why)}: Proxmox refuses to "
                               "start a VM with it")
    if v.fails:
        v.fix = Fix(f"edit the mapping to this host's devices (Datacenter → Resource Mappings, or /{PCI_CFG})")
    return v.result(f"{here} mapping entr{'y' if here == 1 else 'ies'} of node {node or '?'} match sysfs")


def _storage_dirs(ctx: Context) -> dict[str, str]:
    """Storage ID → its directory (storage.cfg's `dir:` / `nfs:` / `cifs:`… with a `path`)."""
    out = dict(DEFAULT_DIRS)
    current = None
    for line in (ctx.files.read(STORAGE_CFG) or "").splitlines():
        if line and not line[0].isspace() and ":" in line:
            current = line.split(":", 1)[1].strip()
        elif current and line.strip().startswith("path "):
            out[current] = line.strip()[5:].strip()
    return out


def check_pve_hookscripts(ctx: Context) -> CheckResult:
    v = Verdict("pve-hookscripts")
    if not is_proxmox(ctx):
        return not_applicable(v.check_id, NOT_PROXMOX)
    root, dirs, found = ctx.files.root, _storage_dirs(ctx), 0
    for vmid in vm_ids(root):
        conf = read_conf(root, vmid)
        line = conf.main.get("hookscript") if conf is not None else None
        if line is None:
            continue
        found += 1
        storage, _, volume = line.value.partition(":")
        base = dirs.get(storage)
        if base is None or not volume.startswith("snippets/"):
            v.fails.append(f"VM {vmid} names hookscript {visible(line.value)}: not a snippet of a directory storage")
            continue
        rel = f"{base.strip('/')}/{volume}"
        if not ctx.files.exists(rel):
            v.fails.append(f"VM {vmid} names hookscript {visible(line.value)}, absent (/{visible(rel)}): "
                           "the VM does not start")
        else:
            v.read(rel, "present")
    if v.fails:
        v.fix = Fix("put the script back (executable), or take it out of the VM's config",
                    ("qm set VMID --delete hookscript",))
    return v.result(f"{found} hookscript(s) named, each present" if found else "no VM names a hookscript")
