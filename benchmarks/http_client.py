"""posttrain's shared HTTP client (httpx, pooled) vs the urllib client it replaced, side by side.

    python benchmarks/http_client.py                  # 300 sequential JSON POSTs, 3 interleaved repeats
    python benchmarks/http_client.py --requests 1000 --repeats 5

Both clients POST the same JSON bodies to one local HTTP/1.1 keep-alive server on 127.0.0.1 (a
reward-service-shaped echo: {"rewards": [...]}, with TCP_NODELAY like production servers) in the
same process; the best time of each counts
(these machines are shared and noisy). The proof that the comparison is fair: both get identical
answers, and the server counts the TCP connections each client opened (urllib: one per request;
the shared client: one in all). It runs twice: plain HTTP, and HTTPS with a throwaway self-signed
certificate (made with the openssl command; both clients trust it through SSL_CERT_FILE), because
real APIs are HTTPS and a TLS handshake per request is what a new connection costs most. Loopback
has no network latency, so a remote server adds at least one round trip per new connection on top.
Prints a table and writes JSON to benchmarks/results/http_client.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from posttrain.net.http import send  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "http_client.json"


class Server:
    def __init__(self, tls_dir: Path | None = None):
        self.ports: set[int] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                # Like real servers (uvicorn, nginx): without TCP_NODELAY, http.server's separate
                # header and body writes meet the client's delayed ACK and every keep-alive answer
                # stalls ~40 ms (Nagle's algorithm).
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self):
                server.ports.add(self.client_address[1])
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                data = json.dumps({"rewards": [float(len(c) % 3) for c in body["completions"]]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        scheme = "http"
        if tls_dir is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls_dir / "cert.pem", tls_dir / "key.pem")
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}/score"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def with_urllib(url: str, body: dict) -> bytes:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def with_shared_client(url: str, body: dict) -> bytes:
    return send("POST", url, json=body, timeout=30).content


def run(client, server: Server, bodies: list[dict]) -> tuple[float, int, list[bytes]]:
    server.ports.clear()
    start = time.perf_counter()
    answers = [client(server.url, body) for body in bodies]
    return time.perf_counter() - start, len(server.ports), answers


def self_signed(folder: Path) -> Path:
    """A certificate for 127.0.0.1 and its key in ``folder``, via the openssl command."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tls_dir = self_signed(Path(tmp))
        os.environ["SSL_CERT_FILE"] = str(tls_dir / "cert.pem")  # read by urllib's and httpx's default contexts
        results = {"http": measure(Server(), args), "https": measure(Server(tls_dir), args)}
    print(f"{args.requests} sequential POSTs to 127.0.0.1, best of {args.repeats}\n")
    print("| scheme | client | total s | ms/request | TCP connections | identical answers |\n|---|---|---|---|---|---|")
    for scheme, result in results.items():
        for r in result["rows"]:
            print(f"| {scheme} | {r['client']} | {r['seconds']:.3f} | {r['ms_per_request']:.3f} | {r['connections']} | "
                  f"{result['identical_answers']} |")
    print("\n" + ", ".join(f"{scheme}: shared client {r['speedup']:.2f}x urllib's speed" for scheme, r in results.items()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"requests": args.requests, "repeats": args.repeats, **results,
                                   "python": platform.python_version(), "machine": platform.processor() or platform.machine()},
                                  indent=1) + "\n")


def measure(server: Server, args) -> dict:
    bodies = [{"prompts": [f"p{i}"], "completions": ["x" * (i % 7)], "columns": {"answer": [str(i)]}}
              for i in range(args.requests)]
    clients = {"urllib, a connection per request": with_urllib, "posttrain.net (httpx, shared pool)": with_shared_client}
    best: dict[str, tuple[float, int]] = {}
    answers: dict[str, list[bytes]] = {}
    for _ in range(args.repeats):
        for name, client in clients.items():
            seconds, connections, got = run(client, server, bodies)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, connections)
            answers[name] = [json.loads(a) for a in got]
    same = len({json.dumps(a) for a in answers.values()}) == 1
    rows = [{"client": name, "seconds": round(sec, 4), "ms_per_request": round(1000 * sec / args.requests, 3),
             "connections": c} for name, (sec, c) in best.items()]
    server.httpd.shutdown()
    return {"identical_answers": same, "rows": rows, "speedup": round(rows[0]["seconds"] / rows[1]["seconds"], 3)}


if __name__ == "__main__":
    main()
