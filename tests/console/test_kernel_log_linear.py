"""The kernel-log parser under long paddings (the result is asserted, never the time: the speed is in
benchmarks/bench_kernel_log.py), and only the kernel's lines read where the log names the program that
logged each line (syslog, the journal)."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.console.capture.kernel_events import keep_lines
from nodeconsole.console.sources import kernel_log
from nodeconsole.console.sources.kernel_log import MAX_LINE, parse
from tests.console.test_kernel_log import XID_LINES, fields

AER_LINES = [
    "[ 3001.1] pcieport 0000:17:01.0: AER: Corrected error message received from 0000:19:00.0",
    "Oct 02 10:42:00 gpu-node-01 kernel: vfio-pci 0000:19:00.0: AER: PCIe Bus Error: severity=Uncorrected "
    "(Fatal), type=Inaccessible, (Unregistered Agent ID)",
    "6,2001,1843400000,-;pcieport 0000:17:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:19:00.0",
    "[ 3003.0] pcieport 0000:00:03.0: AER: Corrected error received: id=0018",
    "<6>1 2024-10-02T10:41:07.123Z gpu-node-01 kernel - - - NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=x, fault",
]
LINES = [line for line, _ in XID_LINES] + AER_LINES
PADS = [" ", "\t", "=", "9", "name=", "\x00", ", ", "pid=", ":", "AER: "]
SHORT, LONG = 600, 12_000  # both past every bounded repeat (255 at most); both under MAX_LINE


def boundaries(line: str) -> list[int]:
    """Every place where a field can end: between characters of different kinds, and both ends."""
    return [i for i in range(len(line) + 1)
            if i in (0, len(line)) or line[i - 1].isalnum() != line[i].isalnum() or not line[i].isalnum()]


def padded(line: str, at: int, pad: str, n: int) -> str:
    return line[:at] + pad * (n // len(pad)) + line[at:] + "\n"


def shape(text: str, pad: str) -> list[tuple]:
    """The events of a log with every run of the padding written as one marker."""
    run = re.compile(f"(?:{re.escape(pad)}){{2,}}")

    def norm(v):
        return run.sub("<pad>", v) if isinstance(v, str) else v

    return [tuple(norm(v) for k, v in fields(e).items() if k != "time") for e in parse(text)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LINES), st.data(), st.sampled_from(PADS))
def test_a_long_padding_anywhere_reads_as_a_short_one(line, data, pad):
    at = data.draw(st.sampled_from(boundaries(line)))
    short = shape(padded(line, at, pad, SHORT), pad)
    assert shape(padded(line, at, pad, LONG), pad) == short
    assert len(short) <= 1


@pytest.mark.parametrize("pad", [" ", "\t", " \t "])
def test_blanks_between_fields_change_nothing(pad):
    line, want = XID_LINES[0]  # [ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU…
    for after in ("79,", "pid=1234,", "name=", "name=python3,"):
        at = line.index(after) + len(after)
        (ev,) = parse(padded(line, at, pad, 16_000))
        assert fields(ev) == want, after


def test_the_reported_xid_with_16000_spaces_after_name():
    line, want = XID_LINES[0]
    lines = [line.replace("name=", "name=" + " " * 16_000)] * 100  # the 1.6 MB
    evs = parse("\n".join(lines) + "\n")
    assert len(evs) == 100 and all(fields(e) == want for e in evs)


def test_padding_inside_the_fixed_words_is_no_event_and_inside_values_is_read_as_written():
    other = XID_LINES[2][0]  # Xid 43 (an Xid 79 line would still say "fallen off the bus", an event of its own)
    assert parse(other.replace("Xid (", "Xid " + " " * 9000 + "(") + "\n") == []
    assert parse(other.replace("NVRM: ", "NVRM:" + "\t" * 9000) + "\n") == []
    line = XID_LINES[0][0]
    (ev,) = parse(line.replace("name=", "name=" + "name=" * 2000) + "\n")
    assert ev.process == "name=" * 2000 + "python3" and ev.pid == 1234
    (ev,) = parse(line.replace("fallen", "fallen" + "\x00" * 9000) + "\n")
    assert (ev.xid, ev.gpu, ev.text) == (79, "0000:3b:00.0", "GPU has fallen" + "\x00" * 9000 + " off the bus.")
    (ev,) = parse(line.replace("pid=1234", "pid=1234" + "9" * 9000) + "\n")
    assert (ev.xid, ev.pid, ev.process) == (79, None, "python3")


@pytest.mark.parametrize("pad", [" ", "=", "9", "\x00", "name="])
def test_a_1_mib_line_is_read_as_its_first_max_line_bytes_and_the_next_line_counts(pad):
    line, want = XID_LINES[0]
    at = line.index("name=") + 5
    long = padded(line, at, pad, 1 << 20)
    assert [fields(e) for e in parse(long + line + "\n")] == \
        [fields(e) for e in parse(long.encode()[:MAX_LINE] + b"\n")] + [want]


def test_a_mark_past_the_cut_is_no_candidate_whatever_the_block_size(monkeypatch):
    log = ("[ 1.0] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
           + " " * (MAX_LINE + 10) + "NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
           + "               NVRM: fallen off the bus and is not responding to commands.\n")
    whole = [fields(e) for e in parse(log)]
    monkeypatch.setattr(kernel_log, "CHUNK", 4096)
    assert [fields(e) for e in parse(log)] == whole


# -- only the kernel's lines where the log names the program --
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
AER = "pcieport 0000:17:01.0: AER: Corrected error received: 0000:19:00.0"
SSHD = "Invalid user NVRM: Xid (PCI:0000:3b:00): 79, from 203.0.113.9 port 52144"
STAMPS = {
    "syslog": "Oct  2 10:41:09 gpu-node-01 {ident}: {msg}",
    "short": "Oct 02 10:41:07 gpu-node-01 {ident}: {msg}",
    "short-precise": "Oct 02 10:41:08.123456 gpu-node-01 {ident}: {msg}",
    "short-iso": "2024-10-02T10:41:07+0000 gpu-node-01 {ident}: {msg}",
    "short-iso-precise": "2024-10-02T10:41:07.123456+0000 gpu-node-01 {ident}: {msg}",
    "rfc3339": "2024-10-02T10:41:07.123456+00:00 gpu-node-01 {ident}: {msg}",
}


@pytest.mark.parametrize("form", STAMPS)
@pytest.mark.parametrize("ident,msg", [("myapp[4242]", XID), ("sshd[811]", SSHD), ("myapp", AER),
                                       ("systemd-journald[312]", XID), ("kernel[0]", XID)])
def test_another_programs_line_is_never_an_event(form, ident, msg):
    assert parse(STAMPS[form].format(ident=ident, msg=msg) + "\n") == []


@pytest.mark.parametrize("form", STAMPS)
@pytest.mark.parametrize("msg,want", [(XID, ("xid", "0000:3b:00.0", 79)), (SSHD, ("xid", "0000:3b:00.0", 79)),
                                      (AER, ("aer", "0000:19:00.0", None))])
def test_the_same_message_under_kernel_is_one_event(form, msg, want):
    (ev,) = parse(STAMPS[form].format(ident="kernel", msg=msg) + "\n")
    assert (ev.kind, ev.gpu, ev.xid) == want


def test_rfc5424_reads_only_the_kernels_lines():
    assert parse(f"<14>1 2024-10-02T10:41:07.123Z gpu-node-01 myapp 4242 - - {XID}\n"
                 f"<14>1 2024-10-02T10:41:07.123Z gpu-node-01 myapp 4242 - [origin ip=\"10.0.0.1\"] {XID}\n") == []
    (ev,) = parse(f"<6>1 2024-10-02T10:41:07.123Z gpu-node-01 kernel - - [x@1 a=\"b\\]\"] {XID}\n")
    assert (ev.gpu, ev.xid, ev.time) == ("0000:3b:00.0", 79, "2024-10-02T10:41:07.123Z")


def test_forms_without_an_identifier_keep_working():
    for line in (f"[ 1843.308145] {XID}", f"[Sun Feb 23 16:24:18 2025] {XID}", f"4,1,2,-;{XID}",
                 f"2024-10-02T10:41:07,123456+00:00 {XID}", XID, f"[ 5.0] gpu-node-01 kernel: {XID}"):
        (ev,) = parse(line + "\n")
        assert (ev.gpu, ev.xid, ev.pid) == ("0000:3b:00.0", 79, 1234), line


JOURNAL_MULTILINE = (
    "Oct 02 10:41:07 gpu-node-01 {ident}: starting worker\n"
    "                                     " + XID + "\n"
    "                                     " + AER + "\n")


@pytest.mark.parametrize("chunk", [1 << 20, 60, 7])
def test_a_multi_line_message_belongs_to_the_program_that_logged_it(monkeypatch, chunk):
    monkeypatch.setattr(kernel_log, "CHUNK", chunk)
    assert parse(JOURNAL_MULTILINE.format(ident="myapp[4242]")) == []
    assert parse(JOURNAL_MULTILINE.format(ident="myapp[4242]").replace("starting", "NVRM starting")) == []
    evs = parse(JOURNAL_MULTILINE.format(ident="kernel"))
    assert [(e.kind, e.gpu) for e in evs] == [("xid", "0000:3b:00.0"), ("aer", "0000:19:00.0")]


def test_a_capture_keeps_the_line_a_kept_continuation_belongs_to():
    log = ("Oct 02 10:41:00 gpu-node-01 kernel: usb 1-1: new device\n" * 30
           + JOURNAL_MULTILINE.format(ident="myapp[4242]")
           + "Oct 02 10:41:08 gpu-node-01 kernel: usb 1-1: new device\n" * 30
           + JOURNAL_MULTILINE.format(ident="kernel"))
    kept = keep_lines(iter(line.encode() + b"\n" for line in log.splitlines()))
    assert b"myapp[4242]: starting worker" in kept
    assert [fields(e) for e in parse(kept)] == [fields(e) for e in parse(log)]
    assert [e.kind for e in parse(log)] == ["xid", "aer"]
