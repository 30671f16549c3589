"""2 Topology: the PCIe tree per NUMA node and the GPU/NIC matrix (nvidia-smi topo -m style)."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from nodeconsole.console.cpulist import format_cpulist
from nodeconsole.console.hosttext import LINE_MAX, show
from nodeconsole.console.model import HostSnapshot
from nodeconsole.console.topology import matrix, tree
from nodeconsole.screens.base import SnapshotScreen


def tree_text(snap: HostSnapshot) -> Text:
    out = Text()
    for node, tops in sorted(tree(snap).items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        out.append(f"NUMA node {node if node is not None else '?'}\n", style="bold")

        def walk(n, prefix: str, last: bool) -> None:
            out.append(prefix + ("└─ " if last else "├─ "))
            style = "bold" if "GPU" in n.label or "NVIDIA" in n.label else ""
            out.append(show(n.label, LINE_MAX) + "\n", style=style)  # device and driver names: host text
            for i, c in enumerate(n.children):
                walk(c, prefix + ("   " if last else "│  "), i == len(n.children) - 1)

        for i, t in enumerate(tops):
            walk(t, "", i == len(tops) - 1)
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
        t.add_column(_short(d.label), justify="center", min_width=4, no_wrap=True)
    for d, row in zip(devs, rows):
        t.add_row(_short(d.label), *[Text(c, style="dim" if c == "X" else ("red" if c == "SYS" else ""))
                                    for c in row])
    legend = Text()
    for d in devs:
        node = "-" if d.numa_node is None else str(d.numa_node)
        cpus = format_cpulist(d.cpus) or "-"
        legend.append(f"{_short(d.label).plain:>3} {show(d.label):5} {d.address}  NUMA {node}  CPUs {cpus}\n")
    return Group(t, legend)


class TopologyScreen(SnapshotScreen):
    TITLE = "Topology"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="topo-scroll"):
            yield Static("GPU/NIC matrix", classes="section")
            yield Static("X self  PIX one switch  PXB several switches  PHB host bridge  NODE same "
                         "NUMA node  SYS across sockets", classes="legend")
            yield Static(id="matrix")
            yield Static("PCIe tree", classes="section")
            yield Static(id="tree")
        self._sig = None

    def render_snapshot(self, snap: HostSnapshot) -> None:
        # The topology is static: re-render only when devices or drivers change.
        sig = tuple((d.address, d.driver) for d in snap.pci_devices)
        if sig == getattr(self, "_sig", None):
            return
        self._sig = sig
        self.query_one("#matrix", Static).update(matrix_table(snap))
        self.query_one("#tree", Static).update(tree_text(snap))
