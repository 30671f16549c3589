"""The one pair of limits a capture is written within and a replay opens within: whatever `capture`
writes, `--replay` opens, and an archive beyond them is refused before anything is extracted.

A capture of a large host (16 GPUs, 500 VMs) is ~5 000 members and ~6 MiB unpacked; the limits leave
room for a sick host (10x those members, a kernel log full of Xid lines, a long audit log) and keep a
hostile archive's cost small: a replay streams each member to disk, so its memory stays far below MAX_TOTAL_BYTES.

Code reads these as `limits.NAME` at call time (tests lower them with monkeypatch).
"""
from __future__ import annotations

MAX_MEMBER_BYTES = 64 << 20  # one member's data (the audit log and a kernel log are the largest)
MAX_TOTAL_BYTES = 256 << 20  # the archive unpacked: every header, name and data block, padding included
MAX_MEMBERS = 50_000  # members of any kind (directories and links included)
MAX_HEADER_FIELD = 8 << 10  # one GNU long name / long link record, or one pax extended header
MAX_HEADER_CHAIN = 4  # extension headers (long name, long link, pax) before one member
MAX_PAX_DIGITS = 20  # the longest run of digits a pax header may hold (sizes and times are shorter)
MAX_PAX_TOTAL = 1 << 20  # pax headers in all (a capture, written in GNU format, has none)
MAX_ARCHIVE_BYTES = MAX_TOTAL_BYTES  # the file itself: compression never makes a capture larger

MAX_JSON_DEPTH = 64  # nesting of manifest.json, nvml.json, doctor.json (the real ones nest < 10)

# Kernel logs: a line longer than MAX_LOG_LINE is cut to it and marked "…[cut N bytes]"; of the lines a
# capture keeps, the newest MAX_LOG_KEPT bytes stay (below MAX_MEMBER_BYTES: the log is one member);
# at most the newest MAX_LOG_READ bytes of a log file are read.
MAX_LOG_LINE = 8 << 10
MAX_LOG_KEPT = 32 << 20
MAX_LOG_READ = 1 << 30
