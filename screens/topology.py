"""2 Topology: the PCIe tree per NUMA node and the GPU/NIC matrix (nvidia-smi topo -m style)."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.hosttext import LINE_MAX, show
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.nics import distance_rank, distance_to, vm_gpu_addresses
from nodeconsole.console.topology import matrix, tree
from nodeconsole.screens.base import SnapshotScreen
from nodeconsole.screens.widgets.hinted_scroll import HintedScroll


def tree_text(snap: HostSnapshot) -> Text:
    out = Text()
    for node, tops in sorted(tree(snap).items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        out.append(f"NUMA node {node if node is not None else '?'}\n", style="bold")

        def walk(n, prefix: str, last: bool) -> None:
            out.append(prefix + ("└─ " if last else "├─ "))
            style = "bold" if "GPU" in n.label or "NVIDIA" in n.label else ""
            out.append(show(n.label, LINE_MAX), style=style)  # device and driver names: host text
            if n.owners:  # the VMs holding it (host text too)
                out.append(f"  → {show(','.join(n.owners), LINE_MAX)}", style="cyan")
            out.append("\n")
            for i, c in enumerate(n.children):
                walk(c, prefix + ("   " if last else "│  "), i == len(n.children) - 1)

        for i, t in enumerate(tops):
            walk(t, "", i == len(tops) - 1)
    return out


def nics_text(snap: HostSnapshot) -> Text:
    """One line per NIC (link layer, RDMA port, VFs, the closest GPUs) and one per VF with the VM holding it
    and its distance to that VM's GPUs; host strings (names, drivers, VMs) as plain text."""
    out = Text()
    if not snap.nics:
        out.append("no network controllers\n", style="dim")
        return out
    gpu_label = {g.address: f"GPU{g.index}" for g in snap.gpus}
    vm_gpus = {v.name: vm_gpu_addresses(snap, v) for v in snap.vms}
    for n in snap.nics:
        port = n.ports[0] if n.ports else None
        rate = f"{port.rate_gbps:g} Gb/s" if port and port.rate_gbps else show(port.rate if port else "")
        state = f"{show(port.device)} {show(port.state)} {rate}" if port else "no RDMA device"
        near = n.closest
        closest = f"{', '.join(gpu_label.get(g.address, '?') for g in near)} ({near[0].distance})" if near else "-"
        vfs = f"VFs {n.sriov_numvfs or 0} of {n.sriov_totalvfs}" if n.sriov_totalvfs else "no SR-IOV"
        out.append(f"{n.label:5}", style="bold")
        out.append(f" {n.address}  {show(n.link_layer or '?')}  {state}  NUMA "
                   f"{'-' if n.numa_node is None else n.numa_node}\n")
        out.append(f"      {vfs}, closest {closest}\n")
        for v in n.vfs:
            out.append(f"      VF {v.address} {show(v.driver or 'no driver'):10}")
            if v.vm is None:
                out.append(" free\n", style="dim")
                continue
            out.append(f" → {show(v.vm, LINE_MAX)}")
            levels = sorted({distance_to(n, g) for g in vm_gpus.get(v.vm, [])}, key=distance_rank)
            if levels:
                out.append(f"  {levels[0]} from its GPU", style="red" if levels[0] == "SYS" else "")
            out.append("\n")
    return out


def _short(label: str) -> Text:
    return Text(show(label.replace("GPU", "G").replace("NIC", "N")))


def matrix_table(snap: HostSnapshot) -> Group:
    """The matrix with short column heads (fits 80 columns for 8 GPUs + 4 NICs), then one line per
    device with its address, NUMA node and CPU affinity."""
    devs, rows = matrix(snap)
    t = Table(box=None, pad_edge=False, padding=(0, 1), collapse_padding=True)
    t.add_column("")
    for d in devs:
        t.add_column(_short(d.label), justify="left", min_width=5, no_wrap=True)
    for d, row in zip(devs, rows):
        # each cell ends in a space of its own: Rich drops column padding when it squeezes the table
        t.add_row(_short(d.label), *[Text(c.ljust(4) + " ", style="dim" if c == "X" else (
            "red" if c == "SYS" else ("green" if c.startswith("NV") else ""))) for c in row])
    legend = Text()
    for d in devs:
        node = "-" if d.numa_node is None else str(d.numa_node)
        cpus = format_cpulist(d.cpus) or "-"
        smi = ""
        if d.label.startswith("GPU"):
            smi = f"smi {'–' if d.nvml_index is None else d.nvml_index}  "
        legend.append(f"{_short(d.label).plain:>3} {show(d.label):5} {d.address}  {smi}NUMA {node}  CPUs {cpus}")
        if d.owners:
            legend.append(f"  → {show(','.join(d.owners), LINE_MAX)}", style="cyan")
        legend.append("\n")
    if any(d.label.startswith("GPU") and not d.nvlink_known for d in devs):
        legend.append("GPUs NVML cannot see (smi –: vfio-pci, no driver): PCIe level only, NVLink not known here\n",
                      style="dim")
    return Group(t, legend)


class TopologyScreen(SnapshotScreen):
    TITLE = "Topology"

    def compose_body(self) -> ComposeResult:
        with HintedScroll(id="topo-scroll"):
            yield Static("GPU/NIC matrix", classes="section")
            yield Static("X self  NV# NVLink (# links)  PIX one switch  PXB several switches  PHB host bridge  "
                         "NODE same NUMA node  SYS across sockets  → the VMs holding it", classes="legend")
            yield Static(id="matrix")
            yield Static("NICs", classes="section")
            yield Static(id="nics")
            yield Static("PCIe tree", classes="section")
            yield Static(id="tree")
        yield Static(id="topo-scroll-more", classes="more")  # lines out of sight, when some are
        self._sig: tuple[object, ...] | None = None  # what the views were last made from

    def render_snapshot(self, snap: HostSnapshot) -> None:
        # The topology is static: re-render only when devices or drivers change.
        sig = (tuple((d.address, d.driver) for d in snap.pci_devices),
               tuple((g.address, g.owner, g.nvml_index, tuple(lk.active for lk in g.nvlinks), g.nvlink_state)
                     for g in snap.gpus),
               tuple((n.address, n.vm) for n in snap.nics),
               tuple((v.address, v.vm) for n in snap.nics for v in n.vfs),
               tuple((p.device, p.state, p.rate) for n in snap.nics for p in n.ports))
        if sig == self._sig:
            return
        self._sig = sig
        self.query_one("#matrix", Static).update(matrix_table(snap))
        self.query_one("#nics", Static).update(nics_text(snap))
        self.query_one("#tree", Static).update(tree_text(snap))
