"""The shipped alerting rules in a real Prometheus (Debian's package) scraping a live demo exporter: events
injected into the demo's kernel log (`demo inject`) on GPUs that never had one put an alert naming that
GPU into pending or firing within 60 s — Xid 79, Xid 48 and a fatal AER error; and `fleet` reads the same
Prometheus and lists the AER GPU unhealthy with its reason."""
from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from nodeconsole.console.cli import main
from tests.console.test_alert_rules import RULES
from tests.console.test_fleet import free_port, prometheus_binary

WITHIN_S = 60
# (the injected event, its GPU, the alert that must name the GPU)
INJECTIONS = [(("xid", "0000:18:00.0", "79"), "NodeconsoleGpuFellOffTheBus"),
              (("xid", "0000:3b:00.0", "48"), "NodeconsoleGpuFatalXid"),
              (("aer", "0000:9a:00.0", "fatal"), "NodeconsoleGpuUncorrectableAer")]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def query(url: str, q: str) -> list[dict]:
    return get(f"{url}/api/v1/query?query={urllib.parse.quote(q)}")["data"]["result"]


def wait_for(what: str, check, seconds: float) -> float:
    """Poll `check` until it is true; the seconds it took (fails after `seconds`)."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < seconds, f"{what}: not within {seconds:g} s"
        time.sleep(0.2)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A demo exporter sampling every 0.5 s, scraped and its rules evaluated by Prometheus every second."""
    from nodeconsole.console.collector import Collector
    from nodeconsole.console.demo.state import ensure_demo
    from nodeconsole.console.exporter import Sampler, registry_for
    from nodeconsole.console.metrics_http import serve_metrics
    from nodeconsole.console.seams import demo_host

    binary = prometheus_binary()
    base = tmp_path_factory.mktemp("alerts")
    ensure_demo(base / "demo")
    collector = Collector(demo_host(base / "demo"))
    sampler = Sampler(collector, interval=0.5, doctor=False)
    sampler.take()
    sampler.start()
    server, _t = serve_metrics("127.0.0.1", 0, registry_for(lambda: sampler.latest))
    config = base / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                      f"rule_files: ['{RULES}']\n"
                      "scrape_configs:\n  - job_name: nodeconsole\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{server.server_port}']\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(base / "prometheus.log", "wb")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={base / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    try:
        def scraped_twice() -> bool:  # every GPU's counters at 0, seen in two scrapes
            assert proc.poll() is None, (base / "prometheus.log").read_text()[-2000:]
            try:
                got = query(url, "count_over_time(nodeconsole_gpu_fallen_off_bus_events_total[1m]) >= 2")
                return len(got) == len(sampler.latest.snap.gpus)
            except OSError:
                return False

        wait_for("Prometheus scraping the exporter", scraped_twice, 30)
        yield url, base / "demo"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        sampler.stop()
        server.shutdown()
        server.server_close()
        collector.close()


def alerts_on(url: str, address: str) -> dict[str, str]:
    """The alerts naming `address`: name → state (pending / firing)."""
    return {a["labels"]["alertname"]: a["state"] for a in get(f"{url}/api/v1/alerts")["data"]["alerts"]
            if a["labels"].get("address") == address}


def test_injected_events_raise_their_alerts(live, monkeypatch, capsys):
    url, demo = live
    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(demo))
    for event, _alert in INJECTIONS:
        assert alerts_on(url, event[1]) == {}  # GPUs that never had an event
    injected = []
    for event, _alert in INJECTIONS:
        assert main(["demo", "inject", *event]) == 0
        injected.append(time.monotonic())
    capsys.readouterr()
    took = {}
    for (event, alert), at in zip(INJECTIONS, injected, strict=True):
        left = WITHIN_S - (time.monotonic() - at)
        wait_for(f"{alert} on {event[1]}", lambda e=event, a=alert: a in alerts_on(url, e[1]), left)
        took[alert] = time.monotonic() - at
        assert alerts_on(url, event[1])[alert] in ("pending", "firing")
    with capsys.disabled():  # the figure, for a run with -s
        print(f"\nalert latency after injection (s): {took}")
    assert "NodeconsoleGpuFatalXid" in alerts_on(url, "0000:18:00.0")  # Xid 79 is a fatal Xid too
    # the health verdict's alert (for: 1m) is pending on the AER GPU
    wait_for("NodeconsoleGpuUnhealthy", lambda: "NodeconsoleGpuUnhealthy" in alerts_on(url, "0000:9a:00.0"), 10)
    # the exporter's AER series of that GPU, as Prometheus stored it
    aer = query(url, 'nodeconsole_gpu_aer_events_total{address="0000:9a:00.0",severity="fatal"}')
    assert [s["value"][1] for s in aer] == ["1"]
    # fleet, reading the same Prometheus, lists the AER GPU unhealthy with the AER reason
    def aer_gpu() -> list[dict]:
        assert main(["fleet", "--prometheus", url, "--json"]) == 0
        host = json.loads(capsys.readouterr().out)["hosts"][0]
        return [g for g in host["unhealthy_gpus"] if g["address"] == "0000:9a:00.0"]

    wait_for("fleet listing 0000:9a:00.0 unhealthy", lambda: bool(aer_gpu()), 10)
    reasons = aer_gpu()[0]["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith("uncorrectable AER error (fatal) at "), reasons
