"""Asking Prometheus over HTTP within one deadline.

`http_fetch(base, timeout)` returns a function that runs instant queries; every query it runs shares
one deadline, `timeout` seconds from the moment `http_fetch` was called. Each socket read (the
connection, TLS, the status line, the headers, every chunk of the body) waits at most for the time
left, so a server sending one byte every few seconds is cut at the deadline, not after `timeout`
seconds per read. The fleet report builds a new fetch for each report: the deadline is per report.
An answer larger than MAX_ANSWER bytes is refused before it is read whole.
"""
from __future__ import annotations

import functools
import http.client
import json
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from nodeconsole.console.fleet_answer import MAX_ANSWER, AnswerError, FleetError, Series, read_answer
from nodeconsole.console.hosttext import clip, visible


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; TimeoutError once the deadline has passed."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"deadline of {self.seconds:g} s passed")
        return left


class _DeadlineSocket(socket.socket):
    deadline: Deadline | None = None

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if self.deadline is not None:
            self.settimeout(self.deadline.left())
        return super().recv_into(buffer, nbytes, flags)


class _DeadlineSSLSocket(ssl.SSLSocket):
    deadline: Deadline | None = None

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        if self.deadline is not None:
            self.settimeout(self.deadline.left())
        return super().recv_into(buffer, nbytes, flags)


def _connect(deadline: Deadline, address: tuple[str, int], timeout: Any = None, source: Any = None) -> socket.socket:
    plain = socket.create_connection(address, deadline.left(), source)
    sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.deadline = deadline
    sock.settimeout(deadline.left())
    return sock


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: Deadline, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._create_connection = functools.partial(_connect, deadline)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, deadline: Deadline, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._deadline = deadline
        self._create_connection = functools.partial(_connect, deadline)

    def connect(self) -> None:
        super().connect()
        if isinstance(self.sock, _DeadlineSSLSocket):
            self.sock.deadline = self._deadline


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPConnection, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        ctx = ssl.create_default_context()
        ctx.sslsocket_class = _DeadlineSSLSocket
        super().__init__(context=ctx)
        self._ctx, self._deadline = ctx, deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self._deadline),
                            req, context=self._ctx)


def _http_error(base: str, e: urllib.error.HTTPError) -> FleetError:
    detail = ""
    try:
        detail = json.loads(e.read(65536)).get("error", "")
    except (ValueError, OSError, AttributeError, RecursionError, http.client.HTTPException):
        pass
    return FleetError(f"Prometheus at {base} answered HTTP {e.code}"
                      + (f": {clip(visible(detail), 200)}" if detail else ""))


def _read_body(resp: Any, base: str, query: str) -> bytes:
    length = resp.headers.get("Content-Length", "")
    if length.strip().isdigit() and int(length) > MAX_ANSWER:
        raise AnswerError(f"the answer to {query!r} is larger than {MAX_ANSWER // (1024 * 1024)} MiB")
    return resp.read(MAX_ANSWER + 1)  # one byte more than allowed: read_answer refuses it


def http_fetch(base: str, timeout: float = 10.0) -> Callable[[str], list[Series]]:
    """A function running one instant query against Prometheus at `base`; all its queries share a
    deadline of `timeout` seconds from now."""
    deadline = Deadline(timeout)
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline))
    late = FleetError(f"Prometheus at {base} did not answer within {timeout:g} s")

    def fetch(query: str) -> list[Series]:
        url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            with opener.open(url, timeout=deadline.left()) as resp:
                body = _read_body(resp, base, query)
        except urllib.error.HTTPError as e:
            raise _http_error(base, e) from None
        except TimeoutError:
            raise late from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise late from None
            why = getattr(e.reason, "strerror", None) or e.reason
            raise FleetError(f"cannot reach Prometheus at {base}: {clip(visible(why), 200)}") from None
        except OSError as e:
            raise FleetError(f"cannot reach Prometheus at {base}: {e.strerror or e}") from None
        except http.client.HTTPException as e:
            raise AnswerError(f"{base} did not answer in HTTP ({type(e).__name__})") from None
        return read_answer(body, query)
    return fetch
