"""Reading nccl-tests `all_reduce_perf` output, including the `NCCL_DEBUG=INFO` lines mixed into it.

Tolerant by design: unknown lines are ignored, `N/A` cells become None, rows without left padding or
with wider columns (newer nccl-tests) read the same, and output cut off at any point gives what was read
so far. Linear: no pattern has two unbounded repeats that can take the same characters, and numbers are
read from bounded runs of digits, so a line of any length and padding costs time in proportion to it.
`Parser.feed(line)` reads one line at a time so a running test can report progress.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from nodeconsole.console.pciaddr import format_pci_address

# `mpirun --tag-output` puts "[1,0]<stdout>:" before every line of every rank.
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
# "host:pid:tid [dev] NCCL INFO message" (the prefix NCCL puts on its debug lines)
_DEBUG = re.compile(r"^(?P<host>\S+?):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>[A-Z]+)\s?"
                    r"(?P<msg>.*)$")
_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(\S*)")
_TESTS_VERSION = re.compile(r"nccl-tests version (\S+)")
_LIBRARY = re.compile(r"nccl-library=(\d{1,9})\b")
_NETWORK = re.compile(r"\bUsing network (\S.*)")  # stripped
_NVLS = re.compile(r"(?<!\d)(\d{1,9}) nvls channels")
# "Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer/read"; old releases say "Ring 00 : 0[1a000] -> ..."
# and network lines add "[send]" / "[receive]" before "via".
_CHANNEL = re.compile(r"\b(?:Channel|Ring|Tree)\s+(\d{1,9})(?:/\d+)?\s*:\s*(\d{1,9})\[[0-9a-fA-Fx]+\]\s*->\s*"
                      r"(\d{1,9})\[[0-9a-fA-Fx]+\](?:\s*\[(\w+)\])?\s+via\s+(\S.*)")  # detail stripped
_DEVICE = re.compile(r"^#\s*Rank\s+(\d{1,9})\s+(?:Group\s+(\d{1,9})\s+)?Pid\s+(\d{1,10})\s+on\s+(\S+)\s+device\s+"
                     r"(\d{1,9})\s+\[([^\]]*)\]\s*(.*)")  # the name stripped
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d{1,20})\s+(\w+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_COUNT = re.compile(r"[0-9]{1,20}\Z")  # a size or a count (ASCII digits)
_ROOT = re.compile(r"-?[0-9]{1,9}\Z")  # the root rank, -1 for all
# key -> (the literal each match starts with, the pattern)
_HEADER_KEYS = {key: (lit, re.compile(rf"{before}\b{lit}{gap}(\d{{1,20}})\b")) for key, lit, gap, before in (
    ("nthread", "nThread", r"\s+", ""), ("ngpus", "nGpus", r"\s+", ""), ("min_bytes", "minBytes", r"\s+", ""),
    ("max_bytes", "maxBytes", r"\s+", ""), ("warmup_iters", "warmup iters:", r"\s*", ""),
    ("iters", "iters:", r"\s*", "(?<!warmup )"), ("validation", "validation:", r"\s*", ""))}
_STEP = re.compile(r"\bstep:\s*(\d{1,20})\((factor|bytes)\)")
_MAX_ERRORS = 50


@dataclass(frozen=True)
class Cell:
    """One half of a row (out-of-place or in-place). None where the test printed N/A."""
    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None


@dataclass(frozen=True)
class Row:
    size: int  # bytes
    count: int  # elements
    type: str
    redop: str
    root: int
    out_of_place: Cell
    in_place: Cell | None  # None when the line was cut off after the out-of-place half

    @property
    def busbw(self) -> float | None:
        """The better of the two halves' bus bandwidth (GB/s)."""
        vals = [c.busbw for c in (self.out_of_place, self.in_place) if c is not None and c.busbw is not None]
        return max(vals) if vals else None

    @property
    def wrong(self) -> int:
        return sum(c.wrong or 0 for c in (self.out_of_place, self.in_place) if c is not None)


@dataclass(frozen=True)
class Device:
    """A `# Rank N ... device D [bus] NAME` header line."""
    rank: int
    host: str
    device: int  # CUDA device index within that process
    bus_id: str  # as printed: "0x07" (old) or "0000:b4:00" (newer)
    bus: int | None  # the PCI bus number
    pci_address: str | None  # canonical DDDD:BB:DD.0 when the domain was printed, else None
    name: str
    pid: int | None = None
    group: int | None = None


@dataclass(frozen=True)
class Transport:
    """A `Channel C : A[..] -> B[..] via DETAIL` line: how rank A sends to rank B on channel C."""
    channel: int
    src: int
    dst: int
    kind: str  # "P2P", "SHM", "NET/IB", "NET/Socket", ... (see transport_kind)
    detail: str  # e.g. "P2P/direct pointer/read", "NET/IB/0/GDRDMA"
    direction: str = ""  # "send" / "receive" on network lines
    host: str = ""  # host that printed the line (the debug prefix), "" when absent


@dataclass(frozen=True)
class Header:
    """The `# nThread 1 nGpus 8 minBytes ... step: 2(factor) ...` line."""
    nthread: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step_factor: int | None = None
    step_bytes: int | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    validation: int | None = None


@dataclass
class ParsedOutput:
    """Everything read so far. Mutable: the incremental parser fills it line by line."""
    rows: list[Row] = field(default_factory=list)
    avg_busbw: float | None = None
    oob_count: int | None = None
    oob_ok: bool | None = None  # False for "FAILED"
    header: Header | None = None
    tests_version: str | None = None
    nccl_version: str | None = None  # "2.20.5"
    nccl_version_full: str | None = None  # "2.20.5+cuda12.4"
    nccl_library_code: int | None = None  # from "nccl-library=22902"
    networks: list[str] = field(default_factory=list)  # "IB", "Socket", ... in order of first use
    transports: list[Transport] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    nvls_channels: int | None = None
    init_complete: int = 0  # "Init COMPLETE" lines (one per rank)
    ib_device_found: bool | None = None  # "NET/IB : Using [...]" vs "NET/IB : No device found."
    errors: list[str] = field(default_factory=list)  # NCCL WARN and test failure lines
    collective: str | None = None  # from "# Collective test starting: NAME"

    @property
    def complete(self) -> bool:
        """The footer was seen (the test ran to its end)."""
        return self.avg_busbw is not None

    @property
    def peak_busbw(self) -> float | None:
        vals = [b for r in self.rows if (b := r.busbw) is not None]
        return max(vals) if vals else None

    @property
    def wrong_total(self) -> int:
        return sum(r.wrong for r in self.rows)

    @property
    def corrupted(self) -> bool:
        """Wrong results were reported by the test's own validation."""
        return self.wrong_total > 0 or self.oob_ok is False or bool(self.oob_count)

    @property
    def version(self) -> str | None:
        """NCCL version from the debug banner, else from nccl-tests' `nccl-library=` code."""
        if self.nccl_version:
            return self.nccl_version
        return decode_version_code(self.nccl_library_code) if self.nccl_library_code else None

    @property
    def transport_kinds(self) -> Counter[str]:
        return Counter(t.kind for t in self.transports)

    def rank_hosts(self) -> dict[int, str]:
        return {d.rank: d.host for d in self.devices}


def _search(rx: re.Pattern[str], s: str, *literals: str) -> re.Match[str] | None:
    """rx.search(s) for a pattern whose matches start with one of `literals`: tried only where one occurs
    (str.find scans fast; re's own search steps through every character of a long line)."""
    found: re.Match[str] | None = None
    for lit in literals:
        j = s.find(lit)
        while j >= 0 and (found is None or j < found.start()):
            if m := rx.match(s, j):
                found = m
                break
            j = s.find(lit, j + 1)
    return found


def _nvls(s: str) -> re.Match[str] | None:
    """_NVLS.search(s), tried only before each " nvls channels" (its count has at most 9 digits)."""
    j = s.find(" nvls channels")
    while j >= 0:
        for k in range(max(0, j - 9), j):
            if m := _NVLS.match(s, k):
                return m
        j = s.find(" nvls channels", j + 1)
    return None


def decode_version_code(code: int) -> str:
    """NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def transport_kind(detail: str) -> str:
    """"P2P/CUMEM/read" → "P2P"; "NET/IB/0/GDRDMA" → "NET/IB"; "NET/Socket/0" → "NET/Socket"."""
    parts = detail.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "NET/" + parts[1].split("(")[0]
    return parts[0].split(" ")[0]


def _num(tok: str) -> float | None:
    if tok.upper() == "N/A":
        return None
    return float(tok)


def _cell(toks: list[str]) -> Cell:
    wrong = _num(toks[3])
    return Cell(_num(toks[0]), _num(toks[1]), _num(toks[2]), None if wrong is None else int(wrong))


def parse_row(line: str) -> Row | None:
    """A data row, or None when the line is anything else (or a row cut off before its first half ends)."""
    toks = line.split()
    if len(toks) < 9 or not (_COUNT.match(toks[0]) and _COUNT.match(toks[1])):
        return None
    if not (_WORD.match(toks[2]) and _WORD.match(toks[3]) and _ROOT.match(toks[4])):
        return None
    try:
        root = int(toks[4])
        out = _cell(toks[5:9])
        inp = _cell(toks[9:13]) if len(toks) >= 13 else None
    except (ValueError, OverflowError):  # a cell that is neither a number nor N/A (nor finite): not a row
        return None
    return Row(int(toks[0]), int(toks[1]), toks[2], toks[3], root, out, inp)


def _parse_bus(text: str) -> tuple[int | None, str | None]:
    """"0x07" → (7, None); "0000:b4:00" or "0000:b4:00.0" → (0xb4, "0000:b4:00.0"); (None, None) for
    anything else, a bus id too long to be one included (a PCI address is at most 8+1+2+1+2+1+1 chars)."""
    t = text.strip()
    if len(t) > 20:
        return None, None
    try:
        if t.lower().startswith("0x"):
            return int(t, 16), None
        parts = t.split(".")[0].split(":")
        if len(parts) == 3:
            dom, bus, dev = (int(p, 16) for p in parts)
            fn = int(t.split(".")[1]) if "." in t else 0
            return bus, format_pci_address(dom, bus, dev, fn)
        if len(parts) == 2:
            bus, dev = (int(p, 16) for p in parts)
            return bus, None
    except ValueError:
        pass
    return None, None


class Parser:
    """Incremental reader: `feed()` each line as it arrives; `out` holds everything read so far."""

    def __init__(self) -> None:
        self.out = ParsedOutput()

    def feed(self, line: str) -> Row | None:
        """Read one line; returns the row when the line was a data row (for progress), else None."""
        s = _MPI_TAG.sub("", line.rstrip("\r\n")).strip()
        if not s:
            return None
        if s.startswith("#"):
            self._comment(s)
            return None
        row = parse_row(s)
        if row is not None:
            self.out.rows.append(row)
            return row
        self._other(s)
        return None

    def feed_all(self, lines: Iterable[str]) -> ParsedOutput:
        for line in lines:
            self.feed(line)
        return self.out

    def _comment(self, s: str) -> None:
        out = self.out
        if m := _AVG.match(s):
            try:
                out.avg_busbw = float(m.group(1))
            except ValueError:  # "N/A" or garbage: the footer was still seen
                out.avg_busbw = float("nan")
        elif m := _OOB.match(s):
            out.oob_count, out.oob_ok = int(m.group(1)), m.group(2).upper() == "OK"
        elif m := _DEVICE.match(s):
            bus, addr = _parse_bus(m.group(6))
            out.devices.append(Device(
                rank=int(m.group(1)), host=m.group(4), device=int(m.group(5)), bus_id=m.group(6).strip(),
                bus=bus, pci_address=addr, name=m.group(7).rstrip(), pid=int(m.group(3)),
                group=int(m.group(2)) if m.group(2) else None))
        elif "nThread" in s and "minBytes" in s:
            vals = {k: int(m.group(1)) for k, (lit, rx) in _HEADER_KEYS.items() if (m := _search(rx, s, lit))}
            if m := _search(_STEP, s, "step:"):
                vals["step_factor" if m.group(2) == "factor" else "step_bytes"] = int(m.group(1))
            out.header = Header(**vals)
        elif m := _search(_TESTS_VERSION, s, "nccl-tests version "):
            out.tests_version = m.group(1)
            if lib := _search(_LIBRARY, s[m.end():], "nccl-library="):
                out.nccl_library_code = int(lib.group(1))
        elif s.startswith("# Collective test starting:"):
            out.collective = s.split(":", 1)[1].strip() or None

    def _other(self, s: str) -> None:
        out = self.out
        host, msg, level = "", s, ""
        if m := _DEBUG.match(s):
            host, msg, level = m.group("host"), m.group("msg"), m.group("level")
        if m := _search(_CHANNEL, msg, "Channel", "Ring", "Tree"):
            detail = m.group(5).rstrip()
            out.transports.append(Transport(int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                            transport_kind(detail), detail, m.group(4) or "", host))
        elif m := _search(_NETWORK, msg, "Using network "):
            if (network := m.group(1).rstrip()) not in out.networks:
                out.networks.append(network)
        elif m := _search(_VERSION, msg, "NCCL version "):
            out.nccl_version, out.nccl_version_full = m.group(1), m.group(1) + m.group(2)
        elif "Init COMPLETE" in msg:
            out.init_complete += 1
        elif m := _nvls(msg):
            out.nvls_channels = max(out.nvls_channels or 0, int(m.group(1)))
        elif msg.startswith("NET/IB :"):
            if "No device found" in msg:
                out.ib_device_found = bool(out.ib_device_found)
            elif "Using" in msg:
                out.ib_device_found = True
        if (level == "WARN" or "Test failure" in s or "Test NCCL failure" in s) \
                and len(out.errors) < _MAX_ERRORS:
            out.errors.append(s)


def parse_text(text: str, *, last_line_complete: bool = True) -> ParsedOutput:
    """Parse a whole (possibly truncated) output. With `last_line_complete=False` an unterminated last
    line is left out: output cut off mid-line would otherwise give a row with truncated numbers."""
    lines = text.splitlines(keepends=True)
    if lines and not last_line_complete and not lines[-1].endswith(("\n", "\r")):
        lines.pop()
    return Parser().feed_all(lines)


MAX_SIZE = 1 << 40  # 1 TiB: more than any GPU holds; nccl-tests sizes are size_t


def size_arg(text: str | int) -> int:
    """nccl-tests' size syntax: a number with an optional K/M/G suffix (powers of 1024)."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative: {text}")
        return text
    m = re.fullmatch(r"([0-9]+)\s*([KkMmGg]?)", text.strip())  # ASCII digits only
    if not m:
        raise ValueError(f"{text!r} is not a size (a number with an optional K, M or G suffix)")
    digits = m.group(1).lstrip("0") or "0"
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    size = int(digits) * scale if len(digits) <= 20 else MAX_SIZE + 1  # int() of a long run is slow, then refused
    if size > MAX_SIZE:
        raise ValueError(f"{text.strip()} is out of range (at most {MAX_SIZE >> 30}G)")
    return size


def expected_rows(min_bytes: int, max_bytes: int, factor: int = 2, step_bytes: int = 0) -> int:
    """How many rows a sweep prints: nccl-tests loops size = min; size <= max; size *= factor (or
    += step_bytes when no factor is given)."""
    if min_bytes > max_bytes:
        return 0
    if factor and factor > 1:
        n, size = 0, max(min_bytes, 1)
        while size <= max_bytes:
            n, size = n + 1, size * factor
        return n
    if step_bytes > 0:
        return (max_bytes - min_bytes) // step_bytes + 1
    return 1
