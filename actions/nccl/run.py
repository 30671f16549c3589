"""Running an NCCL check as a child process: live progress from its output, a timeout, and a cancel
that leaves nothing running.

The child gets its own session (start_new_session=True), so it and everything it starts (torchrun's
workers, MPI launch daemons) form one process group that is signalled as a whole: SIGTERM, a short grace,
then SIGKILL. Output is read line by line through the incremental parser; glibc buffers a pipe in
4 KiB blocks, so the child runs under `stdbuf -oL` when that exists to make rows arrive as printed.

A run that prints no new row for a while (3× the longest gap between rows so far, at least
`stall_after` seconds) is reported once per silence through `on_stall`; it keeps running (a hung
collective still ends at the timeout or on cancel).
"""
from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Unpack

import psutil

from nodeconsole.actions.nccl.commands import ENV_NAME, LocalCommand, LocalCommandOptions, local_command
from nodeconsole.actions.nccl.expect import Topology, verdict
from nodeconsole.actions.nccl.finding import Finding
from nodeconsole.actions.nccl.parse import ParsedOutput, Parser, Row, Transport, expected_rows, size_arg

DEFAULT_TIMEOUT = 600.0
DEFAULT_STALL = 20.0  # seconds without a new row before a run looks stalled, at the least
STALL_FACTOR = 3.0  # ... or this many times the longest gap between rows so far
TAIL_LINES = 200


@dataclass(frozen=True)
class SweepProgress:
    """A row of an NCCL sweep read: how many so far, of how many."""
    done: int  # rows read so far
    total: int | None  # rows the sweep will print (None when it cannot be told)
    row: Row


@dataclass(frozen=True)
class Stall:
    """No new row for `quiet_s` seconds, past the `threshold_s` the run was allowed."""
    quiet_s: float
    threshold_s: float
    rows: int  # rows read before the silence
    factor: float = STALL_FACTOR
    minimum_s: float = DEFAULT_STALL

    def message(self) -> str:
        after = f"after row {self.rows}" if self.rows else "before the first row"
        return (f"looks stalled: no new row for {self.quiet_s:.0f} s {after} ({self.factor:g}× the longest gap "
                f"between rows so far, at least {self.minimum_s:g} s); still running")


@dataclass
class SweepResult:
    """How an NCCL sweep ended: its rows, exit, tails of its output."""
    argv: list[str]
    parsed: ParsedOutput
    exit_code: int | None  # negative: killed by that signal; None: never started
    timed_out: bool = False
    cancelled: bool = False
    stderr_tail: list[str] = field(default_factory=list)
    stdout_tail: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    error: str = ""  # why it could not start, or a progress callback's failure
    stalls: int = 0  # silences reported through on_stall

    @property
    def rows(self) -> list[Row]:
        return self.parsed.rows

    @property
    def avg_busbw(self) -> float | None:
        return self.parsed.avg_busbw

    @property
    def oob_ok(self) -> bool | None:
        return self.parsed.oob_ok

    @property
    def version(self) -> str | None:
        return self.parsed.version

    @property
    def transports(self) -> list[Transport]:
        return self.parsed.transports

    @property
    def ok(self) -> bool:
        return (self.exit_code == 0 and not self.timed_out and not self.cancelled and self.parsed.complete
                and not self.parsed.corrupted)

    def findings(self, topo: Topology | None = None) -> list[Finding]:
        """The run's own outcome (timeout, cancel, exit status) followed by the output's verdict."""
        out = []
        if self.error and self.exit_code is None:
            out.append(Finding("error", "nccl.not_started", f"the check could not start: {self.error}",
                               "nothing ran", "install nccl-tests or PyTorch with CUDA, or fix the path"))
            return out
        if self.timed_out:
            out.append(Finding("error", "nccl.timeout", f"the check ran out of time after {self.duration_s:.0f} s "
                               f"({len(self.rows)} rows read)",
                               "a collective that never completes usually means ranks cannot reach each other",
                               "run the NCCL preflight (interfaces, P2P, ACS); rerun with a smaller -e"))
        elif self.cancelled:
            out.append(Finding("info", "nccl.cancelled", f"cancelled after {len(self.rows)} rows"
                               if self.rows else "cancelled before any result", "stopped on request",
                               "nothing to do"))
        elif self.exit_code not in (0, None):
            tail = self.stderr_tail[-1] if self.stderr_tail else ""
            out.append(Finding("error", "nccl.exit_status", f"the test exited with status {self.exit_code}"
                               + (f": {tail}" if tail else ""),
                               "nccl-tests exits non-zero on NCCL errors and on wrong results",
                               "read the NCCL WARN lines and stderr"))
        elif not self.parsed.complete and self.rows:
            out.append(Finding("warning", "nccl.incomplete", "the output ended before its summary",
                               "the process stopped early", "rerun and read stderr"))
        return out + verdict(self.parsed, topo)


def row_average(rows: Sequence[Row]) -> float | None:
    """The mean bus bandwidth of these rows' cells (out-of-place and in-place), as nccl-tests averages
    its summary; None without a number."""
    vals = [c.busbw for r in rows for c in (r.out_of_place, r.in_place)
            if c is not None and c.busbw is not None and c.busbw == c.busbw]
    return sum(vals) / len(vals) if vals else None


def average_text(parsed: ParsedOutput, stopped: str = "") -> str:
    """The average bus bandwidth in words: the summary's, else the average of the rows that came (a
    run cut short has no summary), else why there is none. `stopped` ("cancelled", "timed out") names
    how a run without rows ended."""
    avg = parsed.avg_busbw
    if avg is not None and avg == avg:
        return f"avg busbw {avg:.2f} GB/s"
    rows = parsed.rows
    mean = row_average(rows)
    if mean is not None:
        return f"avg busbw {mean:.2f} GB/s over the {len(rows)} row{'s' if len(rows) != 1 else ''} that came"
    if not rows:
        return f"{stopped} before any result" if stopped else "no result"
    return "avg busbw not reported"


def sweep_total(argv: Sequence[str]) -> int | None:
    """Rows an all_reduce_perf command line will print, from its -b/-e/-f/-i options (nccl-tests'
    defaults: 32M..32M, factor 1, step 1M)."""
    opts = {"-b": "33554432", "-e": "33554432", "-f": "1", "-i": "1048576"}
    long = {"--minbytes": "-b", "--maxbytes": "-e", "--stepfactor": "-f", "--stepbytes": "-i"}
    args = list(argv)
    for i, a in enumerate(args[:-1]):
        key = long.get(a, a)
        if key in opts:
            opts[key] = args[i + 1]
    try:
        return expected_rows(size_arg(opts["-b"]), size_arg(opts["-e"]), int(opts["-f"]), size_arg(opts["-i"]))
    except ValueError:
        return None


def _group_alive(pgid: int) -> bool:
    """Any member of the process group still running (zombies don't count: they wait to be reaped by a
    parent or init, and hold nothing)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


class NcclRun:
    """One run of a command. `start()`, then `wait()` (blocks; returns the result); `cancel()` from any
    thread. `on_progress` is called from the reading thread for every row."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT, on_progress: Callable[[SweepProgress], None] | None = None,
                 total: int | None = None, kill_grace: float = 3.0, line_buffered: bool = True,
                 base_env: Mapping[str, str] | None = None, stall_after: float | None = DEFAULT_STALL,
                 stall_factor: float = STALL_FACTOR, on_stall: Callable[[Stall], None] | None = None) -> None:
        self.argv = list(argv)
        self.env = dict(os.environ if base_env is None else base_env)
        for k, v in (env or {}).items():
            if not ENV_NAME.fullmatch(k):
                raise ValueError(f"{k!r} is not an environment variable name")
            self.env[k] = str(v)
        self.timeout = timeout
        self.on_progress = on_progress
        self.total = total if total is not None else sweep_total(self.argv)
        self.kill_grace = kill_grace
        self.line_buffered = line_buffered
        self.parser = Parser()
        self.proc: subprocess.Popen[str] | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._stdout: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._readers: list[threading.Thread] = []
        self._cancelled = threading.Event()
        self._kill_lock = threading.Lock()
        self._started = 0.0
        self._result: SweepResult | None = None
        self._error = ""
        self.stall_after = stall_after  # None: never report a stall
        self.stall_factor = stall_factor
        self.on_stall = on_stall
        self.stalls = 0
        self._last_row = 0.0  # monotonic time of the newest row (0: none yet)
        self._longest_gap = 0.0  # between two rows
        self._reported_silence = -1.0  # the _last_row whose silence was reported

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc else None  # session leader: its pid is the group id

    def start(self) -> None:
        argv = self.argv
        stdbuf = shutil.which("stdbuf") if self.line_buffered else None
        if stdbuf:
            argv = [stdbuf, "-oL", "-eL", *argv]
        self._started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=self.env, text=True, errors="replace",
                                     bufsize=1, start_new_session=True)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True, name="nccl-stdout"),
                         threading.Thread(target=self._read_stderr, daemon=True, name="nccl-stderr")]
        for t in self._readers:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            self._stdout.append(line.rstrip("\n"))
            if not line.endswith("\n"):
                continue  # cut off mid-line when the child was killed: its numbers are not whole
            row = self.parser.feed(line)
            if row is not None:
                now = time.monotonic()
                if self._last_row:
                    self._longest_gap = max(self._longest_gap, now - self._last_row)
                self._last_row = now
            if row is not None and self.on_progress is not None:
                header = self.parser.out.header
                if header and header.min_bytes is not None and header.max_bytes is not None:
                    # the child's own account of its sweep wins over our reading of its options
                    self.total = expected_rows(header.min_bytes, header.max_bytes, header.step_factor or 0,
                                               header.step_bytes or 0)
                try:
                    self.on_progress(SweepProgress(len(self.parser.out.rows), self.total, row))
                except Exception as e:  # a broken callback must not stop the reading
                    self._error = self._error or f"progress callback failed: {e!r}"

    def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        for line in self.proc.stderr:
            self._stderr.append(line.rstrip("\n"))

    def _check_stall(self, now: float) -> None:
        """Report the current silence once when it outlasts the stall threshold."""
        if self.stall_after is None or self.on_stall is None:
            return
        last = self._last_row or self._started
        threshold = max(self.stall_after, self.stall_factor * self._longest_gap)
        quiet = now - last
        if quiet < threshold or self._reported_silence == last:
            return
        self._reported_silence = last
        self.stalls += 1
        try:
            self.on_stall(Stall(quiet, threshold, len(self.parser.out.rows), self.stall_factor, self.stall_after))
        except Exception as e:  # a broken callback must not stop the run
            self._error = self._error or f"stall callback failed: {e!r}"

    def cancel(self) -> None:
        """Stop the run and everything it started; blocks for at most the kill grace plus a moment."""
        self._cancelled.set()
        self._kill_group()

    def _kill_group(self) -> None:
        if self.proc is None:
            return
        pgid = self.proc.pid
        with self._kill_lock:
            for sig, grace in ((signal.SIGTERM, self.kill_grace), (signal.SIGKILL, 5.0)):
                if not _group_alive(pgid):
                    break
                try:
                    os.killpg(pgid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    self.proc.poll()  # reap the leader as soon as it exits
                    if not _group_alive(pgid):
                        break
                    time.sleep(0.02)
            self.proc.poll()

    def wait(self) -> SweepResult:
        """Block until the command ends, times out or is cancelled; then nothing of it runs any more."""
        if self._result is not None:
            return self._result
        assert self.proc is not None, "start() first"
        timed_out = False
        deadline = None if self.timeout is None else self._started + self.timeout
        while not self._cancelled.is_set():
            try:
                self.proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    timed_out = True
                    break
                self._check_stall(now)
        # Also after a normal exit: stragglers of the group (a worker left behind) are stopped too.
        self._kill_group()
        for t in self._readers:
            t.join(timeout=5.0)
        self.proc.wait()
        self._result = SweepResult(
            argv=self.argv, parsed=self.parser.out, exit_code=self.proc.returncode, timed_out=timed_out,
            cancelled=self._cancelled.is_set() and not timed_out, stderr_tail=list(self._stderr),
            stdout_tail=list(self._stdout), duration_s=time.monotonic() - self._started, error=self._error,
            stalls=self.stalls)
        return self._result

    def run(self) -> SweepResult:
        """start() and wait(); a command that cannot be started gives a result saying why."""
        try:
            self.start()
        except OSError as e:
            return SweepResult(self.argv, self.parser.out, None, error=str(e))
        return self.wait()


def run_local(gpus: Sequence[int | str], path: str | None = None, sweep: Sequence[str] | None = None, *,
              timeout: float | None = DEFAULT_TIMEOUT, on_progress: Callable[[SweepProgress], None] | None = None,
              env: Mapping[str, str] | None = None, kill_grace: float = 3.0,
              stall_after: float | None = DEFAULT_STALL, on_stall: Callable[[Stall], None] | None = None,
              **kwargs: Unpack[LocalCommandOptions]) -> tuple[NcclRun, LocalCommand]:
    """Prepare (not start) the single-host check for `gpus`: returns the run object, so a caller can
    keep it to cancel, and the command it runs. Raises ValueError when nothing can run it."""
    cmd = local_command(gpus, path, sweep, **kwargs)
    run_env = {**cmd.env, **(env or {})}
    return NcclRun(cmd.argv, run_env, timeout=timeout, on_progress=on_progress, kill_grace=kill_grace,
                   stall_after=stall_after, on_stall=on_stall), cmd
