"""`nodeconsole fleet` against a hostile or broken Prometheus: a local HTTP server on 127.0.0.1 (random
port) that drips its answer, answers too much, answers nonsense, or labels its hosts with brackets,
newlines and ssh options. Each case ends in one line (exit 1 for a server that is too slow, 2 for an
answer that is not a Prometheus answer) or in a report whose every label is shown as data."""
from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeconsole.console.cli import main
from nodeconsole.console.fleet import AnswerError, fleet_report, render_text, ssh_host
from nodeconsole.console.fleet_answer import MAX_ANSWER, read_answer

Handler = Callable[[BaseHTTPRequestHandler, str], None]  # (request, the PromQL query) → writes the answer


def vector(series: list) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}}).encode()


def send(req: BaseHTTPRequestHandler, body: bytes, length: bool = True) -> None:
    req.send_response(200)
    req.send_header("Content-Type", "application/json")
    if length:
        req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)


@pytest.fixture
def prom():
    """A stub Prometheus: `set(handler)` decides every answer; yields (url, set, stop event)."""
    state: dict[str, Handler] = {}
    stop = threading.Event()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
            try:
                state["handler"](self, query)
            except OSError:  # the client gave up: that is what the deadline is for
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", lambda h: state.__setitem__("handler", h), stop
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def run_fleet(url: str, capsys, *extra: str) -> tuple[int, str, str]:
    rc = main(["fleet", "--prometheus", url, *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- the deadline: per request and for the whole report ---------------------------------------------

@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_dripping_server_is_cut_at_the_deadline(prom, capsys, where):
    """One byte every 0.3 s, for up to 30 s: each read is quick, so a per-read timeout never fires;
    the report's deadline (1 s) does."""
    url, set_handler, stop = prom

    def drip(req, query):
        if where == "body":
            req.send_response(200)
            req.end_headers()
            req.wfile.flush()
            payload = b'{"status": "success"' + b" " * 1000
        else:
            payload = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 1000
        for i in range(100):
            if stop.wait(0.3):
                return
            req.wfile.write(payload[i:i + 1])
            req.wfile.flush()

    set_handler(drip)
    t0 = time.monotonic()
    rc, _out, err = run_fleet(url, capsys, "--timeout", "1")
    took = time.monotonic() - t0
    assert rc == 1 and "did not answer within 1 s" in one_line(err)
    assert took < 15, took  # the deadline plus a generous margin; the drip alone lasts 30 s


def test_the_deadline_covers_the_whole_report(prom, capsys):
    """Twelve queries, each answered after 0.4 s (under the per-query time), exceed a 2 s report."""
    url, set_handler, stop = prom

    def slow(req, query):
        stop.wait(0.4)
        send(req, vector([]))

    set_handler(slow)
    t0 = time.monotonic()
    rc, _out, err = run_fleet(url, capsys, "--timeout", "2")
    assert rc == 1 and "did not answer within 2 s" in one_line(err)
    assert time.monotonic() - t0 < 15


# --- answers capped in size ------------------------------------------------------------------------

@pytest.mark.parametrize("declared", [True, False])
def test_an_answer_over_the_cap_is_refused(prom, capsys, declared):
    url, set_handler, _stop = prom
    pad = b" " * (MAX_ANSWER + 10)
    set_handler(lambda req, q: send(req, vector([])[:-1] + pad + b"}", length=declared))
    rc, _out, err = run_fleet(url, capsys)
    assert rc == 2 and "larger than 16 MiB" in one_line(err)


# --- malformed answers ------------------------------------------------------------------------------

MALFORMED = {
    "a list": b"[]",
    "not JSON": b"<html>hello</html>",
    "deep nesting": b"[" * 200_000 + b"]" * 200_000,
    "deep nesting in a label": vector([])[:-2] + b'{"metric": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_002 + b"]}}",
    "a list data": b'{"status": "success", "data": []}',
    "a non-dict result": vector([1]),
    "a list metric": vector([{"metric": ["instance"], "value": [1, "1"]}]),
    "a missing metric": vector([{"value": [1, "1"]}]),
    "a number label": vector([{"metric": {"instance": 3}, "value": [1, "1"]}]),
    "a missing value": vector([{"metric": {"instance": "a:1"}}]),
    "a scalar": b'{"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}',
    "an over-long integer": b'{"status": "success", "x": ' + b"9" * 10_000 + b"}",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_answer_is_one_line_exit_2(prom, capsys, name):
    url, set_handler, _stop = prom
    set_handler(lambda req, q: send(req, MALFORMED[name]))
    rc, _out, err = run_fleet(url, capsys)
    assert rc == 2, err
    assert one_line(err).startswith("nodeconsole fleet: ")


def test_a_failed_query_is_one_line_with_the_error_shown_as_data(prom, capsys):
    url, set_handler, _stop = prom
    set_handler(lambda req, q: send(req, json.dumps({"status": "error", "error": "bad\nquery\x1b[2J"}).encode()))
    rc, _out, err = run_fleet(url, capsys)
    assert rc == 1 and "bad\\x0aquery\\x1b[2J" in one_line(err)


# --- labels are data -------------------------------------------------------------------------------

HOSTILE = ["gpu[01]:9842", "evil\nnode:9842", "-oproxycommand=touch pwned;x:9842", "[::1]:9842",
           "node-plain", "fe80::1", "it's:9842"]


def host_info(instances: list[str]) -> Handler:
    def handler(req, query):
        series = [{"metric": {"instance": i, "hostname": f"h\x1b]0;{n}\x07", "driver": "550.90.07"},
                   "value": [1, "1"]} for n, i in enumerate(instances)]
        send(req, vector(series if query == "nodeconsole_host_info" else []))
    return handler


def test_labels_of_any_shape_are_shown_as_data_and_quoted_for_ssh(prom, capsys):
    url, set_handler, _stop = prom
    set_handler(host_info(HOSTILE))
    rc, out, err = run_fleet(url, capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert "gpu[01]:9842 (h\\x1b]0;0\\x07): GPUs no GPUs" in lines
    assert "  console: ssh -t 'gpu[01]' nodeconsole" in lines
    assert "evil\\x0anode:9842 (h\\x1b]0;1\\x07): GPUs no GPUs" in lines  # one line, the newline shown
    assert not any(line.startswith("node:9842") for line in lines)
    assert "  console: ssh -t ::1 nodeconsole" in lines and "  console: ssh -t fe80::1 nodeconsole" in lines
    assert "  console: ssh -t node-plain nodeconsole" in lines
    assert "  console: ssh -t 'it'\"'\"'s' nodeconsole" in lines
    assert not [line for line in lines if "ssh" in line and ("-o" in line or "evil" in line)]
    assert lines.count("  console: none (the instance names no ssh host)") == 2
    rc, out, _err = run_fleet(url, capsys, "--json")
    hosts = {h["instance"]: h for h in json.loads(out)["hosts"]}
    assert set(hosts) == set(HOSTILE)  # the JSON keeps every value as it was
    assert hosts["-oproxycommand=touch pwned;x:9842"]["console"] == ""


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_ssh_host_never_gives_an_option_or_a_control_character(instance):
    host = ssh_host(instance)
    assert host == "" or (not host.startswith("-") and host.isprintable() and not any(c.isspace() for c in host))
    assert host in instance


def test_every_report_line_is_one_visible_line():
    """A label with a newline or an escape, wherever it is (hostname, VM, check, versions), stays inside
    its own line of the report."""
    bad = "x\ny\x1b[2J\u202e"
    answers = {"nodeconsole_host_info": [{"metric": {"instance": bad, "hostname": bad, "driver": bad, "kernel": bad,
                                                     "libvirt": bad}, "value": [0, "1"]}],
               "nodeconsole_vm_numa_aligned == 0": [{"metric": {"instance": bad, "vm": bad}, "value": [0, "0"]}],
               "nodeconsole_doctor_check == 1": [{"metric": {"instance": bad, "check": bad, "status": "fail"},
                                                  "value": [0, "1"]}]}
    text = "\n".join(render_text(fleet_report(lambda q: answers.get(q, []))))
    assert "\x1b" not in text and "\u202e" not in text and "\ny" not in text
    assert len(text.splitlines()) == 6  # header, blank, host, VMs, checks, console


@given(pad=st.sampled_from([" ", "\n", "\t", "\r", "\\u0020", "\x00"]), n=st.integers(0, 200_000),
       where=st.sampled_from(["ws", "label"]))
@settings(max_examples=20, deadline=None)
def test_read_answer_with_long_paddings(pad, n, where):
    """The answer reader gives the same series whatever padding an answer carries (the time it takes
    is in benchmarks/bench_fleet_answer.py)."""
    if where == "ws":
        pad = pad if pad.isspace() else " "
        body = ('{"status":"success",' + pad * n + '"data":{"resultType":"vector","result":[{"metric":'
                '{"instance":"a:1"},"value":[1,"2"]}]}}').encode()
        assert read_answer(body, "q") == [{"metric": {"instance": "a:1"}, "value": [1, "2"]}]
    else:
        body = vector([{"metric": {"instance": "a" + pad * n}, "value": [1, "2"]}])
        got = read_answer(body, "q")
        assert got[0]["metric"]["instance"] == "a" + pad * n


def test_read_answer_keeps_only_the_labels_the_report_reads():
    body = vector([{"metric": {"instance": "a:1", "__name__": "x", "job": "j", "pad": "p" * 1000}, "value": [1, "2"]}])
    assert read_answer(body, "q") == [{"metric": {"instance": "a:1"}, "value": [1, "2"]}]
    with pytest.raises(AnswerError):
        read_answer(b" " * (MAX_ANSWER + 1), "q")
