"""Quick NCCL checks: read all_reduce_perf output, judge it against the topology, lint the NCCL setup
before a run (preflight), and run the check itself with progress, timeout and cancel.

Modules: parse (output reader), expect (reference bandwidths and verdict), preflight (environment,
interfaces, InfiniBand, libraries, NUMA) with libs and acs, commands (argv builders), run (the child
process), torch_allreduce (the PyTorch fallback benchmark).
"""
from nodeconsole.actions.nccl.expect import Expectation, Topology, expected_busbw, verdict
from nodeconsole.actions.nccl.finding import Finding
from nodeconsole.actions.nccl.parse import ParsedOutput, Parser, Row, parse_text
from nodeconsole.actions.nccl.preflight import PreflightReport, preflight
from nodeconsole.actions.nccl.run import NcclRun, SweepProgress, SweepResult, run_local

__all__ = ["Expectation", "Finding", "NcclRun", "ParsedOutput", "Parser", "PreflightReport", "SweepProgress", "Row",
           "SweepResult", "Topology", "expected_busbw", "parse_text", "preflight", "run_local", "verdict"]
