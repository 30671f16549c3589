"""Kernel-log GPU events: every text form admins paste, parsed field by field; the multi-line messages;
AER; --since; the VM tie on the demo host; damaged and non-UTF-8 input; the host's log sources."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.actions.cli import main
from nodeconsole.console import events as ev_mod
from nodeconsole.console.events import JSON_KEYS, parse_duration
from nodeconsole.console.root import Root
from nodeconsole.console.sources import kernel_log
from nodeconsole.console.sources.kernel_log import KernelLog, LogDenied, parse, read_host
from nodeconsole.console.xid import XIDS, lookup

FALLEN = ("fatal", "reboot node (check power, seating and the PCIe link)")


def fields(ev) -> dict:
    return {k: getattr(ev, k) for k in ("kind", "time", "gpu", "xid", "pid", "process", "text", "severity",
                                        "action", "port")}


def xid(time, gpu, code, pid, process, text, port=None, kind="xid") -> dict:
    severity, action = (lookup(code).severity, lookup(code).action)
    return {"kind": kind, "time": time, "gpu": gpu, "xid": code, "pid": pid, "process": process, "text": text,
            "severity": severity, "action": action, "port": port}


def aer(time, gpu, severity, action, text, port=None) -> dict:
    return {"kind": "aer", "time": time, "gpu": gpu, "xid": None, "pid": None, "process": None, "text": text,
            "severity": severity, "action": action, "port": port}


# -- one line of each form, every field --
XID_LINES = [
    # dmesg, seconds since boot
    ("[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
     xid("1843.308145", "0000:3b:00.0", 79, 1234, "python3", "GPU has fallen off the bus.")),
    # dmesg -T
    ("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
     "waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
     xid("Sun Feb 23 16:24:18 2025", "0000:9b:00.0", 119, 2024380, "nvidia-smi",
         "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).")),
    # dmesg -T, single-digit day
    ("[Mon Mar  3 09:01:02 2025] NVRM: Xid (PCI:0000:18:00): 43, pid=77, name=python, Ch 00000008",
     xid("Mon Mar  3 09:01:02 2025", "0000:18:00.0", 43, 77, "python", "Ch 00000008")),
    # journalctl -k, no PCI: prefix, <unknown> values (pid quoted)
    ("Oct 02 10:41:07 gpu-node-01 kernel: NVRM: Xid (0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM "
     "Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address",
     xid("Oct 02 10:41:07", "0000:cb:00.0", 13, None, None,
         "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address")),
    # journalctl -k -o short-precise, quoted pid and name
    ("Oct 02 10:41:08.123456 gpu-node-01 kernel: NVRM: Xid (PCI:0000:19:00): 31, pid='4242', name='pt_main_thread', "
     "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2b_a0000000",
     xid("Oct 02 10:41:08.123456", "0000:19:00.0", 31, 4242, "pt_main_thread",
         "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2b_a0000000")),
    # kern.log (rsyslog): syslog stamp with a padded day, and the kernel's own stamp after the tag
    ("Oct  2 10:41:09 gpu-node-01 kernel: [ 1850.000001] NVRM: Xid (PCI:0000:3a:00): 94, pid=501, name=train, "
     "Contained: CE User Channel (0x9). RST: No, D-RST: No",
     xid("Oct  2 10:41:09", "0000:3a:00.0", 94, 501, "train", "Contained: CE User Channel (0x9). RST: No, D-RST: No")),
    # journalctl -o short-iso
    ("2024-10-02T10:41:07+0000 gpu-node-01 kernel: NVRM: Xid (PCI:0000:9a:00): 48, pid=0, name=<unknown>, An "
     "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
     xid("2024-10-02T10:41:07+0000", "0000:9a:00.0", 48, 0, None,
         "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
         "subpartition 0.")),
    # raw kmsg record; a domain other than 0000 (Grace Hopper); no pid or name at all
    ("4,1234,5678901,-;NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000)",
     xid("5.678901", "0009:01:00.0", 149, None, None, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000)")),
    # no stamp at all (pasted from a ticket); upper-case hex; an old driver's text
    ("NVRM: Xid (0000:B3:00): 14, Channel 00000001",
     xid(None, "0000:b3:00.0", 14, None, None, "Channel 00000001")),
    # the function given; no text after the code
    ("[   12.000000] NVRM: Xid (PCI:0000:17:00.1): 45", xid("12.000000", "0000:17:00.1", 45, None, None, "")),
    # unquoted name with a space, double-quoted pid
    ('[ 3.5] NVRM: Xid (PCI:0000:18:00): 68, pid="812", name=Web Content, NVDEC0 Exception: Invalid Bitstream',
     xid("3.5", "0000:18:00.0", 68, 812, "Web Content", "NVDEC0 Exception: Invalid Bitstream")),
    # dmesg -x (facility and level before the stamp)
    ("kern  :warn  : [ 4.25] NVRM: Xid (PCI:0000:18:00): 63, pid=0, name=<unknown>, Row Remapper: New row marked "
     "for remapping, reset gpu to activate.",
     xid("4.25", "0000:18:00.0", 63, 0, None, "Row Remapper: New row marked for remapping, reset gpu to activate.")),
]


@pytest.mark.parametrize("line,expected", XID_LINES, ids=[e["time"] or "no-stamp" for _, e in XID_LINES])
def test_xid_line_every_field(line, expected):
    (ev,) = parse(line + "\n")
    assert fields(ev) == expected


def test_unknown_xid_is_kept():
    (ev,) = parse("[ 9.0] NVRM: Xid (PCI:0000:18:00): 201, pid=5, name=x, something new\n")
    assert (ev.xid, ev.severity, ev.pid, ev.process, ev.text) == (201, "unknown", 5, "x", "something new")
    assert "catalog" in ev.action


def test_xid_table_has_the_codes_admins_meet():
    for code in (13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 140):
        info = XIDS[code]
        assert info.meaning and info.severity in ("fatal", "error", "warning", "info") and info.action
    assert (XIDS[79].severity, XIDS[64].action, XIDS[45].severity) == ("fatal", "drain and RMA", "info")
    assert XIDS[13].action.startswith("restart app") and XIDS[48].action == "reset GPU"


def test_xid_154_takes_its_action_from_the_message():
    a, b = parse("[1.0] NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) "
                 "to 0x1 (GPU Reset Required)\n"
                 "[2.0] NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
                 "(Node Reboot Required)\n")
    assert (a.gpu, a.severity, a.action) == ("0019:01:00.0", "fatal", "reset GPU")
    assert (b.gpu, b.severity, b.action) == ("0008:01:00.0", "fatal", "reboot node")


# -- fallen off the bus without an Xid --
THREE_LINES_TEXT = ("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus "
                    "and is not responding to commands.")


def test_fallen_off_single_line():
    (ev,) = parse("[ 2201.5] NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.\n")
    assert fields(ev) == xid("2201.5", "0000:29:00.0", 79, None, None, "GPU 0000:29:00.0: GPU has fallen off the bus.")
    assert (ev.severity, ev.action) == FALLEN


@pytest.mark.parametrize("log,time", [
    # dmesg: one record, continuation lines indented
    ("[ 2202.123456] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
     "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
     "               NVRM: fallen off the bus and is not responding to commands.\n", "2202.123456"),
    # dmesg -T with every line stamped
    ("[Sun Feb 23 16:30:00 2025] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
     "[Sun Feb 23 16:30:00 2025] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
     "[Sun Feb 23 16:30:00 2025] NVRM: fallen off the bus and is not responding to commands.\n",
     "Sun Feb 23 16:30:00 2025"),
    # kmsg record with continuation lines starting with a space
    ("4,8812,2202123456,-;NVRM: The NVIDIA GPU 0000:b3:00.0\n"
     " NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
     " NVRM: fallen off the bus and is not responding to commands.\n", "2202.123456"),
    # kmsg as /dev/kmsg writes it: the record's newlines escaped
    ("4,8812,2202123456,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system "
     "has\\x0aNVRM: fallen off the bus and is not responding to commands.\n", "2202.123456"),
    # journalctl: three records
    ("Oct 02 10:50:00 gpu-node-01 kernel: NVRM: The NVIDIA GPU 0000:b3:00.0\n"
     "Oct 02 10:50:00 gpu-node-01 kernel: NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
     "Oct 02 10:50:00 gpu-node-01 kernel: NVRM: fallen off the bus and is not responding to commands.\n",
     "Oct 02 10:50:00"),
])
def test_fallen_off_three_lines(log, time):
    (ev,) = parse(log)
    assert fields(ev) == xid(time, "0000:b3:00.0", 79, None, None, THREE_LINES_TEXT)


def test_three_line_message_that_is_not_a_fall_is_no_event():
    assert parse("[ 5.0] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1e04)\n"
                 "               NVRM: installed in this system is not supported by the\n"
                 "               NVRM: NVIDIA 550.54 driver release.\n") == []


def test_xid_79_and_its_fallen_off_line_are_one_event():
    log = ("[ 1843.308140] NVRM: GPU at PCI:0000:3b:00: GPU-5f5c2b3e-91a8-4c1e-b8d2-3c3b0f2e7a11\n"
           "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
           "[ 1843.308150] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
           "[ 1843.308160] NVRM: A GPU crash dump has been created. If possible, please run\n"
           # the other order, another GPU
           "[ 1850.000000] NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.\n"
           "[ 1850.000010] NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
           # much later, the same GPU again: a new event
           + "".join(f"[ 1900.{i:06d}] usb 1-1: new high-speed USB device number {i}\n" for i in range(12))
           + "[ 1990.000000] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n")
    evs = parse(log)
    assert [(e.gpu, e.xid, e.pid, e.time) for e in evs] == [
        ("0000:3b:00.0", 79, 1234, "1843.308145"), ("0000:3a:00.0", 79, None, "1850.000010"),
        ("0000:3b:00.0", 79, None, "1990.000000")]


# -- PCIe AER --
NONFATAL = ("nonfatal", "check the slot; reset GPU if the VM sees errors")
FATAL_AER = ("fatal", "reset GPU / check the slot")
CORRECTED = ("corrected", "watch (a rising count points to the slot, riser or cable)")


def test_aer_lines():
    log = (
        "[ 3001.1] pcieport 0000:17:01.0: AER: Corrected error message received from 0000:19:00.0\n"
        "[ 3001.2] pcieport 0000:17:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:19:00.0\n"
        "[ 3001.2] nvidia 0000:19:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Requester ID)\n"
        "[ 3001.2] nvidia 0000:19:00.0:   device [10de:2330] error status/mask=00004000/00000000\n"
        "[ 3001.2] nvidia 0000:19:00.0:    [14] CmpltTO                (First)\n"
        "[ 3002.0] pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: 0000:19:00.0\n"
        "Oct 02 10:42:00 gpu-node-01 kernel: vfio-pci 0000:19:00.0: AER: PCIe Bus Error: severity=Uncorrected "
        "(Fatal), type=Inaccessible, (Unregistered Agent ID)\n"
        "[ 3003.0] pcieport 0000:00:03.0: AER: Corrected error received: id=0018\n"
        "[ 3004.0] pcieport 0000:17:01.0: AER: Multiple Corrected error received: 0000:17:01.0\n"
        "[ 3004.0] pcieport 0000:17:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
        "[ 3004.0] pcieport 0000:17:01.0: AER: enabled with IRQ 27\n"
        "Oct 02 10:43:00 gpu-node-01 kernel: vfio-pci 0000:19:00.0: AER: PCIe Bus Error: severity=Uncorrected "
        "(Fatal), type=Inaccessible, (Unregistered Agent ID)\n"
    )
    evs = parse(log)
    assert [fields(e) for e in evs] == [
        aer("3001.1", "0000:19:00.0", *CORRECTED,
            "pcieport 0000:17:01.0: AER: Corrected error message received from 0000:19:00.0", port="0000:17:01.0"),
        aer("3001.2", "0000:19:00.0", *NONFATAL,
            "pcieport 0000:17:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:19:00.0; nvidia 0000:19:00.0: "
            "PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
            port="0000:17:01.0"),
        aer("3002.0", "0000:19:00.0", *FATAL_AER,
            "pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: 0000:19:00.0; vfio-pci 0000:19:00.0: AER: "
            "PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered Agent ID)",
            port="0000:17:01.0"),
        aer("3003.0", "0000:00:03.0", *CORRECTED, "pcieport 0000:00:03.0: AER: Corrected error received: id=0018",
            port="0000:00:03.0"),
        aer("3004.0", "0000:17:01.0", *CORRECTED,
            "pcieport 0000:17:01.0: AER: Multiple Corrected error received: 0000:17:01.0; pcieport 0000:17:01.0: "
            "PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)", port="0000:17:01.0"),
        # the device's line on its own (its summary was told above, already with its device line)
        aer("Oct 02 10:43:00", "0000:19:00.0", *FATAL_AER,
            "vfio-pci 0000:19:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
            "(Unregistered Agent ID)"),
    ]


# -- mixed forms, blocks, damage --
MIXED = "\n".join([
    "[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45-Ubuntu SMP PREEMPT_DYNAMIC",
    XID_LINES[0][0],
    "Oct 02 10:41:07 gpu-node-01 kernel: virbr0: port 3(vnet12) entered forwarding state",
    XID_LINES[3][0],
    "6,2001,1843400000,-;pcieport 0000:17:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:19:00.0",
    " SUBSYSTEM=pci",
    " DEVICE=+pci:0000:17:01.0",
    "[Sun Feb 23 16:24:18 2025] " + "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.",
    XID_LINES[7][0],
]) + "\n"


def test_mixed_forms_in_one_file_in_log_order():
    evs = parse(MIXED)
    assert [(e.kind, e.time, e.gpu, e.xid) for e in evs] == [
        ("xid", "1843.308145", "0000:3b:00.0", 79), ("xid", "Oct 02 10:41:07", "0000:cb:00.0", 13),
        ("aer", "1843.400000", "0000:19:00.0", None), ("xid", "Sun Feb 23 16:24:18 2025", "0000:29:00.0", 79),
        ("xid", "5.678901", "0009:01:00.0", 149)]


def test_blocks_of_any_size_give_the_same_events(monkeypatch):
    whole = [fields(e) for e in parse(MIXED * 3)]
    monkeypatch.setattr(kernel_log, "CHUNK", 7)
    assert [fields(e) for e in parse(MIXED * 3)] == whole and len(whole) == 15


def test_text_file_object_and_crlf():
    import io

    evs = list(KernelLog().events(io.StringIO(MIXED.replace("\n", "\r\n"))))
    assert [(e.gpu, e.text) for e in evs] == [(e.gpu, e.text) for e in parse(MIXED)]


def test_non_utf8_bytes_are_survived():
    log = (b"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=caf\xe9\xff, Graphics Exception \xc3\n"
           b"[ 1.1] \xff\xfe garbage \x00 NVRM\n"
           b"[ 1.2] NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=ok, fault\n")
    a, b = parse(log)
    assert (a.xid, a.pid, a.process, a.text) == (13, 1, "caf\ufffd\ufffd", "Graphics Exception \ufffd")
    assert (b.xid, b.process) == (31, "ok")


DAMAGED = [
    "NVRM: Xid (PCI:0000:3b:00): ",
    "NVRM: Xid (PCI:0000:3b:00): 9999999999999999999999, pid=1",
    "NVRM: Xid (PCI:zz:00): 13, pid=1",
    "NVRM: Xid (PCI:0000:3b:00",
    "[ 12.3 NVRM: Xid",
    "[Sun Foo 99 99:99:99 2025] NVRM: Xid (PCI:0000:3b:00): 13, pid=" + "9" * 5000 + ", name=x, t",
    "2024-13-45T99:99:99 host kernel: NVRM: Xid (PCI:0000:3b:00): 13, t",
    "Foo 99 10:41:07 host kernel: NVRM: GPU has fallen off the bus.",
    "pcieport 0000:17:01.0: AER: Corrected error received: id=",
    "pcieport 0000:17:01.0: AER: Uncorrected (Sort-Of-Fatal) error received: 0000:19:00.0",
    "99999999999,1,99999999999999999999,-;NVRM: The NVIDIA GPU ffffffff:ff:1f.7",
    " NVRM: fallen off the bus",
    "\x00\x01NVRM:\x1b[2J AER PCIe Bus Error",
    "NVRM: " + "x" * 100_000 + " Xid (PCI:0000:3b:00): 13, pid=1, name=y, cut",
    "NVRM: The NVIDIA GPU 0000:b3:00.0",
]


def test_damaged_lines_never_crash_and_the_next_good_line_counts():
    good = XID_LINES[0][0]
    evs = parse("\n".join(DAMAGED + [good]))  # the last damaged line is cut off by EOF
    assert fields(evs[-1]) == XID_LINES[0][1]
    # what the damaged lines still say is read as written, never made up
    assert [(e.gpu, e.xid) for e in evs[:-1]] == [("0000:3b:00.0", 13), ("0000:3b:00.0", 13),
                                                   ("ffffffff:ff:1f.7", 79)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["NVRM: ", "Xid (", "PCI:", "0000:3b:00", ".0", "): ", "79", ", ", "pid=", "'",
                                 "name=", "<unknown>", "[ 1.5] ", "\n", " ", "AER: ", "Corrected error received: ",
                                 "pcieport 0000:17:01.0: ", "The NVIDIA GPU ", "fallen off the bus", "\\x0a",
                                 "4,1,2,-;", "\xff", "PCIe Bus Error: severity=", "Uncorrected (Fatal)"]),
                max_size=40))
def test_any_mix_of_fragments_parses_without_error(parts):
    for ev in parse("".join(parts)):
        assert ev.kind in ("xid", "aer") and ev.gpu.count(":") == 2


def test_an_overlong_line_is_cut_and_the_next_one_read(monkeypatch):
    monkeypatch.setattr(kernel_log, "CHUNK", 4096)
    log = "[ 1.0] " + "y" * (kernel_log.MAX_LINE * 3) + " NVRM: Xid (PCI:0000:3b:00): 13, t\n" + XID_LINES[0][0] + "\n"
    assert [fields(e) for e in parse(log)] == [XID_LINES[0][1]]


# -- --since --
def test_duration_forms():
    assert [parse_duration(t) for t in ("30s", "10m", "2h", "1d", "1w", "1h30m")] == [30, 600, 7200, 86400,
                                                                                     604800, 5400]
    for bad in ("", "10", "m", "-5m", "1.5h", "10 m", "0s", "10x", "١٠m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_since_judges_each_clock_by_the_logs_newest_stamp():
    log = ("[  100.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, old\n"
           "[ 1000.000000] NVRM: Xid (PCI:0000:18:00): 31, pid=2, name=b, new\n"
           "[ 1500.000000] kvm: vcpu 3 wrmsr ignored\n"  # the newest boot stamp holds no event
           "Dec 31 23:55:00 node kernel: NVRM: Xid (PCI:0000:19:00): 43, pid=3, name=c, last year\n"
           "Jan 01 00:01:00 node kernel: NVRM: Xid (PCI:0000:19:00): 45, pid=4, name=d, this year\n"
           "[Sun Feb 23 16:00:00 2025] NVRM: Xid (PCI:0000:9a:00): 48, pid=5, name=e, early\n"
           "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9a:00): 63, pid=6, name=f, late\n"
           "NVRM: Xid (PCI:0000:9b:00): 92, pid=7, name=g, no time\n")
    log_reader = KernelLog()
    evs = log_reader.text(log)
    assert len(evs) == 7
    kept, untimed = ev_mod.within(evs, 600, log_reader.newest)
    assert [e.pid for e in kept] == [2, 3, 4, 6, 7] and untimed == 1
    kept, _ = ev_mod.within(evs, 120, log_reader.newest)
    assert [e.pid for e in kept] == [4, 6, 7]


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_json_keys_and_since(tmp_path, capsys):
    f = tmp_path / "dmesg.txt"
    f.write_text(MIXED)
    rc, out, err = _run(capsys, "events", "--kernel-log", str(f), "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert [tuple(d) for d in data] == [JSON_KEYS] * 5
    assert {"time", "gpu", "xid", "pid", "process", "text", "severity", "action", "vm"} <= set(JSON_KEYS)
    # seconds since boot with no boot time given: no wall-clock time, the uptime and the log's own stamp
    assert data[0] == {"time": None, "gpu": "0000:3b:00.0", "xid": 79, "pid": 1234, "process": "python3",
                       "text": "GPU has fallen off the bus.", "severity": "fatal", "action": FALLEN[1], "vm": None,
                       "kind": "xid", "port": None, "vms": [], "uptime_s": 1843.308145, "logged": "1843.308145",
                       "failure": None, "source": "host"}
    # a dated stamp without a zone is the host's local time (TZ=UTC in the tests), in RFC 3339 UTC
    assert [d["time"] for d in data if d["logged"] == "Sun Feb 23 16:24:18 2025"] == ["2025-02-23T16:24:18.000Z"]
    rc, out, err = _run(capsys, "events", "--kernel-log", str(f), "--json", "--since", "1m")
    # --since counts back from now: the dated lines (2025, last year's October) are older; the boot clock's
    # lines have no wall-clock time and are judged against the log's newest uptime (1843.4): 5.678901 goes
    assert rc == 0 and [d["logged"] for d in json.loads(out)] == ["1843.308145", "1843.400000"]


def test_cli_boot_time_dates_uptime_stamps(tmp_path, capsys):
    f = tmp_path / "dmesg.txt"
    f.write_text(MIXED)
    rc, out, err = _run(capsys, "events", "--kernel-log", str(f), "--json", "--boot-time", "2026-12-01T08:00:00+01:00")
    assert rc == 0, err
    first = json.loads(out)[0]
    assert first["time"] == "2026-12-01T07:30:43.308Z" and first["uptime_s"] == 1843.308145
    rc, _, err = _run(capsys, "events", "--kernel-log", str(f), "--boot-time", "2026-12-01 08:00")
    assert rc == 2 and "no time zone" in err and err.count("\n") == 1
    rc, _, err = _run(capsys, "events", "--demo", "--boot-time", "2026-12-01T08:00:00Z")
    assert rc == 2 and "--boot-time is for --kernel-log" in err


@pytest.mark.parametrize("argv,message", [
    (["--since", "10"], "is not a duration"),
    (["--since", "soon"], "is not a duration"),
    (["--kernel-log", "/nonexistent/kern.log"], "--kernel-log /nonexistent/kern.log: no such file"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, tmp_path, argv, message):
    rc, out, err = _run(capsys, "events", *argv)
    assert rc == 2 and out == "" and message in err and err.count("\n") == 1


def test_cli_directory_as_log_is_bad_input(capsys, tmp_path):
    rc, _, err = _run(capsys, "events", "--kernel-log", str(tmp_path))
    assert rc == 2 and err.count("\n") == 1 and "--kernel-log" in err


# -- the host's log sources --
def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "sys").mkdir(parents=True)
    (root / "var/log").mkdir(parents=True)
    (root / ".sim").mkdir()
    return root


def test_tree_reads_kern_log_then_sim_kmsg(tmp_path, capsys):
    root = _tree(tmp_path)
    (root / "var/log/kern.log").write_text(XID_LINES[5][0] + "\n")
    (root / ".sim/kmsg").write_text(XID_LINES[7][0] + "\n6,9,9000000,-;kvm: vcpu0 unhandled rdmsr\n")
    rc, out, err = _run(capsys, "events", "--root", str(root), "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert [(d["logged"], d["xid"]) for d in data] == [("Oct  2 10:41:09", 94), ("5.678901", 149)]
    # the tree has no boot time (proc/stat btime): the kmsg record keeps its uptime alone
    assert data[1]["time"] is None and data[1]["uptime_s"] == 5.678901 and data[0]["time"].endswith("-10-02T10:41:09.000Z")


def test_tree_log_leading_out_of_the_root_is_not_read(tmp_path, capsys):
    root = _tree(tmp_path)
    outside = tmp_path / "outside.log"
    outside.write_text(XID_LINES[0][0] + "\n")
    (root / "var/log/kern.log").symlink_to("../../../outside.log")
    (root / ".sim/kmsg").symlink_to(outside)
    assert list(read_host(Root(root), False, KernelLog())) == []
    rc, out, err = _run(capsys, "events", "--root", str(root))
    assert rc == 0 and out == "no GPU events in the kernel log\n"


def test_unreadable_log_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    root = _tree(tmp_path)
    log = root / "var/log/kern.log"
    log.write_text(XID_LINES[0][0] + "\n")
    real_open = os.open

    def denied(path, flags, *a, **kw):
        if os.fspath(path) == str(log):
            raise PermissionError(1, "Operation not permitted")
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(kernel_log.os, "open", denied)
    rc, out, err = _run(capsys, "events", "--root", str(root))
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert "reading /var/log/kern.log needs root" in err and "Traceback" not in err


def test_live_host_reads_dev_kmsg_and_says_when_denied(tmp_path, monkeypatch):
    root = tmp_path / "live"
    (root / "dev").mkdir(parents=True)
    kmsg = root / "dev/kmsg"  # a regular file stands for the device: read as records
    kmsg.write_text(XID_LINES[7][0] + "\n")
    assert [e.xid for e in read_host(Root(root), True, KernelLog())] == [149]
    real_open = os.open

    def denied(path, flags, *a, **kw):
        if os.fspath(path).endswith("dev/kmsg"):
            raise PermissionError(1, "Operation not permitted")
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(kernel_log.os, "open", denied)
    with pytest.raises(LogDenied) as e:
        list(read_host(Root(root), True, KernelLog()))
    assert e.value.filename == "/dev/kmsg"


def test_kmsg_device_reader_reads_records_until_eagain(monkeypatch):
    records = [b"4,1,1000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has fallen off the bus.\n",
               b"3,2,2000000,-;pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: 0000:19:00.0\n"
               b" SUBSYSTEM=pci\n DEVICE=+pci:0000:17:01.0\n"]
    calls = []

    def fake_read(fd, n):
        calls.append(n)
        if len(calls) == 2:
            raise OSError(32, "Broken pipe")  # overwritten while reading: go on
        if records:
            return records.pop(0)
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(kernel_log.os, "read", fake_read)
    evs = list(KernelLog().events(kernel_log._KmsgRecords(-1)))
    assert [(e.time, e.gpu, e.xid, e.severity) for e in evs] == [
        ("1.000000", "0000:3b:00.0", 79, "fatal"), ("2.000000", "0000:19:00.0", None, "fatal")]


# -- the VM holding the GPU, on the demo host --
@pytest.fixture
def demo(state_ro) -> Path:
    """The default demo host, shared by the tests of this module that only read it."""
    return state_ro


DEMO_LOG = (
    "[ 5000.100000] NVRM: Xid (PCI:0000:19:00): 79, pid=3131, name=python3, GPU has fallen off the bus.\n"
    "[ 5000.200000] pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: 0000:19:00.0\n"
    "[ 5000.300000] pcieport 0000:17:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
    "[ 5000.400000] NVRM: Xid (PCI:0000:3a:00): 94, pid=77, name=infer, Contained: CE User Channel (0x9).\n"
    "[ 5000.500000] vfio-pci 0000:3a:00.4: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction "
    "Layer, (Requester ID)\n"
    "[ 5000.600000] NVRM: Xid (PCI:0000:3b:00): 43, pid=12, name=desk, Ch 00000010\n"
    "[ 5000.700000] NVRM: Xid (PCI:0000:bb:00): 13, pid=9, name=host-job, Graphics Exception\n"
)


def test_demo_events_name_the_vm_holding_the_gpu(demo, tmp_path, capsys):
    f = tmp_path / "kern.log"
    f.write_text(DEMO_LOG)
    rc, out, err = _run(capsys, "events", "--demo", "--kernel-log", str(f), "--json")
    assert rc == 0, err
    got = [(d["gpu"], d["kind"], d["severity"], d["vm"], d["vms"]) for d in json.loads(out)]
    assert got == [
        ("0000:19:00.0", "xid", "fatal", "train-a", ["train-a"]),  # vfio-pci
        ("0000:19:00.0", "aer", "fatal", "train-a", ["train-a"]),  # the port names the device below it
        ("0000:17:01.0", "aer", "corrected", "train-a", ["train-a"]),  # the port's own link: the GPU below
        ("0000:3a:00.0", "xid", "error", "mig-infer-a, mig-infer-b", ["mig-infer-a", "mig-infer-b"]),  # MIG
        ("0000:3a:00.4", "aer", "nonfatal", "mig-infer-a", ["mig-infer-a"]),  # one VF, one VM
        ("0000:3b:00.0", "xid", "error", "vgpu-desk-1, vgpu-desk-2", ["vgpu-desk-1", "vgpu-desk-2"]),  # vGPU
        ("0000:bb:00.0", "xid", "error", None, []),  # the host's own GPU
    ]
    rc, out, _ = _run(capsys, "events", "--demo", "--kernel-log", str(f))
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 7
    assert lines[0].split() [:6] == ["[5000.100000]", "0000:19:00.0", "Xid", "79", "fatal", "vm"]
    assert "vm train-a  GPU has fallen off the bus. (pid 3131 python3)  → reboot node" in lines[0]


def test_demo_kernel_log_without_a_host_names_no_vm(tmp_path, capsys):
    f = tmp_path / "kern.log"
    f.write_text(DEMO_LOG)
    rc, out, _ = _run(capsys, "events", "--kernel-log", str(f), "--json")
    assert rc == 0 and {d["vm"] for d in json.loads(out)} == {None}


def test_demo_host_log_from_sim_kmsg(demo, capsys):
    from nodeconsole.console.demo.host import GeneratedHost

    sim = Path(GeneratedHost.at(demo).root) / ".sim/kmsg"
    assert not sim.exists()
    rc, out, err = _run(capsys, "events", "--demo")
    assert rc == 0 and out == "no GPU events in the kernel log\n" and "no kernel log" in err
    sim.write_text("4,100,5000100000,-;NVRM: Xid (PCI:0000:9b:00): 48, pid=0, name=<unknown>, DBE\n"
                   "3,101,5000200000,-;pcieport 0000:9a:00.0: AER: odd line\n")
    try:
        rc, out, err = _run(capsys, "events", "--demo", "--json")
    finally:
        sim.unlink()
    assert rc == 0 and err == ""
    (d,) = json.loads(out)
    assert (d["logged"], d["gpu"], d["xid"], d["pid"], d["vm"], d["action"]) == (
        "5000.100000", "0000:9b:00.0", 48, 0, "train-b", "reset GPU")
    # the demo host's boot time (its proc/stat btime, 2025-12-01T00:00:00Z) dates the kmsg record
    assert d["time"] == "2025-12-01T01:23:20.100Z" and d["uptime_s"] == 5000.1
