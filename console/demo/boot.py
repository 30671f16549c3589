"""Booting the demo host: a bare variant of a preset, what the disk says the next boot does, and the spec
of the host that boot brings up.

The model: a preset describes the host as its boot configuration brings it up (its services re-create
the preset's vGPU devices and MIG layout, its VMs autostart). A boot takes that host and changes what
the disk now says: the kernel command line from /etc/default/grub (the IOMMU, hugepages), the modules
of /etc/modules-load.d and the initramfs list, nouveau blacklists, `options vfio-pci ids=` and
softdeps, sysctl.d, nvidia-persistenced, driverctl's saved overrides, and every GPU's pending MIG mode.
Whatever was changed at run time (drivers bound by hand, mdevs, live hugepages and sysctl writes) is
gone, because the tree is generated afresh."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace

from nodeconsole.console.demo.gen_etc import split_cmdline
from nodeconsole.console.demo.gen_kernel import VFIO_STACK, is_intel, module_name
from nodeconsole.console.demo.spec import (
    NVIDIA,
    GpuSpec,
    HostBridge,
    HostSpec,
    PciDev,
    SriovSpec,
    VfSpec,
    vf_address,
    walk,
)
from nodeconsole.console.doctor import facts
from nodeconsole.console.doctor.bootloader import grub_cmdline
from nodeconsole.console.pciaddr import parse_pci_address
from nodeconsole.console.root import Root

VFIO = "vfio-pci"
_SIZES = {"2M": 2048, "2048K": 2048, "1G": 1048576, "1048576K": 1048576}
_BLACKLIST_CMDLINE = ("modprobe.blacklist",)


# -- the bare host -----------------------------------------------------------------------------------

def bare_spec(spec: HostSpec) -> HostSpec:
    """The same hardware as `spec`, freshly installed: no IOMMU, hugepages or host cores on the command
    line, no vfio or vhost_net (loaded or configured), nouveau loaded and not blacklisted, numa_balancing on,
    persistence off, no VMs, no MIG and no vGPU: every function on its own driver."""
    prefix, _ = split_cmdline(spec.cmdline)
    bridges = tuple(replace(hb, children=tuple(_bare_dev(d) for d in hb.children)) for hb in spec.host_bridges)
    return replace(spec, cmdline=" ".join(prefix), iommu=False, hugepages_2m_per_node=0, hugepages_1g_per_node=0,
                   hugepages_node_pages=(), host_bridges=bridges, vms=(),
                   drivers_loaded=tuple(d for d in spec.drivers_loaded if d != VFIO), vfio_loaded=False,
                   modules_extra=(), vhost_net=False, nouveau_loaded=True, allow_unsafe_interrupts=False,
                   numa_balancing=1,
                   persistence_mode=False, boot_count=0, vfio_at_boot=False, nouveau_blacklisted=False,
                   sysctl_numa_balancing=None, host_cores=(), persistenced_enabled=False)


def _bare_dev(dev: PciDev) -> PciDev:
    driver = dev.default_driver or dev.driver
    gpu = dev.gpu and replace(dev.gpu, mig_enabled=False, mig_pending=None, mig_instances=(), vgpu_types=(),
                              mdevs=(), processes=(), load=(0, 0, 60))
    sriov = dev.sriov
    if sriov is not None:
        vfs = () if any(vf.vgpu_types for vf in sriov.vfs) else tuple(
            VfSpec(vf.default_driver or vf.driver, vf.default_driver) for vf in sriov.vfs)
        sriov = replace(sriov, vfs=vfs)
    return replace(dev, driver=driver, driver_override=None, gpu=gpu, sriov=sriov,
                   children=tuple(_bare_dev(c) for c in dev.children))


# -- what the disk says ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BootConfig:
    """What the next boot reads from the disk (and the GPUs' saved MIG mode)."""
    cmdline_words: tuple[str, ...]  # GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT
    modules: tuple[str, ...]  # modules-load.d and the initramfs list, /sys/module spelling, in order
    blacklist: frozenset[str]
    vfio_ids: frozenset[tuple[int, int]]  # `options vfio-pci ids=` (vendor, device)
    vfio_softdep: bool  # some module loads vfio-pci first (`softdep M pre: vfio-pci`)
    allow_unsafe_interrupts: bool
    sysctl: dict[str, str]  # kernel.numa_balancing, vm.nr_hugepages … (the last file wins)
    persistenced: bool
    driverctl: dict[str, str]  # device → driver
    mig_pending: dict[str, bool]  # GPU address → MIG mode after the reset a boot is


def _lines(text: str | None, comments: str = "#") -> list[list[str]]:
    out = []
    for line in (text or "").splitlines():
        for c in comments:
            line = line.split(c, 1)[0]
        if line.split():
            out.append(line.split())
    return out


def _conf_files(root: Root, d: str) -> list[str]:
    return [f"{d}/{n}" for n in sorted(root.listdir(d)) if n.endswith(".conf")]


def read_boot_config(root: Root, nvml_state: dict | None = None) -> BootConfig:
    grub = grub_cmdline(root)  # as the shell sees /etc/default/grub and grub.d (none known: none)
    words = tuple((grub.words if grub else None) or ())
    modules: list[str] = []
    for path in _conf_files(root, facts.MODULES_LOAD_D) + [facts.INITRAMFS_MODULES]:
        for w in _lines(root.read(path), "#;"):
            if module_name(w[0]) not in modules:
                modules.append(module_name(w[0]))
    blacklist: set[str] = set()
    ids: set[tuple[int, int]] = set()
    softdep = unsafe = False
    for path in _conf_files(root, facts.MODPROBE_D):
        for w in _lines(root.read(path)):
            if w[0] == "blacklist" and len(w) > 1:
                blacklist.add(module_name(w[1]))
            elif w[0] == "install" and len(w) > 2 and w[2] in ("/bin/false", "/bin/true", "/usr/bin/false"):
                blacklist.add(module_name(w[1]))
            elif w[0] == "options" and len(w) > 2 and module_name(w[1]) == "vfio_pci":
                ids |= {p for o in w[2:] if o.startswith("ids=") for i in o[4:].split(",") if (p := _pci_id(i))}
            elif w[0] == "options" and len(w) > 2 and module_name(w[1]) == "vfio_iommu_type1":
                unsafe = unsafe or any(o.split("=", 1)[0] == "allow_unsafe_interrupts" and
                                       o.split("=", 1)[1:] in (["1"], ["Y"], ["y"]) for o in w[2:])
            elif w[0] == "softdep" and "pre:" in w and VFIO in [module_name(x).replace("_", "-") for x in w]:
                softdep = True
    sysctl: dict[str, str] = {}
    for path in _conf_files(root, facts.SYSCTL_D) + ["etc/sysctl.conf"]:
        for line in (root.read(path) or "").splitlines():
            key, eq, value = line.split("#", 1)[0].split(";", 1)[0].partition("=")
            if eq and key.strip():
                sysctl[key.strip().replace("/", ".")] = value.strip()
    driverctl = {}
    for name in root.listdir("etc/driverctl.d"):
        text = (root.read(f"etc/driverctl.d/{name}") or "").strip()
        if name.startswith("pci-") and text:
            try:
                driverctl[parse_pci_address(name[4:])] = text
            except ValueError:
                continue
    mig = {parse_pci_address(g["address"]): bool(g.get("mig", {}).get("pending", g.get("mig", {}).get("current")))
           for g in (nvml_state or {}).get("gpus", []) if g.get("mig")}
    return BootConfig(words, tuple(modules), frozenset(blacklist), frozenset(ids), softdep, unsafe, sysctl,
                      root.exists(facts.PERSISTENCED_WANTS), driverctl, mig)


def _pci_id(text: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4})(:.*)?", text.strip())
    return (int(m.group(1), 16), int(m.group(2), 16)) if m else None


# -- the host a boot brings up -----------------------------------------------------------------------

def _flag(words: list[str], name: str) -> str | None:
    """The value of the last `name=value` word (the kernel takes the last)."""
    value = None
    for w in words:
        if w.split("=", 1)[0] == name:
            value = w.split("=", 1)[1] if "=" in w else ""
    return value


def iommu_on(spec: HostSpec, words: list[str]) -> bool:
    """Intel: only with intel_iommu=on; AMD: on unless amd_iommu=off. iommu=off turns either off; no
    IOMMU without the firmware's table."""
    if not spec.acpi_iommu_table or _flag(words, "iommu") == "off":
        return False
    if is_intel(spec):
        return (_flag(words, "intel_iommu") or "").split(",")[0] in ("on", "1")
    return _flag(words, "amd_iommu") != "off"


def boot_hugepages(words: list[str], sysctl: dict[str, str], nodes: int) -> dict[tuple[int, int], int]:
    """(node, page KiB) → pages the kernel reserves at boot: `hugepagesz=S hugepages=N` (N spread over
    the nodes, the first ones taking the remainder; `hugepages=0:N,1:M` per node), the default size
    from default_hugepagesz; then vm.nr_hugepages from sysctl for the default size."""
    default = _SIZES.get(_flag(words, "default_hugepagesz") or "", 2048)
    size = None
    out: dict[tuple[int, int], int] = {}
    for w in words:
        name, _, value = w.partition("=")
        if name == "hugepagesz":
            size = _SIZES.get(value.upper())
        elif name == "hugepages" and (size or default):
            _spread(out, size or default, value, nodes)
    nr = sysctl.get("vm.nr_hugepages", "")
    if nr.isdigit():
        _spread(out, default, nr, nodes)
    return out


def _spread(out: dict[tuple[int, int], int], size: int, value: str, nodes: int) -> None:
    if ":" in value:
        for part in value.split(","):
            where, _, n = part.partition(":")
            if where.isdigit() and n.isdigit() and int(where) < nodes:
                out[(int(where), size)] = int(n)
    elif value.isdigit():
        total = int(value)
        for node in range(nodes):
            out[(node, size)] = total // nodes + (1 if node < total % nodes else 0)


@dataclass(frozen=True)
class _Drivers:
    """Which driver each function boots on."""
    iommu: bool
    vfio: bool  # vfio-pci loads at boot
    ids: frozenset[tuple[int, int]]  # bound to vfio-pci by ids= (vfio-pci loads early enough)
    driverctl: dict[str, str]

    def pick(self, addr: str, vendor: int, device: int, driver: str | None, override: str | None,
             default: str | None) -> tuple[str | None, str | None]:
        """(driver, driver_override) of one function at boot: driverctl's saved override, else the
        preset's vfio-pci, else vfio-pci by ids=, else the preset's driver (None: kept unbound).
        vfio-pci cannot take a device without an IOMMU group: one held by an override stays unbound,
        one matched by ids= goes to its own driver, which probes it next."""
        saved = self.driverctl.get(addr)
        if saved is not None:
            driver, override = saved, saved
        elif override == VFIO or driver == VFIO:
            driver = VFIO
        elif self.vfio and (vendor, device) in self.ids:
            driver, override = VFIO, None
        if driver == VFIO and not (self.iommu and self.vfio):
            driver = None if override is not None or default == VFIO else default
        return driver, override


def boot_spec(base: HostSpec, boot: BootConfig, boot_count: int) -> HostSpec:
    """The host that boots from `boot` on `base`'s hardware (see the module doc)."""
    prefix, _ = split_cmdline(base.cmdline)
    words = prefix + list(boot.cmdline_words)
    iommu = iommu_on(base, words)
    blacklist = set(boot.blacklist) | {module_name(m) for v in (_flag(words, "modprobe.blacklist"),) if v
                                       for m in v.split(",")}
    listed = set(boot.modules)
    ids = set(boot.vfio_ids)
    for v in (_flag(words, "vfio-pci.ids"), _flag(words, "vfio_pci.ids")):
        ids |= {p for i in (v or "").split(",") if (p := _pci_id(i))}
    driverctl_vfio = VFIO in boot.driverctl.values()
    preset_vfio = any(d.driver_override == VFIO or d.driver == VFIO for _a, d, _p, _h in walk(base))
    vfio = bool(listed & {"vfio_pci"}) or driverctl_vfio or preset_vfio or (boot.vfio_softdep and bool(ids))
    early = bool(listed & {"vfio_pci"}) or boot.vfio_softdep
    drivers = _Drivers(iommu, vfio, frozenset(ids) if early else frozenset(), boot.driverctl)
    bridges = tuple(replace(hb, children=tuple(_boot_dev(d, hb, hb.bus, drivers, boot) for d in hb.children))
                    for hb in base.host_bridges)
    extra = [m for m in boot.modules if m not in VFIO_STACK and m not in ("nouveau", "vhost_net")]
    if not vfio and listed & {"vfio", "vfio_iommu_type1"}:
        extra += ["vfio", "vfio_iommu_type1"]
    has_nvidia_gpu = any(d.vendor == NVIDIA and d.gpu for _a, d, _p, _h in walk(base))
    nouveau = "nouveau" in listed or (has_nvidia_gpu and "nouveau" not in blacklist)
    numa = boot.sysctl.get("kernel.numa_balancing", "1")
    huge = boot_hugepages(words, boot.sysctl, base.cpu.nodes)
    spec = replace(base, cmdline=" ".join(words), iommu=iommu, host_bridges=bridges,
                   hugepages_2m_per_node=0, hugepages_1g_per_node=0,
                   hugepages_node_pages=tuple((n, s, c) for (n, s), c in sorted(huge.items())),
                   drivers_loaded=tuple(d for d in base.drivers_loaded if d != VFIO), vfio_loaded=vfio,
                   modules_extra=tuple(dict.fromkeys(extra)), vhost_net="vhost_net" in listed, nouveau_loaded=nouveau,
                   allow_unsafe_interrupts=boot.allow_unsafe_interrupts or _flag(
                       words, "vfio_iommu_type1.allow_unsafe_interrupts") in ("1", "Y", "y"),
                   numa_balancing=int(numa) if numa in ("0", "1", "2", "3") else 1,
                   persistence_mode=boot.persistenced, boot_count=boot_count, boot_time=int(time.time()))
    return _drop_missing_mdevs(spec)


def _boot_dev(dev: PciDev, hb: HostBridge, bus: int, drivers: _Drivers, boot: BootConfig) -> PciDev:
    addr = parse_pci_address(f"{hb.domain:04x}:{bus:02x}:{dev.slot:02x}.{dev.function}")
    driver, override = drivers.pick(addr, dev.vendor, dev.device, dev.driver, dev.driver_override,
                                    dev.default_driver or dev.driver)
    gpu, sriov = dev.gpu, dev.sriov
    if gpu is not None:
        gpu = _boot_gpu(gpu, boot.mig_pending.get(addr), driver == "nvidia")
    if sriov is not None:
        sriov = _boot_vfs(sriov, addr, drivers, dev.vendor, driver, bool(gpu and gpu.mig_instances))
    children = tuple(_boot_dev(c, hb, dev.secondary_bus, drivers, boot) for c in dev.children) \
        if dev.secondary_bus is not None else ()
    return replace(dev, driver=driver, driver_override=override, gpu=gpu, sriov=sriov, children=children)


def _boot_gpu(gpu: GpuSpec, pending: bool | None, on_nvidia: bool) -> GpuSpec:
    mode = gpu.mig_enabled if pending is None else pending
    keep = mode == gpu.mig_enabled  # the preset's layout comes back only in the preset's mode
    return replace(gpu, mig_enabled=mode, mig_pending=None, mig_instances=gpu.mig_instances if keep else (),
                   mdevs=gpu.mdevs if on_nvidia else ())


def _boot_vfs(sriov: SriovSpec, pf: str, drivers: _Drivers, vendor: int, pf_driver: str | None,
              mig_ok: bool) -> SriovSpec:
    vfs = []
    for i, vf in enumerate(sriov.vfs):
        if vf.vgpu_types and pf_driver != "nvidia":
            return replace(sriov, vfs=())  # SR-IOV vGPU VFs exist only under the nvidia driver
        addr = vf_address(pf, sriov, i)
        driver, override = drivers.pick(addr, vendor, sriov.vf_device, vf.driver, vf.driver_override,
                                        vf.default_driver or vf.driver)
        if vf.vgpu_gi_id is not None and not mig_ok:
            vf = replace(vf, vgpu_type=0, vgpu_gi_id=None)  # its GPU instance did not come back
        vfs.append(replace(vf, driver=driver, driver_override=override))
    return replace(sriov, vfs=tuple(vfs))


def _drop_missing_mdevs(spec: HostSpec) -> HostSpec:
    """VM hostdevs naming mdevs that did not come back are left out of the spec (the VM definitions
    themselves are kept byte for byte by the reboot)."""
    present = {m.uuid for _a, d, _p, _h in walk(spec) if d.gpu for m in d.gpu.mdevs}
    vms = tuple(replace(vm, hostdevs=tuple(h for h in vm.hostdevs if h.mdev_uuid is None or h.mdev_uuid in present))
                for vm in spec.vms)
    return replace(spec, vms=vms)


# -- what a boot did ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class BootReport:
    """What `demo reboot` brought up (printed by the CLI)."""
    boot_count: int
    boot_id: str
    cmdline: str
    iommu: bool
    iommu_groups: int
    modules: tuple[str, ...]  # loaded at boot beyond kvm and the device drivers (vfio…, listed ones)
    nouveau: bool
    hugepages: tuple[tuple[int, int, int], ...]  # (node, page KiB, pages), pages > 0
    numa_balancing: int
    persistence: bool
    driverctl: tuple[tuple[str, str | None], ...]  # (device, the driver it booted on) for saved overrides
    mig: tuple[str, ...]  # GPUs in MIG mode


def boot_report(spec: HostSpec, boot: BootConfig, root: Root) -> BootReport:
    from nodeconsole.console.demo.gen_cpu import hugepages

    modules = (VFIO_STACK if spec.vfio_loaded else ()) + ("vhost_net",) * spec.vhost_net + spec.modules_extra
    pages = tuple((n, size, nr) for n in range(spec.cpu.nodes) for size, nr in sorted(hugepages(spec, n).items())
                  if nr)
    mig = tuple(a for a, d, _p, _hb in walk(spec) if d.gpu and d.gpu.mig_enabled)
    return BootReport(spec.boot_count, root.read(facts.BOOT_ID) or "", spec.cmdline, spec.iommu,
                      len([g for g in root.listdir(facts.IOMMU_GROUPS) if g.isdigit()]),
                      tuple(dict.fromkeys(modules)), spec.nouveau_loaded, pages, spec.numa_balancing,
                      spec.persistence_mode,
                      tuple((a, root.link_name(f"sys/bus/pci/devices/{a}/driver")) for a in sorted(boot.driverctl)),
                      mig)
