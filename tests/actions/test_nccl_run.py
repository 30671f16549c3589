"""Running the check as a real child process: a stand-in all_reduce_perf replays recorded outputs,
fails, or hangs; timeout and cancel must leave nothing of its process group running."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from nodeconsole.actions.nccl.expect import Topology
from nodeconsole.actions.nccl.parse import parse_text
from nodeconsole.actions.nccl.run import NcclRun, SweepProgress, run_local, sweep_total

FAKE = Path(__file__).resolve().parent / "fixtures" / "fake_all_reduce_perf.py"


@pytest.fixture()
def fake_bin(tmp_path: Path) -> Path:
    """A directory holding an executable `all_reduce_perf` that runs the stand-in."""
    d = tmp_path / "bin"
    d.mkdir()
    exe = d / "all_reduce_perf"
    exe.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE)!r}\n"
                   f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    exe.chmod(0o755)
    return d


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _group_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def _wait_for(path: Path, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    return json.loads(path.read_text())


def _start(fake_bin: Path, tmp_path: Path, gpus=("0", "1"), **fake_env: str):
    record = tmp_path / "record.json"
    env = {"FAKE_NCCL_RECORD": str(record), **{f"FAKE_NCCL_{k.upper()}": v for k, v in fake_env.items()}}
    return record, env


@pytest.mark.parametrize("name,delay", [("3.txt", "0.01"), ("4.txt", "0.05")])
def test_replay_streams_rows_with_progress(shared_dir: Path, fake_bin: Path, tmp_path: Path, name: str,
                                           delay: str) -> None:
    src = shared_dir / "nccl" / name
    record, env = _start(fake_bin, tmp_path, output=str(src), delay=delay)
    events: list[tuple[SweepProgress, bool]] = []
    holder: dict[str, NcclRun] = {}

    def progress(p: SweepProgress) -> None:
        events.append((p, holder["run"].proc.poll() is None))  # was the child still running?

    run, cmd = run_local([0, 1], search_path=str(fake_bin), env=env, on_progress=progress, timeout=30)
    holder["run"] = run
    result = run.run()
    expected = parse_text(src.read_text())
    assert cmd.kind == "nccl-tests"
    assert result.exit_code == 0 and result.ok and not result.timed_out and not result.cancelled
    assert result.rows == expected.rows
    assert result.avg_busbw == expected.avg_busbw and result.version == expected.version
    assert result.transports == expected.transports
    # one progress call per row, in order, against the sweep the header announced
    assert [p.done for p, _ in events] == list(range(1, len(expected.rows) + 1))
    assert {p.total for p, _ in events} == {len(expected.rows)}
    assert [p.row for p, _ in events] == expected.rows
    assert events[0][1], "the first row must arrive while the test is still running"
    seen = json.loads(record.read_text())
    assert seen["argv"] == ["-b", "8", "-e", "1G", "-f", "2", "-g", "2"]
    assert seen["env"] == {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert "fake all_reduce_perf done" in result.stderr_tail
    assert _group_members(seen["pids"][0]) == []


def test_failing_run_reports_status_and_corruption(shared_dir: Path, fake_bin: Path, tmp_path: Path) -> None:
    _, env = _start(fake_bin, tmp_path, output=str(shared_dir / "nccl" / "5.txt"), exit="1")
    run, _ = run_local(["0"], search_path=str(fake_bin), env=env, timeout=30)
    result = run.run()
    assert result.exit_code == 1 and not result.ok
    assert result.oob_ok is False and len(result.rows) == 25
    codes = [f.code for f in result.findings(Topology(("NVIDIA GH200 120GB",), 1, nodes=2, nic_gbps=(200,)))]
    assert codes[:2] == ["nccl.exit_status", "nccl.corruption"]


def test_timeout_kills_the_whole_group(shared_dir: Path, fake_bin: Path, tmp_path: Path) -> None:
    record, env = _start(fake_bin, tmp_path, output=str(shared_dir / "nccl" / "1.txt"), hang_after="20",
                         child="1")
    run, _ = run_local(["0"], search_path=str(fake_bin), env=env, timeout=1.0, kill_grace=0.5)
    t0 = time.monotonic()
    result = run.run()
    assert time.monotonic() - t0 < 8
    pids = json.loads(record.read_text())["pids"]
    assert len(pids) == 2
    assert result.timed_out and not result.cancelled and result.exit_code is not None and result.exit_code < 0
    assert 0 < len(result.rows) < 11 and not result.parsed.complete
    assert [f.code for f in result.findings()][0] == "nccl.timeout"
    assert not any(_running(p) for p in pids)
    assert _group_members(run.pgid) == []


def test_cancel_escalates_to_sigkill(shared_dir: Path, fake_bin: Path, tmp_path: Path) -> None:
    """The child and its worker ignore SIGTERM: cancel must still end both, and only them."""
    record, env = _start(fake_bin, tmp_path, output=str(shared_dir / "nccl" / "3.txt"), hang_after="15",
                         child="1", ignore_term="1")
    first_row = threading.Event()
    run, _ = run_local(["0", "1"], search_path=str(fake_bin), env=env, timeout=60, kill_grace=0.3,
                       on_progress=lambda p: first_row.set())
    bystander = psutil.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        run.start()
        waiter: dict[str, object] = {}
        t = threading.Thread(target=lambda: waiter.setdefault("result", run.wait()))
        t.start()
        assert first_row.wait(10)
        pids = _wait_for(record)["pids"]
        assert all(_running(p) for p in pids)
        run.cancel()
        t.join(10)
        assert not t.is_alive()
        result = waiter["result"]
        assert result.cancelled and not result.timed_out  # type: ignore[attr-defined]
        assert result.exit_code == -9  # type: ignore[attr-defined]
        assert result.rows  # what was read before the cancel is kept  # type: ignore[attr-defined]
        assert not any(_running(p) for p in pids)
        assert _group_members(run.pgid) == []
        assert _running(bystander.pid)  # nothing outside the group was touched
    finally:
        bystander.kill()
        bystander.wait()


def test_stragglers_after_a_normal_exit_are_stopped(shared_dir: Path, fake_bin: Path, tmp_path: Path) -> None:
    """The leader exits but a worker it started lingers (holding the output pipe open)."""
    record, env = _start(fake_bin, tmp_path, output=str(shared_dir / "nccl" / "4.txt"), child="1")
    run, _ = run_local(["0", "1"], search_path=str(fake_bin), env=env, timeout=30, kill_grace=0.5)
    t0 = time.monotonic()
    result = run.run()
    assert time.monotonic() - t0 < 8
    assert result.exit_code == 0 and result.parsed.complete and len(result.rows) == 3
    assert not any(_running(p) for p in json.loads(record.read_text())["pids"])


def test_a_program_that_cannot_start(tmp_path: Path) -> None:
    result = NcclRun([str(tmp_path / "nope")], line_buffered=False).run()
    assert result.exit_code is None and result.error
    assert [f.code for f in result.findings()] == ["nccl.not_started"]


def test_broken_progress_callback_does_not_stop_reading(shared_dir: Path, fake_bin: Path, tmp_path: Path) -> None:
    _, env = _start(fake_bin, tmp_path, output=str(shared_dir / "nccl" / "4.txt"))

    def boom(p: SweepProgress) -> None:
        raise RuntimeError("ui gone")

    run, _ = run_local(["0"], search_path=str(fake_bin), env=env, on_progress=boom, timeout=30)
    result = run.run()
    assert len(result.rows) == 3 and "ui gone" in result.error


def test_sweep_total_from_options() -> None:
    assert sweep_total(["x", "-b", "8", "-e", "1G", "-f", "2", "-g", "8"]) == 28
    assert sweep_total(["x", "--minbytes", "1M", "--maxbytes", "1G", "--stepfactor", "2"]) == 11
    assert sweep_total(["x"]) == 1  # nccl-tests' default: one 32 MiB size
    assert sweep_total(["x", "-b", "1M", "-e", "4M", "-f", "1", "-i", "1M"]) == 4
    assert sweep_total(["x", "-b", "oops"]) is None


def test_env_names_are_checked() -> None:
    with pytest.raises(ValueError):
        NcclRun(["true"], {"BAD NAME": "1"})


# -- a run that stops printing rows ----------------------------------------------------------------------
def _rows_then_hang(tmp_path: Path) -> tuple[Path, int]:
    """A 4-row sweep whose replay hangs after its last row (before the summary): (file, lines to print)."""
    from tests.actions.test_nccl_cli import synthetic_output

    lines = synthetic_output(3.6, min_bytes=8, max_bytes=64).splitlines()
    last_row = max(i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].isdigit())
    out = tmp_path / "rows.txt"
    out.write_text("\n".join(lines) + "\n")
    return out, last_row + 1


def test_a_silent_run_is_reported_as_stalled_once_and_keeps_running(fake_bin: Path, tmp_path: Path) -> None:
    output, hang_after = _rows_then_hang(tmp_path)
    record, env = _start(fake_bin, tmp_path, output=str(output), hang_after=str(hang_after), delay="0.2")
    stalls: list[tuple[object, bool, float]] = []  # (stall, child still running, when)
    holder: dict[str, NcclRun] = {}

    def stalled(s) -> None:
        stalls.append((s, holder["run"].proc.poll() is None, time.monotonic()))
        if s.rows == 4:  # the silence after the last row: cancel a little later, from another thread
            threading.Timer(0.5, holder["run"].cancel).start()

    run, _ = run_local(["0", "1"], search_path=str(fake_bin), env=env, timeout=30, kill_grace=0.3,
                       stall_after=0.3, on_stall=stalled)
    holder["run"] = run
    result = run.run()
    ended = time.monotonic()
    # a slow start may count as a silence before the first row; the rows then flow at 0.2 s, below
    # the threshold; the silence after row 4 is reported once, and the run is not stopped by it
    after_rows = [(s, alive, when) for s, alive, when in stalls if s.rows > 0]
    assert len(after_rows) == 1, stalls
    stall, alive, when = after_rows[0]
    assert stall.rows == 4 and alive
    # 3× the longest gap between rows (≈0.2 s) beats the 0.3 s minimum
    assert stall.threshold_s > 0.3 and stall.quiet_s >= stall.threshold_s
    assert "looks stalled: no new row for" in stall.message() and "after row 4" in stall.message()
    assert result.cancelled and not result.timed_out and result.stalls == len(stalls)
    assert ended - when >= 0.45  # it ran on after the notice, until the cancel
    assert not any(_running(p) for p in json.loads(record.read_text())["pids"])


def test_average_wording_of_runs_cut_short() -> None:
    from nodeconsole.actions.nccl.parse import parse_text
    from nodeconsole.actions.nccl.run import SweepResult, average_text
    from tests.actions.test_nccl_cli import synthetic_output

    text = synthetic_output(3.6, min_bytes=8, max_bytes=64)
    full = parse_text(text)
    assert average_text(full) == f"avg busbw {full.avg_busbw:.2f} GB/s"
    rows = [line for line in text.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    cut = parse_text("\n".join(rows[:2]) + "\n")
    mean = sum(c.busbw for r in cut.rows for c in (r.out_of_place, r.in_place)) / 4
    assert average_text(cut, "cancelled") == f"avg busbw {mean:.2f} GB/s over the 2 rows that came"
    nothing = parse_text("")
    assert average_text(nothing, "cancelled") == "cancelled before any result"
    assert average_text(nothing) == "no result"
    result = SweepResult(["x"], nothing, -15, cancelled=True)
    assert result.findings()[0].message == "cancelled before any result"
