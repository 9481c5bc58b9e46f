"""Real HTTP receivers for the webhook (a stdlib server in a thread on a free port) and real Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest


class Receiver:
    """Records every POST; answers ``mode``: ``ok`` (200), ``fail`` (500) or ``slow`` (sleeps
    past the client's timeout, then 200)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.in_flight = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                mode = receiver.mode
                with receiver.lock:
                    receiver.in_flight += 1
                if mode == "slow":
                    time.sleep(1.5)
                with receiver.lock:
                    receiver.paths.append(self.path)
                    if mode != "fail":
                        receiver.bodies.append(orjson.loads(body))
                    receiver.in_flight -= 1
                    receiver.idle.notify_all()
                try:
                    self.send_response(500 if mode == "fail" else 200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: that was the point

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until no request is being answered (a ``slow`` answer goes on after the client
        gave up on it, and records its body when it ends)."""
        with self.idle:
            if not self.idle.wait_for(lambda: self.in_flight == 0, timeout):
                raise TimeoutError(f"{self.in_flight} requests still being answered")

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/services/T000/B000/s3cr3t-t0ken?auth=qs-t0ken"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()
