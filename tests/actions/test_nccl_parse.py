"""Reading all_reduce_perf output: the real recorded outputs, generated outputs in every header and
padding style, truncation, and the incremental parser."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeconsole.actions.nccl.parse import (
    Cell,
    Parser,
    Row,
    decode_version_code,
    expected_rows,
    parse_row,
    parse_text,
    size_arg,
    transport_kind,
)

FILES = ("1.txt", "3.txt", "4.txt", "5.txt")


def _readme_table(shared_dir: Path) -> dict[str, tuple[float, float]]:
    """file → (peak busbw, Avg) from the table in shared/nccl/README.md."""
    out = {}
    for line in (shared_dir / "nccl" / "README.md").read_text().splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) >= 4 and re.fullmatch(r"\d+\.txt", cols[0]):
            out[cols[0]] = (float(cols[2]), float(cols[3]))
    return out


def _text(shared_dir: Path, name: str) -> str:
    return (shared_dir / "nccl" / name).read_text()


def test_readme_table_lists_every_file(shared_dir: Path) -> None:
    assert sorted(_readme_table(shared_dir)) == sorted(FILES)


@pytest.mark.parametrize("name", FILES)
def test_real_output_peak_and_avg_match_readme(shared_dir: Path, name: str) -> None:
    peak, avg = _readme_table(shared_dir)[name]
    p = parse_text(_text(shared_dir, name))
    assert p.avg_busbw == avg
    assert p.peak_busbw == peak
    assert p.complete
    # every row of the sweep the header announces was read
    h = p.header
    assert h is not None and h.step_factor == 2
    assert len(p.rows) == expected_rows(h.min_bytes, h.max_bytes, h.step_factor)
    assert [r.size for r in p.rows] == [h.min_bytes * 2 ** i for i in range(len(p.rows))]
    assert all(r.type == "float" and r.redop == "sum" and r.root == -1 for r in p.rows)
    assert all(r.in_place is not None for r in p.rows)
    # the README's Avg is the mean of every busbw cell (checked to the printed precision)
    cells = [c.busbw for r in p.rows for c in (r.out_of_place, r.in_place)]
    assert sum(cells) / len(cells) == pytest.approx(avg, abs=0.01)


def test_corruption_detected_only_in_5(shared_dir: Path) -> None:
    for name in FILES:
        p = parse_text(_text(shared_dir, name))
        assert p.corrupted == (name == "5.txt")
    p = parse_text(_text(shared_dir, "5.txt"))
    assert (p.oob_count, p.oob_ok) == (4, False)
    bad = [r for r in p.rows if r.wrong]
    assert [(r.size, r.out_of_place.wrong, r.in_place.wrong) for r in bad] == [(1048576, 96, 32)]
    assert p.wrong_total == 128
    assert len(p.errors) == 2 and all("Test failure" in e for e in p.errors)


def test_info_lines_of_4(shared_dir: Path) -> None:
    p = parse_text(_text(shared_dir, "4.txt"))
    assert p.nccl_version == "2.20.5" and p.nccl_version_full == "2.20.5+cuda12.4" and p.version == "2.20.5"
    assert p.networks == ["Socket"]
    assert p.ib_device_found is False
    assert p.init_complete == 2
    assert p.nvls_channels == 0
    # 24 channels each way between the two ranks, all direct P2P reads
    assert len(p.transports) == 48
    assert {t.kind for t in p.transports} == {"P2P"}
    assert {t.detail for t in p.transports} == {"P2P/direct pointer/read"}
    assert {(t.src, t.dst) for t in p.transports} == {(0, 1), (1, 0)}
    assert sorted({t.channel for t in p.transports}) == list(range(24))
    assert {t.host for t in p.transports} == {"3767c65d25c4"}
    assert [(d.rank, d.bus, d.pci_address) for d in p.devices] == [(0, 0xA4, None), (1, 0xA9, None)]


def test_devices_in_both_bus_forms(shared_dir: Path) -> None:
    old = parse_text(_text(shared_dir, "1.txt")).devices
    assert [d.rank for d in old] == list(range(8))
    assert old[0].bus_id == "0x07" and old[0].bus == 7 and old[0].pci_address is None
    assert {d.name for d in old} == {"NVIDIA A100-SXM4-40GB"}
    new = parse_text(_text(shared_dir, "3.txt")).devices
    assert [d.pci_address for d in new] == ["0000:b4:00.0", "0000:b5:00.0"]
    assert new[1].name == "NVIDIA GeForce RTX 2080 Ti"
    five = parse_text(_text(shared_dir, "5.txt"))
    assert [(d.host, d.device, d.pci_address) for d in five.devices] == [
        ("gpu-1-1", 0, "0009:01:00.0"), ("gpu-1-7", 0, "0009:01:00.0")]
    assert five.tests_version == "2.17.8" and five.version == "2.29.2"
    assert five.collective == "all_reduce_perf"


@pytest.mark.parametrize("name", FILES)
def test_truncated_output_gives_a_prefix(shared_dir: Path, name: str) -> None:
    text = _text(shared_dir, name)
    full = parse_text(text)
    avg_end = text.index("# Avg bus bandwidth")
    avg_end = text.index("\n", avg_end)
    for cut in range(0, len(text), 7):
        p = parse_text(text[:cut], last_line_complete=False)
        assert p.rows == full.rows[:len(p.rows)], cut
        assert p.complete == (cut > avg_end)
        loose = parse_text(text[:cut])  # the cut line may count; everything before it is exact
        assert loose.rows[:len(p.rows)] == p.rows
        assert len(loose.rows) - len(p.rows) in (0, 1)


@pytest.mark.parametrize("name", FILES)
def test_incremental_parser_matches_whole_text(shared_dir: Path, name: str) -> None:
    text = _text(shared_dir, name)
    parser = Parser()
    returned = [row for line in text.splitlines() if (row := parser.feed(line)) is not None]
    whole = parse_text(text)
    assert returned == whole.rows == parser.out.rows
    assert parser.out == whole


def test_tolerates_na_unknown_lines_and_mpi_tags() -> None:
    text = "\n".join([
        "garbage line with 1 2 3",
        "[1,0]<stdout>:        1024   256  float  sum  -1  N/A  0.08  0.08  N/A   12.0  0.09  0.09  N/A",
        "        2048   512  float  sum  -1  11.83  0.17  0.17  0",  # the in-place half never came
        "        4096  1024  float  sum  -1  11.83  x.17  0.17  0  11.83  0.17  0.17  0",  # not numbers
        "#  Rank  0 Pid 1 on h device  0 [0x07] Tesla V100-SXM2-16GB",  # very old: no Group
        "# Avg bus bandwidth    : N/A",
    ])
    p = parse_text(text)
    assert [r.size for r in p.rows] == [1024, 2048]
    assert p.rows[0].out_of_place == Cell(None, 0.08, 0.08, None)
    assert p.rows[0].in_place == Cell(12.0, 0.09, 0.09, None)
    assert p.rows[0].wrong == 0
    assert p.rows[1].in_place is None and p.rows[1].busbw == 0.17
    assert p.devices[0].group is None and p.devices[0].name == "Tesla V100-SXM2-16GB"
    assert p.complete and p.avg_busbw != p.avg_busbw  # NaN: footer seen, value unreadable
    assert parse_row("# 1 2 float sum -1 1 1 1 0") is None


@pytest.mark.parametrize("detail,kind", [
    ("P2P/direct pointer/read", "P2P"), ("P2P/CUMEM/read", "P2P"), ("P2P/IPC", "P2P"), ("SHM/direct/direct", "SHM"),
    ("NET/IB/0/GDRDMA", "NET/IB"), ("NET/IB/0(1)/GDRDMA", "NET/IB"), ("NET/Socket/0", "NET/Socket")])
def test_transport_lines(detail: str, kind: str) -> None:
    assert transport_kind(detail) == kind
    line = f"host-a:12:34 [3] NCCL INFO Channel 07/0 : 3[3] -> 4[7] [send] via {detail}"
    t = parse_text(line).transports[0]
    assert (t.channel, t.src, t.dst, t.kind, t.detail, t.direction, t.host) == (7, 3, 4, kind, detail, "send", "host-a")
    old = parse_text(f"h:1:2 [0] NCCL INFO Ring 01 : 0[1a000] -> 1[1b000] via {detail}").transports[0]
    assert (old.channel, old.src, old.dst, old.kind) == (1, 0, 1, kind)


def test_networks_and_ib_devices() -> None:
    p = parse_text("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
                   "h:1:1 [0] NCCL INFO Using network IB\nh:1:2 [1] NCCL INFO Using network IB\n"
                   "h:1:2 [1] NCCL INFO 32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels\n"
                   "h:1:2 [1] NCCL WARN NET/IB : Got completion with error 12")
    assert p.networks == ["IB"] and p.ib_device_found is True and p.nvls_channels == 16
    assert p.errors == ["h:1:2 [1] NCCL WARN NET/IB : Got completion with error 12"]


def test_versions_and_sizes() -> None:
    assert decode_version_code(22902) == "2.29.2" and decode_version_code(21805) == "2.18.5"
    assert decode_version_code(2804) == "2.8.4"
    assert size_arg("1G") == 1 << 30 and size_arg("128M") == 128 << 20 and size_arg("8") == 8
    assert size_arg("4k") == 4096
    for bad in ("", "1T", "-1", "1.5G", "8;ls"):
        with pytest.raises(ValueError):
            size_arg(bad)
    assert expected_rows(8, 1 << 30, 2) == 28
    assert expected_rows(1 << 20, 1 << 30, 2) == 11
    assert expected_rows(100, 50, 2) == 0
    assert expected_rows(0, 10, 0, 5) == 3


# ---- generated outputs: every known layout parses back to the values printed ----

TYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16")
OPS = ("sum", "prod", "max", "min", "avg", "none")
STYLES = {  # nccl-tests' printf layouts: (row start, one half)
    "old": ("{:12d}  {:12d}  {:>8}  {:>6}  {:6d}", "  {:>7}  {:>6}  {:>6}  {:>5}"),
    "new": ("{:12d}  {:12d}  {:>8}  {:>6}  {:6d}", "  {:>8}  {:>7}  {:>7}  {:>6}"),
}

maybe_float = st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False))
cells = st.tuples(maybe_float, st.floats(0, 3000, allow_nan=False), maybe_float,
                  st.one_of(st.none(), st.integers(0, 10 ** 6)))
rows = st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 38), st.sampled_from(TYPES), st.sampled_from(OPS),
                 st.integers(-1, 63), cells, cells)
devices = st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), st.integers(0, 0xFFFF),
                             st.integers(0, 255), st.integers(0, 31),
                             st.from_regex(r"NVIDIA [A-Z][A-Za-z0-9 -]{0,20}[A-Za-z0-9]", fullmatch=True)),
                   min_size=1, max_size=8)


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "N/A"
    return f"{t:.0f}" if t >= 10000 else f"{t:.2f}"


def _render_half(fmt: str, c: tuple) -> tuple[str, Cell]:
    time_s = _fmt_time(c[0])
    alg = f"{c[1]:.2f}"
    bus = "N/A" if c[2] is None else f"{c[2]:.2f}"
    wrong = "N/A" if c[3] is None else str(c[3])
    expect = Cell(None if c[0] is None else float(time_s), float(alg), None if c[2] is None else float(bus),
                  c[3])
    return fmt.format(time_s, alg, bus, wrong), expect


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(rows, max_size=25), devices, st.sampled_from(sorted(STYLES)),
       st.sampled_from(["padded", "flush", "tight"]),
       st.booleans(), st.integers(0, 50), st.floats(0, 1000, allow_nan=False), st.booleans())
def test_generated_outputs_parse_back(gen_rows, devs, style, padding, new_header, oob, avg, with_noise) -> None:
    row_fmt, half_fmt = STYLES[style]
    lines: list[str] = []
    if new_header:
        lines += ["# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
                  "# Collective test starting: all_reduce_perf"]
    lines += ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
              "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for rank, (host, dom, bus, dev, name) in enumerate(devs):
        where = f"{dom:04x}:{bus:02x}:{dev:02x}" if new_header else f"0x{bus:02x}"
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {1000 + rank:6d} on {host:>10} device {rank:2d} [{where}] {name}")
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time"]
    expected = []
    for i, (size, count, typ, op, root, c1, c2) in enumerate(gen_rows):
        h1, e1 = _render_half(half_fmt, c1)
        h2, e2 = _render_half(half_fmt, c2)
        line = row_fmt.format(size, count, typ, op, root) + h1 + h2
        if padding == "flush":
            line = line.lstrip()
        elif padding == "tight":
            line = " ".join(line.split())
        lines.append(line)
        if with_noise and i % 3 == 0:
            lines.append(f"{devs[0][0]}:1:2 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] via SHM/direct/direct")
            lines.append("some unrelated text 1 2 3")
        expected.append(Row(size, count, typ, op, root, e1, e2))
    lines += [f"# Out of bounds values : {oob} {'OK' if oob == 0 else 'FAILED'}",
              f"# Avg bus bandwidth    : {avg:g}", "#"]

    p = parse_text("\n".join(lines) + "\n")
    assert p.rows == expected
    assert p.avg_busbw == float(f"{avg:g}")
    assert (p.oob_count, p.oob_ok) == (oob, oob == 0)
    assert p.corrupted == (oob > 0 or any(r.wrong for r in expected))
    assert len(p.devices) == len(devs)
    for d, (host, dom, bus, dev, name) in zip(p.devices, devs, strict=True):
        assert (d.host, d.bus, d.name) == (host, bus, name)
        assert d.pci_address == (f"{dom:04x}:{bus:02x}:{dev:02x}.0" if new_header else None)
    assert p.header is not None and (p.header.min_bytes, p.header.max_bytes) == (8, 1 << 30)
    assert (p.version == "2.29.2") == new_header
    assert len(p.transports) == (len(range(0, len(gen_rows), 3)) if with_noise else 0)
