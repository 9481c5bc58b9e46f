"""atheris (libFuzzer) entry point for ``test_fuzz.test_atheris``; run as a script.

Input bytes are split on NUL into frame entries (the first byte picks the request's n, usage flag
and whether the call is non-streamed); the target is the consumer's path, as for the other fuzzers.
Only ``InputError`` may escape ``reconcile_record``; libFuzzer's ``-timeout`` is the hang bound.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["worker"]):
    from tests.chaos.fuzzing import meta, response_entries, streamed_entries
    from worker.errors import InputError
    from worker.pipeline.consumer import reconcile_record
    from worker.prices import load_price_book

BOOK = load_price_book()


def one_input(data: bytes) -> None:
    head = data[:1][0] if data else 0
    parts = data[1:].split(b"\x00")
    if head & 0x80:
        entries = response_entries(str(200 + (head & 0x3) * 100).encode(), parts[0])
    else:
        request = meta(n=1 + (head & 0x3) % 3, include_usage=bool(head & 0x4))
        entries = streamed_entries(parts, request)
    with contextlib.suppress(InputError):
        reconcile_record(entries, "req_fuzz", BOOK)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
