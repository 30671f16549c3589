"""The all_reduce_perf output reader under long paddings (1 MiB): the result is asserted, never the
time (the speed is in benchmarks/bench_kernel_log.py --nccl); numbers too long to be numbers are no
rows, devices or header values, and never a traceback."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.actions.nccl.parse import parse_text, size_arg

OUTPUT = [
    "# nccl-tests version 2.13.9 nccl-headers=22102 nccl-library=22005",
    "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0",
    "#  Rank  0 Group  0 Pid 1341852 on worker-0 device  0 [0x07] NVIDIA A100-SXM4-40GB",
    "#  Rank  1 Group  0 Pid 1341852 on worker-0 device  1 [0000:0f:00] NVIDIA A100-SXM4-40GB",
    "host-a:880:887 [0] NCCL INFO NCCL version 2.20.5+cuda12.4",
    "host-a:880:887 [0] NCCL INFO Using network IB",
    "host-a:880:887 [0] NCCL INFO Channel 07/0 : 3[3] -> 4[7] [send] via NET/IB/0/GDRDMA",
    "host-a:880:887 [0] NCCL INFO 32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels",
    "host-a:880:887 [0] NCCL WARN Cuda failure 'out of memory'",
    "     1048576        262144     float     sum      -1    78.77   13.31   23.29      0    81.31   12.90   22.57      0",
    "     2097152        524288     float     sum      -1    108.8   19.28   33.73      0    108.2   19.38   33.91      0",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 130.613",
]
PADS = [" ", "\t", "=", "9", "\x00", ", ", "a", ":", "Channel ", "1:", "[0]"]
SHORT, LONG = 600, 1 << 20


def boundaries(line: str) -> list[int]:
    return [i for i in range(len(line) + 1)
            if i in (0, len(line)) or line[i - 1].isalnum() != line[i].isalnum() or not line[i].isalnum()]


def with_padding(n: int, line: int, at: int, pad: str) -> str:
    lines = list(OUTPUT)
    lines[line] = lines[line][:at] + pad * (n // len(pad)) + lines[line][at:]
    return "\n".join(lines) + "\n"


def shape(text: str, pad: str) -> str:
    """Everything read, with every run of the padding written as one marker."""
    rp = repr(pad)[1:-1]
    return re.sub(f"(?:{re.escape(rp)}){{2,}}", "<pad>", repr(parse_text(text)))


@settings(max_examples=120, deadline=None)
@given(st.data(), st.sampled_from(PADS))
def test_a_1_mib_padding_anywhere_reads_as_a_short_one(data, pad):
    line = data.draw(st.integers(0, len(OUTPUT) - 1))
    at = data.draw(st.sampled_from(boundaries(OUTPUT[line])))
    assert shape(with_padding(LONG, line, at, pad), pad) == shape(with_padding(SHORT, line, at, pad), pad)


def test_blanks_between_the_fields_change_nothing():
    plain = parse_text("\n".join(OUTPUT) + "\n")
    assert len(plain.rows) == 2 and plain.networks == ["IB"] and plain.nvls_channels == 16
    places = [(i, len(line)) for i, line in enumerate(OUTPUT)]  # trailing blanks on every line
    for i in (2, 3, 9, 10):  # between the cells of the rows and the device lines (up to the GPU's name)
        line = OUTPUT[i]
        places += [(i, m.start()) for m in re.finditer(r"(?<=\S) +(?=\S)", line[:line.find("NVIDIA")])]
    places += [(6, OUTPUT[6].index("NET/IB")), (6, OUTPUT[6].index(": 3[3]") + 1)]
    for i, at in places:
        assert parse_text(with_padding(LONG, i, at, " ")) == plain, (OUTPUT[i], at)


@pytest.mark.parametrize("bad", [
    "9" * 5000 + "  262144 float sum -1 78.77 13.31 23.29 0 81.31 12.90 22.57 0",  # past int()'s digit limit
    "1048576 262144 float sum -1 78.77 13.31 23.29 inf 81.31 12.90 22.57 0",  # an infinite #wrong
    "1048576 ²62144 float sum -1 78.77 13.31 23.29 0 81.31 12.90 22.57 0",  # a digit int() does not read
], ids=["5000-digit-size", "infinite-wrong", "superscript-digit"])
def test_a_row_with_numbers_that_are_not_counts_is_no_row(bad):
    assert parse_text(bad + "\n").rows == []


def test_header_and_device_numbers_too_long_are_left_out():
    p = parse_text("#  Rank " + "1" * 5000 + " Group 0 Pid 1 on h device 0 [0x07] GPU\n"
                   "# nThread 1 nGpus " + "8" * 5000 + " minBytes 8 maxBytes 16 step: 2(factor)\n"
                   "# Out of bounds values : " + "1" * 5000 + " OK\n"
                   "# nccl-tests version 2.13.9 nccl-library=" + "2" * 5000 + "\n"
                   "h:1:1 [0] NCCL INFO " + "3" * 5000 + " nvls channels\n")
    assert p.devices == [] and p.header is not None and (p.header.nthread, p.header.ngpus) == (1, None)
    assert (p.oob_count, p.tests_version, p.nccl_library_code, p.nvls_channels) == (None, "2.13.9", None, None)


def test_size_argument_with_long_padding():
    assert size_arg(" " * LONG + "8" + " " * LONG + "M" + " " * LONG) == 8 << 20
    assert size_arg("0" * 5000 + "8K") == 8 << 10
    with pytest.raises(ValueError, match="is not a size"):
        size_arg("1" + " " * LONG + "x")
    with pytest.raises(ValueError, match="out of range"):
        size_arg("9" * 5000)


def test_a_bus_id_too_long_to_be_one_is_none():
    text = "\n".join(OUTPUT).replace("[0x07]", "[0x07" + "9" * 5000 + "]") + "\n"
    (dev, _) = parse_text(text).devices
    assert dev.bus is None and dev.pci_address is None and repr(dev)  # no 5,000-digit int to print


@pytest.mark.parametrize("digits", [600, 1 << 20])
def test_a_root_too_long_to_be_a_rank_is_no_row(digits):
    # padding before the root column: a 600-digit root was a row, a 1 MiB one not (int() refuses it)
    text = "\n".join(OUTPUT).replace("sum      -1    78.77", "sum " + "9" * digits + "     -1    78.77") + "\n"
    assert [r.size for r in parse_text(text).rows] == [2097152]
