"""A local webhook receiver for ``make demo``: the alerts of the demo's unsettled calls land here.

A stdlib HTTP server on a free loopback port, in a thread of the demo process. It keeps the JSON
bodies it receives (alert texts and structured fields, never prompts) and answers 200.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


class WebhookReceiver:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    parsed = orjson.loads(body)
                except orjson.JSONDecodeError:
                    parsed = {"text": "<not JSON>"}
                with receiver._lock:
                    receiver.bodies.append(parsed)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/hooks/billing"

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.bodies)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
