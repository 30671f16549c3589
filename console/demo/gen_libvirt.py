"""The libvirt test-driver node file of a synthetic host: `test:///ABS/libvirt.xml` opens it in-process.

The node file is `<node>` with the host CPU and memory, then one `<domain>` per VM; the run state comes
from the test driver's own namespace (`<test:runstate>`, virDomainState values)."""
from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.demo.gen_cpu import CpuLayout
from nodeconsole.console.demo.gen_pci import PciLayout
from nodeconsole.console.demo.spec import HostSpec, VmSpec, stable_uuid
from nodeconsole.console.pciaddr import parse_pci_address

TEST_NS = "http://libvirt.org/schemas/domain/test/1.0"
RUNSTATE = {"running": 1, "blocked": 2, "paused": 3, "shutdown": 4, "shut off": 5, "crashed": 6,
            "pmsuspended": 7}


def vm_uuid(spec: HostSpec, vm: VmSpec) -> str:
    return vm.uuid or stable_uuid(spec.seed or spec.hostname, "vm", vm.name)


def validate_vms(spec: HostSpec, lay: CpuLayout, pci: PciLayout) -> None:
    """Reject VMs libvirt would reject or that point at devices the host does not have."""
    names: set[str] = set()
    ncpu = lay.nr_possible
    for vm in spec.vms:
        where = f"VM {vm.name!r}"
        if vm.name in names:
            raise ValueError(f"{where} is defined twice")
        names.add(vm.name)
        if vm.state not in RUNSTATE:
            raise ValueError(f"{where}: unknown state {vm.state!r}")
        if vm.pins and len(vm.pins) != vm.vcpus:
            raise ValueError(f"{where}: {len(vm.pins)} vCPU pins for {vm.vcpus} vCPUs")
        for cpus in list(vm.pins) + [vm.emulator_pins]:
            if any(not 0 <= c < ncpu for c in cpus):
                raise ValueError(f"{where}: pinned to a CPU the host does not have ({cpus})")
        if vm.numatune and any(n not in lay.node_cpus for n in vm.numatune[1]):
            raise ValueError(f"{where}: numatune names a node the host does not have")
        for hd in vm.hostdevs:
            if hd.address is not None and parse_pci_address(hd.address) not in pci.funcs:
                raise ValueError(f"{where}: hostdev {hd.address} is not a PCI function of the host")
            if hd.mdev_uuid is not None and hd.mdev_uuid not in pci.mdevs:
                raise ValueError(f"{where}: mdev {hd.mdev_uuid} does not exist on the host")


def node_cpu_counts(spec: HostSpec) -> tuple[int, int, int, int]:
    """(nodes, sockets per node, cores per socket, threads) as virNodeInfo counts them: libvirt falls
    back to one node when nodes do not divide sockets evenly (sub-NUMA clustering)."""
    c = spec.cpu
    nodes = c.nodes
    if nodes and c.sockets % nodes == 0:
        return nodes, c.sockets // nodes, c.cores_per_socket, c.threads_per_core
    return 1, c.sockets, c.cores_per_socket, c.threads_per_core


def libvirt_xml(spec: HostSpec, lay: CpuLayout) -> str:
    nodes, sockets, cores, threads = node_cpu_counts(spec)
    memory_kib = spec.memory_per_node_mib * 1024 * spec.cpu.nodes
    out = ["<node>\n  <cpu>\n",
           f"    <mhz>{int(spec.cpu.mhz)}</mhz>\n    <model>x86_64</model>\n",
           f"    <active>{len(lay.online)}</active>\n    <nodes>{nodes}</nodes>\n",
           f"    <sockets>{sockets}</sockets>\n    <cores>{cores}</cores>\n",
           f"    <threads>{threads}</threads>\n  </cpu>\n  <memory>{memory_kib}</memory>\n"]
    out += [_domain(spec, vm) for vm in spec.vms]
    out.append("</node>\n")
    return "".join(out)


FIRST_GUEST_BUS = 0x07  # buses 1-6 hold a q35 guest's usual devices (network, USB, serial, disk, balloon, RNG)


def guest_address(bus: int) -> str:
    """The <address> element of a device at guest PCI address 0000:BUS:00.0."""
    return f"<address type='pci' domain='0x0000' bus='0x{bus:02x}' slot='0x00' function='0x0'/>"


def _domain(spec: HostSpec, vm: VmSpec) -> str:
    kib = vm.memory_mib * 1024
    x = [f"  <domain type='test' xmlns:test='{TEST_NS}'>\n",
         f"    <name>{escape(vm.name)}</name>\n    <uuid>{vm_uuid(spec, vm)}</uuid>\n",
         f"    <memory unit='KiB'>{kib}</memory>\n    <currentMemory unit='KiB'>{kib}</currentMemory>\n"]
    if vm.hugepages_kib:
        x.append(f"    <memoryBacking>\n      <hugepages>\n        <page size='{vm.hugepages_kib}' "
                 f"unit='KiB'/>\n      </hugepages>\n    </memoryBacking>\n")
    x.append(f"    <vcpu placement='static'>{vm.vcpus}</vcpu>\n")
    if vm.pins or vm.emulator_pins:
        x.append("    <cputune>\n")
        x += [f"      <vcpupin vcpu='{i}' cpuset='{format_cpulist(cpus)}'/>\n" for i, cpus in enumerate(vm.pins)]
        if vm.emulator_pins:
            x.append(f"      <emulatorpin cpuset='{format_cpulist(vm.emulator_pins)}'/>\n")
        x.append("    </cputune>\n")
    if vm.numatune:
        mode, nodeset = vm.numatune
        x.append(f"    <numatune>\n      <memory mode={quoteattr(mode)} "
                 f"nodeset='{format_cpulist(nodeset)}'/>\n    </numatune>\n")
    threads = vm.threads_per_core if vm.vcpus % vm.threads_per_core == 0 else 1
    x.append("    <os>\n      <type arch='x86_64' machine='pc-q35-8.2'>hvm</type>\n    </os>\n")
    x.append(f"    <cpu mode='host-passthrough'>\n      <topology sockets='1' dies='1' "
             f"cores='{vm.vcpus // threads}' threads='{threads}'/>\n    </cpu>\n")
    x.append("    <devices>\n")
    for i, hd in enumerate(vm.hostdevs):
        # the guest side, as libvirt assigns it on q35: each device on its own pcie-root-port's bus
        guest = f"        {guest_address(FIRST_GUEST_BUS + i)}\n"
        if hd.mdev_uuid:
            x.append("      <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>\n"
                     f"        <source>\n          <address uuid='{hd.mdev_uuid}'/>\n        </source>\n"
                     f"{guest}      </hostdev>\n")
        else:
            dom, bus, rest = parse_pci_address(hd.address or "").split(":")
            slot, fn = rest.split(".")
            x.append(f"      <hostdev mode='subsystem' type='pci' managed='{'yes' if hd.managed else 'no'}'>\n"
                     f"        <source>\n          <address domain='0x{dom}' bus='0x{bus}' slot='0x{slot}' "
                     f"function='0x{fn}'/>\n        </source>\n{guest}      </hostdev>\n")
    x.append("    </devices>\n")
    x.append(f"    <test:runstate>{RUNSTATE[vm.state]}</test:runstate>\n  </domain>\n")
    return "".join(x)
