"""A local OpenAI-compatible upstream that replays recorded bodies on ``POST …/v1/chat/completions``.

Gateways under test (the LiteLLM proxy, an ASGI gateway built on the middleware) sit in front of it,
so an end-to-end test needs no network and knows exactly what the upstream sent.

It serves the tests (tests/gateway, with their own scenarios over tests/fixtures) and ``make
demo-gateway`` (``DEMO_SCENARIOS``, recorded in worker/data/examples). API::

    upstream = Upstream.start(scenarios, library=None, port=0)   # a real HTTP server on 127.0.0.1
    upstream.base_url                        # "http://127.0.0.1:P/v1"  (the OpenAI ``base_url``)
    upstream.scenario_url("tool_calls")      # "http://127.0.0.1:P/scenario/tool_calls/v1"
    upstream.sent                            # every reply, in order: Sent(scenario, stream, frames, body)
    upstream.stop()

A request picks its recorded scenario by, in this order: the ``X-Upstream-Scenario`` header, the
path prefix ``/scenario/<name>/`` (for gateways whose ``api_base`` is all one can configure, such as
a LiteLLM ``config.yaml``), else ``clean``. A scenario is a name of the server's ``scenarios`` (a
``Scenario``: the recording's path, and whether the connection drops or pauses), or ``<dir>/<name>``
naming ``<library>/<dir>/<name>.json`` when a ``library`` directory is given (the tests give their
provider fixtures). An unknown scenario is a 404 with an OpenAI error object.

A recording is an SSE body (``.sse``), a JSON document with ``frames`` (chunk objects and
``"[DONE]"``) or ``status`` and ``body``, or a bare ``chat.completion`` body; each names where its
shape comes from (the fixtures' ``source``; worker/data/examples are the worker's own examples).

Streamed replies follow OpenAI's ``stream_options.include_usage``: asked for, the frames go out as
recorded; not asked for, usage-only chunks (``choices: []``) are left out and ``usage`` is taken off
the other chunks, as OpenAI does. A non-streamed request to a stream-recorded scenario gets the
frames folded into one ``chat.completion`` body (content, refusal, tool calls by index, the legacy
function call, finish reasons, the last usage seen); a streamed request to a body-recorded scenario
gets the body unfolded into OpenAI's chunk sequence (role and content, the finish chunk, the usage
chunk, ``[DONE]``). So a streamed call and its non-streamed twin carry the same usage.

``dropped`` sends its bytes with ``Transfer-Encoding: chunked`` and closes the socket without the
terminating chunk, so the client sees a broken body, never a clean end.

Prompts are not kept: ``sent`` records what the upstream replied, never what it was asked.

The other endpoints (``…/completions``, ``…/responses``, ``…/embeddings``, ``…/messages``,
``…/images/generations``) replay
an endpoint recording: a JSON document with ``endpoint``, ``events`` (its stream: chunk objects,
``"[DONE]"``, or ``{"event": name, "data": object}`` for a named SSE event) and ``body`` (its
non-streamed answer), picked by scenario as chat's are. Legacy completions' usage chunk follows ``include_usage`` as chat's does.
Without a scenario naming such a recording, ``POST …/embeddings`` and ``POST …/moderations`` get one fixed answer each,
for the gateways' route tests, and ``GET …/models`` a list naming ``gpt-4o-mini``; none of them is
recorded in ``sent``. Any other path is a 404.

On its own, ``python -m devtools.recorded_upstream --port N`` serves ``DEMO_SCENARIOS`` in the
foreground (one line says where) until Ctrl-C or SIGTERM: point any OpenAI client or gateway at it.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "worker" / "data" / "examples"
SCENARIO_HEADER = "X-Upstream-Scenario"


@dataclass(frozen=True)
class Scenario:
    """A recording and how it is served: ``drop_after`` frames then the socket closes (a stream
    cut mid-flight; a body cut in half), or ``pause`` = (after this many frames, seconds of
    silence) so that a client can go away."""

    path: Path
    drop_after: int | None = None
    pause: tuple[int, float] | None = None


# The demo's calls (``make demo-gateway``), recorded in worker/data/examples.
DEMO_SCENARIOS: dict[str, Scenario] = {
    "clean": Scenario(EXAMPLES / "settled.sse"),
    "clean_body": Scenario(EXAMPLES / "non_streamed.json"),
    "tool_calls_n2": Scenario(EXAMPLES / "tool_calls_n2.sse"),
    "error_finish": Scenario(EXAMPLES / "error_finish.sse"),
    "dropped": Scenario(EXAMPLES / "settled.sse", drop_after=1),
}

Frame = dict[str, Any] | str  # a chunk object, or "[DONE]"


@dataclass(frozen=True)
class Recording:
    """One recorded call: its stream frames, or its non-streamed status and body."""

    frames: list[Frame] | None
    status: int
    body: dict[str, Any] | None
    endpoint: str | None = None  # an endpoint recording's (``ENDPOINT_PATHS``); None: chat


@dataclass(frozen=True)
class Sent:
    """What the upstream replied to one request (frames for a stream, body otherwise)."""

    scenario: str
    stream: bool
    include_usage: bool
    frames: list[Frame] | None
    status: int
    body: dict[str, Any] | None
    dropped: bool


def find(scenario: str, scenarios: dict[str, Scenario], library: Path | None = None) -> Scenario:
    """The scenario a name picks; ``KeyError`` for an unknown one (or a path leaving ``library``)."""
    found = scenarios.get(scenario)
    if found is not None:
        return found
    if library is not None:
        candidate = (library / f"{scenario}.json").resolve()
        if library.resolve() in candidate.parents and candidate.is_file():
            return Scenario(candidate)
    raise KeyError(scenario)


def load(path: Path) -> Recording:
    """The recording in ``path``."""
    if path.suffix == ".sse":
        return Recording(frames=_sse_frames(path.read_bytes()), status=200, body=None)
    data = json.loads(path.read_bytes())
    if "endpoint" in data:  # its stream (``events``) and its body, each as the endpoint sends it
        return Recording(
            data.get("events"), int(data.get("status", 200)), data.get("body"), data["endpoint"]
        )
    if "frames" in data:
        return Recording(frames=list(data["frames"]), status=200, body=None)
    if "body" in data:
        return Recording(frames=None, status=int(data.get("status", 200)), body=data["body"])
    return Recording(frames=None, status=200, body=data)


def _sse_frames(raw: bytes) -> list[Frame]:
    frames: list[Frame] = []
    for event in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
        )
        if not data:
            continue
        frames.append("[DONE]" if data.strip() == b"[DONE]" else json.loads(data))
    return frames


def without_usage(frames: list[Frame]) -> list[Frame]:
    """The frames a client that did not ask for usage gets: no usage-only chunk, no usage key."""
    out: list[Frame] = []
    for frame in frames:
        if isinstance(frame, str):
            out.append(frame)
            continue
        if frame.get("usage") is not None and not frame.get("choices"):
            continue
        out.append({k: v for k, v in frame.items() if k != "usage"})
    return out


def fold(frames: list[Frame]) -> dict[str, Any]:
    """A stream's frames as the one ``chat.completion`` body a non-streamed request gets."""
    chunks = [f for f in frames if isinstance(f, dict)]
    first = chunks[0] if chunks else {}
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in chunks:
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            slot = choices.setdefault(
                int(choice.get("index", 0)),
                {"message": {"role": "assistant", "content": None}, "finish_reason": None},
            )
            _fold_delta(slot["message"], choice.get("delta") or {})
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
    body: dict[str, Any] = {
        "id": first.get("id", "chatcmpl-upstream"),
        "object": "chat.completion",
        "created": first.get("created", 0),
        "model": first.get("model", ""),
        "choices": [
            {
                "index": i,
                "message": slot["message"],
                "logprobs": None,
                "finish_reason": slot["finish_reason"],
            }
            for i, slot in sorted(choices.items())
        ],
    }
    if "system_fingerprint" in first:
        body["system_fingerprint"] = first["system_fingerprint"]
    if usage is not None:
        body["usage"] = usage
    return body


def _fold_delta(message: dict[str, Any], delta: dict[str, Any]) -> None:
    for key in ("content", "refusal", "reasoning_content"):
        if delta.get(key) is not None:
            message[key] = (message.get(key) or "") + delta[key]
    if delta.get("function_call"):
        call = message.setdefault("function_call", {"name": "", "arguments": ""})
        for key in ("name", "arguments"):
            call[key] += delta["function_call"].get(key) or ""
    for part in delta.get("tool_calls") or []:
        calls = message.setdefault("tool_calls", [])
        index = int(part.get("index", len(calls)))
        while len(calls) <= index:
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        call = calls[index]
        if part.get("id"):
            call["id"] = part["id"]
        function = part.get("function") or {}
        for key in ("name", "arguments"):
            call["function"][key] += function.get(key) or ""


def unfold(body: dict[str, Any]) -> list[Frame]:
    """A non-streamed body as OpenAI's chunk sequence: content, finish, usage, ``[DONE]``."""
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint") if k in body}
    head["object"] = "chat.completion.chunk"
    frames: list[Frame] = []
    for choice in body.get("choices") or []:
        message = choice.get("message") or {}
        delta = {k: v for k, v in message.items() if k != "annotations" and v is not None}
        index = choice.get("index", 0)
        frames.append(
            {**head, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}
        )
        frames.append(
            {
                **head,
                "choices": [
                    {"index": index, "delta": {}, "finish_reason": choice["finish_reason"]}
                ],
            }
        )
    if body.get("usage") is not None:
        frames.append({**head, "choices": [], "usage": body["usage"]})
    frames.append("[DONE]")
    return frames


def reply(name: str, scenario: Scenario, request: dict[str, Any]) -> Sent:
    """What the upstream sends for a request body under a scenario."""
    recording = load(scenario.path)
    stream = bool(request.get("stream"))
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    dropped = scenario.drop_after is not None
    if recording.endpoint is not None:
        if not stream or recording.frames is None:
            return Sent(name, False, include_usage, None, recording.status, recording.body, dropped)
        frames = copy.deepcopy(recording.frames)
        if recording.endpoint == "completions" and not include_usage:
            frames = without_usage(frames)
        if scenario.drop_after is not None:
            frames = frames[: scenario.drop_after]
        return Sent(name, True, include_usage, frames, 200, None, dropped)
    if not stream:
        body = recording.body if recording.body is not None else fold(recording.frames or [])
        return Sent(name, False, include_usage, None, recording.status, body, dropped)
    frames = recording.frames if recording.frames is not None else unfold(recording.body or {})
    frames = copy.deepcopy(frames)
    if not include_usage:
        frames = without_usage(frames)
    if scenario.drop_after is not None:
        frames = frames[: scenario.drop_after]
    return Sent(name, True, include_usage, frames, 200, None, dropped)


# The answers of the two paths served beside chat completions (OpenAI's shapes).
MODELS = {
    "object": "list",
    "data": [{"id": "gpt-4o-mini", "object": "model", "created": 1721172741, "owned_by": "system"}],
}
EMBEDDINGS = {
    "object": "list",
    "data": [{"object": "embedding", "index": 0, "embedding": [0.0125, -0.0375, 0.5]}],
    "model": "text-embedding-3-small",
    "usage": {"prompt_tokens": 4, "total_tokens": 4},
}


MODERATIONS = {
    "id": "modr-0d9740456c391e43c445bf0f010940c7",
    "model": "omni-moderation-latest",
    "results": [{"flagged": False, "categories": {}, "category_scores": {}}],
}
# The paths answered with one fixed body when no scenario names a recording for them.
FIXED = {"embeddings": EMBEDDINGS, "moderations": MODERATIONS}
# The endpoints a recording may be of (its ``endpoint``), by the path's end; chat is ``chat``.
ENDPOINT_PATHS = (
    ("/chat/completions", "chat"), ("/completions", "completions"), ("/responses", "responses"),
    ("/embeddings", "embeddings"), ("/messages", "messages"), ("/images/generations", "images"),
)  # fmt: skip


def endpoint_of(path: str) -> str | None:
    for suffix, endpoint in ENDPOINT_PATHS:
        if path.endswith(suffix):
            return endpoint
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `sent`
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            raw = gzip.decompress(raw)  # a client compressing its request, as a server may take
        path = self.path.split("?", 1)[0]
        scenario = None
        if path.startswith("/scenario/"):
            scenario, _, tail = path[len("/scenario/") :].rpartition("/v1/")
            path = "/v1/" + tail
        scenario = self.headers.get(SCENARIO_HEADER) or scenario
        path = path.rstrip("/")
        endpoint = endpoint_of(path)
        recorded = endpoint == "chat" or self._recorded(scenario, endpoint)
        if not recorded:
            fixed = FIXED.get(path.rsplit("/", 1)[-1])
            if fixed is not None:
                self._json(200, fixed)
            else:
                self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        scenario = scenario or "clean"
        try:
            request = json.loads(raw or b"{}")
            chosen = find(scenario, self.server.scenarios, self.server.library)
            sent = reply(scenario, chosen, request)
        except KeyError:
            self._json(
                404, {"error": {"message": f"no scenario {scenario!r}", "type": "not_found"}}
            )
            return
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
            return
        with self.server.lock:
            self.server.sent.append(sent)
        if sent.stream:
            self._stream(sent, chosen.pause or (-1, 0.0))
        elif sent.dropped:
            data = json.dumps(sent.body).encode()
            self.send_response(sent.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
        else:
            if chosen.pause is not None:  # a slow upstream: its silence before the body
                time.sleep(chosen.pause[1])
            self._json(sent.status, sent.body or {})

    def _recorded(self, scenario: str | None, endpoint: str | None) -> bool:
        """Whether ``scenario`` names a recording of ``endpoint`` (not chat)."""
        if scenario is None or endpoint is None:
            return False
        try:
            chosen = find(scenario, self.server.scenarios, self.server.library)
        except KeyError:
            return False
        return load(chosen.path).endpoint == endpoint

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/models"):
            self._json(200, MODELS)
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, sent: Sent, pause: tuple[int, float]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pause_at, seconds = pause
        for number, frame in enumerate(sent.frames or []):
            if number == pause_at:
                time.sleep(seconds)
            if isinstance(frame, dict) and frame.keys() == {"event", "data"}:  # a named event
                data = json.dumps(frame["data"], separators=(",", ":"))
                event = f"event: {frame['event']}\ndata: {data}\n\n".encode()
            else:
                data = frame if isinstance(frame, str) else json.dumps(frame, separators=(",", ":"))
                event = f"data: {data}\n\n".encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            except OSError:  # the gateway went away mid-stream
                self.close_connection = True
                return
        if sent.dropped:
            self.close_connection = True  # no terminating chunk: the body is broken
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], scenarios: dict[str, Scenario], library: Path | None
    ) -> None:
        super().__init__(address, _Handler)
        self.scenarios = scenarios
        self.library = library
        self.lock = threading.Lock()
        self.sent: list[Sent] = []


class Upstream:
    """The running server; ``sent`` lists its replies in the order they went out."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        self.port = int(server.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    @classmethod
    def start(
        cls,
        scenarios: dict[str, Scenario] | None = None,
        library: Path | None = None,
        port: int = 0,
    ) -> Upstream:
        """Serve ``scenarios`` (default ``DEMO_SCENARIOS``) on ``port`` (0: a free one)."""
        return cls(_Server(("127.0.0.1", port), scenarios or DEMO_SCENARIOS, library))

    def scenario_url(self, scenario: str) -> str:
        """An OpenAI ``base_url`` / LiteLLM ``api_base`` whose every call replays ``scenario``."""
        return f"http://127.0.0.1:{self.port}/scenario/{scenario}/v1"

    @property
    def sent(self) -> list[Sent]:
        with self._server.lock:
            return list(self._server.sent)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.recorded_upstream [--port N]``: serve the demo's recordings in the
    foreground until Ctrl-C or SIGTERM; one line says where. A port in use is one line, exit 2."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(
        prog="python -m devtools.recorded_upstream",
        description="Serve recorded OpenAI chat completions on 127.0.0.1 until stopped.",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    parser.add_argument(
        "--library", type=Path, help="directory of <dir>/<name>.json recordings also served"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port} is not a port (0 to 65535)")
    try:
        upstream = Upstream.start(library=args.library, port=args.port)
    except OSError as exc:
        print(f"recorded upstream: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}")
        return 2
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    names = ", ".join(DEMO_SCENARIOS)
    print(
        f"recorded upstream on {upstream.base_url} (OpenAI base_url); scenarios {names}, chosen by"
        f" the {SCENARIO_HEADER} header or {upstream.scenario_url('<name>')}; Ctrl-C stops it",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        stopped.wait()
    upstream.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
