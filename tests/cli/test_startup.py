"""``billing --help`` and ``billing show --help`` load none of the heavy libraries (issue 15: on-call
types them mid-incident). Each runs in a fresh interpreter, which invokes ``main`` in-process and then
reports which of those libraries ``sys.modules`` holds. Their speed is measured by ``make bench``
(benchmarks/bench_cli.py), not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("celery", "sqlalchemy", "alembic", "redis", "tiktoken")

PROBE = """
import json, sys
PRELOAD
from worker.cli import main
try:
    main(sys.argv[1:], prog_name="billing")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted({name.partition(".")[0] for name in sys.modules} & set(json.loads(HEAVY)))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def probe(*args: str, preload: str = "") -> dict[str, object]:
    """``billing ARGS`` in a fresh interpreter (after ``preload``, a statement): its exit status and
    the heavy libraries it left loaded."""
    script = PROBE.replace("HEAVY", repr(json.dumps(HEAVY))).replace("PRELOAD", preload)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Usage: billing" in done.stdout, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [("--help",), ("show", "--help")], ids=" ".join)
def test_help_imports_no_heavy_library(args: tuple[str, ...]) -> None:
    assert probe(*args) == {"code": 0, "heavy": []}


def test_the_probe_sees_a_heavy_import() -> None:
    """The same probe where a submodule of one library was imported first: the check can fail."""
    assert probe("--help", preload="import sqlalchemy.exc") == {"code": 0, "heavy": ["sqlalchemy"]}
