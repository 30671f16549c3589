"""The shipped alerting rules (deploy/prometheus/nodeconsole-alerts.yml): promtool's syntax check, and its
unit tests (nodeconsole-alerts.test.yml beside them), in which every alert has a case that must fire and
one that must not. The rules of before, keyed on a per-code Xid counter that appears at 1 with its first
event, fail those unit tests."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.console.test_exporter import promtool

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/nodeconsole-alerts.yml"
UNIT_TESTS = REPO / "deploy/prometheus/nodeconsole-alerts.test.yml"


def alerts() -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)\s*$", RULES.read_text(), re.M)


def run_unit_tests(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), "test", "rules", UNIT_TESTS.name], cwd=folder, capture_output=True,
                          text=True, timeout=60)


def test_rules_pass_promtool_check():
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout
    assert {"NodeconsoleGpuFatalXid", "NodeconsoleGpuFellOffTheBus", "NodeconsoleGpuUncorrectableAer",
            "NodeconsoleGpuUnhealthy"} <= set(alerts())


def test_promtool_unit_tests_pass():
    proc = run_unit_tests(UNIT_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    text = UNIT_TESTS.read_text()
    cases = re.findall(r"alertname: (\w+)\s*\n\s*exp_alerts:[ \t]*(\[\])?[ \t]*\n", text)
    fires = {name for name, empty in cases if not empty}
    quiet = {name for name, empty in cases if empty}
    assert set(alerts()) <= fires, sorted(set(alerts()) - fires)
    assert set(alerts()) <= quiet, sorted(set(alerts()) - quiet)
    assert fires | quiet <= set(alerts())  # no case of an alert that is not shipped


OLD_EXPRS = {  # the rules as they were: a per-code counter that is born at 1 with its first event
    "NodeconsoleGpuFatalXid": 'increase(nodeconsole_gpu_xid_events_total{severity="fatal"}[10m]) > 0',
    "NodeconsoleGpuFellOffTheBus": 'increase(nodeconsole_gpu_xid_events_total{xid="79"}[10m]) > 0',
}


def test_the_old_per_code_rules_fail_the_unit_tests(tmp_path):
    """Proof that the unit tests can fail: with the old expressions, the first-event cases do not fire."""
    text = RULES.read_text()
    for name, expr in OLD_EXPRS.items():
        text, n = re.subn(rf"(- alert: {name}\n(?:\s+#.*\n)*\s+expr: ).*\n", rf"\g<1>{expr}\n", text)
        assert n == 1, name
    (tmp_path / RULES.name).write_text(text)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    proc = run_unit_tests(tmp_path)
    assert proc.returncode != 0
    for name in OLD_EXPRS:
        assert f"alertname: {name}" in proc.stdout + proc.stderr


def test_every_dashboard_query_parses(tmp_path):
    """The Grafana dashboard's queries are PromQL that Prometheus accepts (checked as recording rules)."""
    import json

    dash = json.loads((REPO / "deploy/grafana/nodeconsole-dashboard.json").read_text())
    exprs = [t["expr"].replace("$instance", ".*") for p in dash["panels"] for t in p["targets"]]
    rules = tmp_path / "dashboard.yml"
    rules.write_text("groups:\n  - name: dashboard\n    rules:\n"
                     + "".join(f"      - record: q{i}\n        expr: {json.dumps(e)}\n" for i, e in enumerate(exprs)))
    proc = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and f"SUCCESS: {len(exprs)} rules found" in proc.stdout, proc.stdout + proc.stderr
