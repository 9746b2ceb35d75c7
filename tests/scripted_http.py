"""A real HTTP/1.1 server on 127.0.0.1 whose answers a test scripts, per path.

    server = ScriptedServer({"/a.png": png_bytes})            # GET /a.png -> 200 with those bytes
    server.script["/a.png"] = [("status", 503, {}), ("status", 503, {})]   # then two failures first
    ...
    server.close()

Script entries, used in order for each request to their path (when a path's list is empty, its
file from `files` is served, else 404):
  ("status", code, headers)   an error answer with a small JSON body
  ("truncate", body)          Content-Length of the whole body, half of it sent, connection closed
  "hang"                      accept the request and never answer (until close())
  ("body", bytes, headers)    a 200 with that body

Keep-alive is on (HTTP/1.1), so tests can check that a client reuses its connection:
`server.requests` records (method, path, client port, headers, body) for each request.
Importable from any test folder (tests/ is on sys.path; see tests/conftest.py).
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedServer:
    def __init__(self, files: dict[str, bytes] | None = None, handler=None):
        self.files = dict(files or {})
        self.script: dict[str, list] = {}
        self.requests: list[dict] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.handler = handler  # optional fn(method, path, headers, body) -> (code, headers, bytes) | None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                # Like real servers (uvicorn, nginx): without TCP_NODELAY, http.server's separate
                # header and body writes meet the client's delayed ACK and every keep-alive answer
                # stalls ~40 ms (Nagle's algorithm).
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def count(self, path: str) -> int:
        return sum(r["path"] == path for r in self.requests)

    def _handle(self, h: BaseHTTPRequestHandler, method: str):
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append({"method": method, "path": h.path, "port": h.client_address[1],
                                  "headers": {k.lower(): v for k, v in h.headers.items()}, "body": body})
            queue = self.script.get(h.path) or []
            action = queue.pop(0) if queue else None
        if action == "hang":
            self.release.wait(30)
            h.close_connection = True
            return
        if action is None and self.handler is not None:
            answer = self.handler(method, h.path, h.headers, body)
            if answer is not None:
                return self._send(h, *answer)
        if action is None:
            if h.path in self.files:
                return self._send(h, 200, {}, self.files[h.path])
            return self._send(h, 404, {}, json.dumps({"error": {"message": f"no file {h.path}"}}).encode())
        kind = action[0]
        if kind == "status":
            _, code, headers = action
            return self._send(h, code, headers, json.dumps({"error": {"message": f"scripted {code}"}}).encode())
        if kind == "body":
            _, data, headers = action
            return self._send(h, 200, headers, data)
        if kind == "truncate":
            data = action[1]
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        raise ValueError(f"unknown scripted action {action!r}")

    @staticmethod
    def _send(h, code: int, headers: dict, data: bytes):
        h.send_response(code)
        h.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)
