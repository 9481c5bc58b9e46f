"""atheris (libFuzzer) entry point for ``test_fuzz.test_atheris``; run as a script.

Input bytes become a call's entries as ``fuzzing.atheris_entries`` says (the first byte picks the
request's n, usage flag and whether the call is non-streamed; the rest, split on NUL, the frames); the
target is the consumer's path, as for the other fuzzers. Only ``InputError`` may escape
``reconcile_record``; libFuzzer's ``-timeout`` is the hang bound.

Artifacts (crash-*, leak-*, timeout-*, oom-*, slow-unit-*) never land in the working tree: without an
``-artifact_prefix=`` argument the script adds one naming a fresh temporary directory and says so on
stderr. A crash worth keeping becomes a named file in ``tests/fixtures/fuzz/`` with a test in
``test_fuzz.py`` that states what the input must do.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["worker"]):
    from tests.chaos.fuzzing import atheris_entries
    from worker.consumer.reconciling import reconcile_record
    from worker.core.errors import InputError
    from worker.core.prices import load_price_book

BOOK = load_price_book()


def one_input(data: bytes) -> None:
    with contextlib.suppress(InputError):
        reconcile_record(atheris_entries(data), "req_fuzz", BOOK)


def with_artifact_prefix(argv: list[str]) -> list[str]:
    """``argv`` with ``-artifact_prefix=`` pointing outside the tree unless the caller chose one."""
    if any(arg.startswith("-artifact_prefix=") for arg in argv):
        return argv
    directory = tempfile.mkdtemp(prefix="billing-fuzz-artifacts-")
    print(f"atheris_target: artifacts go to {directory}/", file=sys.stderr)
    return [*argv, f"-artifact_prefix={directory}/"]


if __name__ == "__main__":
    atheris.Setup(with_artifact_prefix(sys.argv), one_input)
    atheris.Fuzz()
