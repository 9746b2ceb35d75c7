"""A tiny real HTTP proxy on 127.0.0.1 that injects faults in front of the S3 test server.

Every request is read in full, shown to ``proxy.rule(request)``, and then, by the rule's answer:

- ``None``           forwarded to the upstream server and its answer relayed;
- ``"drop"``         the connection is closed without an answer (a network failure to the client);
- ``"fake_ok"``      answered ``200`` with an ETag without forwarding (a PUT the server "lost");
- an ``int``         answered with that HTTP status and an S3-style XML error body;
- ``("delay", s)``   forwarded after sleeping ``s`` seconds (a slow network);
- ``("gate", event)`` forwarded once ``event`` (a threading.Event) is set (at most 60 s later), so a
                     test can hold an upload until its training run reaches a given step.

The rule runs in the proxy's handler threads, outside any lock: a rule with state locks it itself.

``listen=False`` binds the port but does not listen yet: connections are refused until `start()`,
which is how a test simulates an endpoint that comes up while the client is retrying.
"""

from __future__ import annotations

import http.client
import socketserver
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
              "content-length"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str          # with the query string
    headers: dict
    body: bytes

    @property
    def key_path(self) -> str:
        """The path without the query string: ``/bucket/key``."""
        return self.path.split("?", 1)[0]


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], *, listen: bool = True):
        self.upstream = upstream
        self.rule: Callable[[Request], object] = lambda request: None
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.server = _Server(("127.0.0.1", 0), _handler(self), bind_and_activate=False)
        self.server.server_bind()
        self.port = self.server.server_address[1]
        if listen:
            self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server.server_activate()
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join()
        self.server.server_close()

    def record(self, request: Request) -> object:
        with self._lock:
            self.requests.append(request)
        return self.rule(request)

    def count(self, method: str | None = None, contains: str = "") -> int:
        with self._lock:
            return sum(1 for r in self.requests if (method is None or r.method == method) and contains in r.path)

    def fail_first(self, k: int, action: object = 503, method: str | None = None) -> None:
        """Answer the next ``k`` requests (of ``method``, if given) with ``action``, then forward."""
        left = [k]
        lock = threading.Lock()

        def rule(request: Request):
            with lock:
                if left[0] > 0 and method in (None, request.method):
                    left[0] -= 1
                    return action
            return None

        self.rule = rule


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (socket.getfqdn), which can take a while
        # on machines without DNS; 127.0.0.1 needs no name.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def _handler(proxy: FaultProxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep test output quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _handle(self) -> None:
            request = Request(self.command, self.path, dict(self.headers.items()), self._body())
            action = proxy.record(request)
            if isinstance(action, tuple) and action[0] == "delay":
                time.sleep(action[1])
                action = None
            if isinstance(action, tuple) and action[0] == "gate":
                action[1].wait(60)
                action = None
            if action == "drop":
                self.close_connection = True
                return
            if action == "fake_ok":
                self._reply(200, {"ETag": '"00000000000000000000000000000000"'}, b"")
                return
            if isinstance(action, int):
                body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>Injected{action}</Code>"
                        f"<Message>fault injected by the test proxy</Message></Error>").encode()
                self._reply(action, {"Content-Type": "application/xml"}, body)
                return
            self._forward(request)

        def _forward(self, request: Request) -> None:
            conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
            try:
                headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
                if request.body or request.method in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(request.body))
                conn.request(request.method, request.path, body=request.body or None, headers=headers)
                response = conn.getresponse()
                data = response.read()
                out = {k: v for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP}
                if request.method == "HEAD":
                    out["Content-Length"] = response.getheader("Content-Length", "0")
                    self._reply(response.status, out, b"", set_length=False)
                else:
                    self._reply(response.status, out, data)
            finally:
                conn.close()

        def _reply(self, status: int, headers: dict, body: bytes, *, set_length: bool = True) -> None:
            self.send_response_only(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if set_length:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    return Handler
