"""Hugepages at boot, as kernel command-line words: whether the words a boot loader gives already reserve
enough pages per node (`boot_covers`, the doctor's hugepages fix), and the words that reserve given counts
(`hugepage_words`: prepare and the vm-memory fix). Pure: words in, words out."""
from __future__ import annotations

PER_NODE_FORM_SINCE = (5, 16)  # `hugepages=0:A,1:B` (pages per node on the command line): Linux 5.16


def _kernel_at_least(release: str, want: tuple[int, int]) -> bool:
    parts = release.split(".", 2)
    try:
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= want
    except (IndexError, ValueError):
        return False


def unit_of(size_kib: int) -> str:
    return "1G" if size_kib == 1048576 else f"{size_kib // 1024}M"


def boot_covers(words: list[str], unit: str, per_node: dict[int, int]) -> bool:
    """Whether command-line words already reserve at least `per_node` pages of size `unit` on every node
    at boot (`hugepages=N` is spread evenly, the first nodes taking the remainder; `hugepages=0:A,1:B`
    is per node)."""
    sizes = [w.split("=", 1)[1] for w in words if w.startswith("hugepagesz=")]
    counts = [w.split("=", 1)[1] for w in words if w.startswith("hugepages=")]
    if not sizes or sizes[-1].upper() != unit.upper() or not counts:
        return False
    value = counts[-1]
    try:
        if ":" in value:
            given = {int(n): int(c) for n, c in (pair.split(":", 1) for pair in value.split(","))}
            return all(given.get(n, 0) >= c for n, c in per_node.items())
        return int(value) // max(1, len(per_node)) >= max(per_node.values())
    except ValueError:
        return False


def hugepage_words(have: list[str], size_kib: int, per_node: dict[int, int], kernel: str) -> tuple[list[str], str]:
    """(words to add, note): the words reserving at least `per_node` pages of `size_kib` on each node at
    boot — the per-node form where the kernel takes it, else `hugepages=N` spread evenly (every node gets
    the largest node's count). No words when `have` already covers it, or reserves pages of another size
    (then the note says what to add by hand)."""
    unit = unit_of(size_kib)
    if boot_covers(have, unit, per_node):
        given = " ".join(w for w in have if w.startswith(("hugepagesz=", "hugepages=")))
        return [], f"hugepages at boot: the boot loader's configuration already reserves enough ({given})"
    sizes = [w.split("=", 1)[1] for w in have if w.startswith("hugepagesz=")]
    if sizes and sizes[-1].upper() != unit.upper():
        return [], (f"hugepages at boot: the command line reserves {sizes[-1]} pages; to keep these {unit} pages "
                    f"after a reboot add hugepagesz={unit} hugepages=... by hand (until then the reservation made "
                    "now lasts until the next boot)")
    if _kernel_at_least(kernel, PER_NODE_FORM_SINCE):
        count = ",".join(f"{n}:{c}" for n, c in sorted(per_node.items()))
    else:
        count = str(len(per_node) * max(per_node.values()))
    return [f"hugepagesz={unit}", f"hugepages={count}"], ""


def per_node_of(words: list[str], nodes: list[int]) -> dict[int, int]:
    """The pages per node the last `hugepages=` word reserves at boot (spread evenly over `nodes`, the first
    nodes taking the remainder, or the per-node form); {} without one or when it cannot be read."""
    value = next((w.split("=", 1)[1] for w in reversed(words) if w.startswith("hugepages=")), None)
    if value is None or not nodes:
        return {}
    try:
        if ":" in value:
            return {int(n): int(c) for n, c in (pair.split(":", 1) for pair in value.split(","))}
        total = int(value)
    except ValueError:
        return {}
    base, extra = divmod(total, len(nodes))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(sorted(nodes))}
