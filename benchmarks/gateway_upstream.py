"""A fast OpenAI-compatible upstream for the gateway benchmark (row 10): every ``POST
/v1/chat/completions`` streams the same chat completion, OpenAI's chunk shapes (a role chunk,
``--chunks`` content chunks, the finish chunk, the ``choices: []`` usage chunk, ``[DONE]``), at once.

    python -m benchmarks.gateway_upstream --port P [--chunks 40]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route


def events(chunks: int) -> list[bytes]:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1770000000,
            "model": "gpt-4o-mini"}  # fmt: skip

    def chunk(choices: list[object], **extra: object) -> bytes:
        return b"data: " + orjson.dumps({**head, "choices": choices, **extra}) + b"\n\n"

    out = [
        chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    ]
    out += [
        chunk([{"index": 0, "delta": {"content": f" word{i}"}, "finish_reason": None}])
        for i in range(chunks)
    ]
    out.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    usage = {"prompt_tokens": 12, "completion_tokens": chunks, "total_tokens": 12 + chunks}
    out.append(chunk([], usage=usage))
    out.append(b"data: [DONE]\n\n")
    return out


def app(chunks: int) -> Starlette:
    body = events(chunks)

    async def chat(request: Request) -> StreamingResponse:
        await request.body()

        def stream() -> Iterator[bytes]:
            yield from body

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=40)
    args = parser.parse_args()
    uvicorn.run(app(args.chunks), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
