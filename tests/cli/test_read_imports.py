"""The read commands load only what they read with (issue 39: a fast CLI). Each runs in a fresh
interpreter against a small SQLite ledger, invokes ``main`` in-process and then reports which of the
heavy libraries ``sys.modules`` holds. Their speed is measured by ``make bench`` (row 14,
benchmarks/bench_reads.py), not asserted here.

Heavy, and not needed to read the ledger: Celery and kombu (the worker's), Redis (spend control and
the backlog; ``balance`` asks it only when ``BILLING_AUTHORIZE`` is on), Alembic (migrations),
tiktoken (estimates), and the bundled LiteLLM price list (``worker.core.prices.bundled``: parsing
it into the price book is most of what ``prices which`` costs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.providers.shapes import AT, load, meta_of, reconcile
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold

HEAVY = (
    "celery", "kombu", "redis", "alembic", "tiktoken", "worker.core.prices.bundled", "rich",
    "pyarrow",
)  # fmt: skip

# Runs each command of argv (commands separated by "--") in turn in one interpreter, then reports
# the exit status of each and the heavy modules loaded by them all (none loaded means none by each).
PROBE = """
import json, sys
PRELOAD
from worker.cli import main
codes = []
for command in " ".join(sys.argv[1:]).split(" -- "):
    try:
        main(command.split(), prog_name="billing", standalone_mode=True)
    except SystemExit as exc:
        codes.append(exc.code)
    else:
        codes.append(0)
heavy = sorted(
    name for name in json.loads(HEAVY)
    if any(loaded == name or loaded.startswith(name + ".") for loaded in sys.modules)
)
print(json.dumps({"codes": codes, "heavy": heavy}), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A SQLite ledger at head with one settled call, and what to ask about it."""
    url = f"sqlite:///{tmp_path_factory.mktemp('reads') / 'billing.db'}"
    upgrade(url)
    name = "openai/chat_object_details.json"
    meta = meta_of(load(name), name)
    engine = make_engine(url)
    with session_factory(engine)() as session, session.begin():
        hold(session, meta, now=AT)
        effect = apply_result(session, reconcile(name), now=AT, grace=timedelta(hours=1))
        record_findings(session, reconcile(name), effect, salt="reads", now=AT, meta=meta)
    engine.dispose()
    return url, {"account": meta.account_id, "request_id": meta.request_id}


def probe(url: str, *args: str, preload: str = "") -> dict[str, object]:
    script = PROBE.replace("HEAVY", repr(json.dumps(HEAVY))).replace("PRELOAD", preload)
    env = {k: v for k, v in os.environ.items() if k.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    env |= {"DATABASE_URL": url, "BILLING_AUTHORIZE": "0"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=Path(url.removeprefix("sqlite:///")).parent,
    )
    return json.loads(done.stderr.strip().splitlines()[-1]) | {"stdout": done.stdout}


def test_the_read_commands_load_no_heavy_library(ledger: tuple[str, dict[str, str]]) -> None:
    url, about = ledger
    found = probe(
        url,
        "unsettled",
        "list",
        "--",
        "show",
        about["request_id"],
        "--",
        "balance",
        about["account"],
    )
    assert (found["codes"], found["heavy"]) == ([0, 0, 0], []), found
    # they read the ledger, not an empty one
    assert (
        about["request_id"] in found["stdout"] and f"account {about['account']}" in found["stdout"]
    )


def test_the_report_shaped_commands_load_no_heavy_library(
    ledger: tuple[str, dict[str, str]],
) -> None:
    """``statement`` and ``export`` share the report's queries, not its tokenizer or terminal
    library (issue 52). The bundled price list is still loaded through ``worker.upstream.query``
    (the report's --upstream section), so it is left out of this check."""
    url, about = ledger
    month = AT.strftime("%Y-%m")
    found = probe(
        url,
        "statement", about["account"], "--month", month, "--format", "json",
        "--", "export", "calls", "--format", "csv", "--since", AT.strftime("%Y-%m-%d"),
        "--until", "2100-01-01", "--out", "calls.csv",
    )  # fmt: skip
    heavy = [name for name in found["heavy"] if name != "worker.core.prices.bundled"]  # type: ignore[union-attr]
    assert (found["codes"], heavy) == ([0, 0], []), found
    assert about["account"] in found["stdout"]  # the statement of the seeded account


def test_the_probe_sees_a_heavy_import(ledger: tuple[str, dict[str, str]]) -> None:
    """The same probe where a submodule of one library was imported first: the check can fail."""
    url, about = ledger
    found = probe(url, "balance", about["account"], preload="import redis.exceptions")
    assert (found["codes"], found["heavy"]) == ([0], ["redis"])
