"""2 Topology: the PCIe tree per NUMA node and the GPU/NIC matrix (nvidia-smi topo -m style)."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.cpulist import format_cpulist
from console.model import HostSnapshot
from console.topology import matrix, tree
from screens.base import SnapshotScreen


def tree_text(snap: HostSnapshot) -> Text:
    out = Text()
    for node, tops in sorted(tree(snap).items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        out.append(f"NUMA node {node if node is not None else '?'}\n", style="bold")

        def walk(n, prefix: str, last: bool) -> None:
            out.append(prefix + ("└─ " if last else "├─ "))
            style = "bold" if "GPU" in n.label or "NVIDIA" in n.label else ""
            out.append(n.label + "\n", style=style)
            for i, c in enumerate(n.children):
                walk(c, prefix + ("   " if last else "│  "), i == len(n.children) - 1)

        for i, t in enumerate(tops):
            walk(t, "", i == len(tops) - 1)
    return out


def matrix_table(snap: HostSnapshot) -> Table:
    devs, rows = matrix(snap)
    t = Table(box=None, pad_edge=False, padding=(0, 1))
    t.add_column("")
    for d in devs:
        t.add_column(d.label, justify="center")
    t.add_column("CPU affinity")
    t.add_column("NUMA")
    for d, row in zip(devs, rows):
        t.add_row(d.label, *[Text(c, style="dim" if c in ("X",) else ("red" if c == "SYS" else "")) for c in row],
                  format_cpulist(d.cpus), "-" if d.numa_node is None else str(d.numa_node))
    return t


class TopologyScreen(SnapshotScreen):
    TITLE = "Topology"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="topo-scroll"):
            yield Static("Matrix  (X self, PIX one switch, PXB several switches, PHB host bridge, "
                         "NODE same NUMA node, SYS across sockets)", classes="section")
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
