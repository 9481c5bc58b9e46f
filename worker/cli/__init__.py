"""The ``billing`` command line: a thin shell over the core, the ledger and the pipeline.

Each command group lives in its own module and registers itself on ``main``; errors the user can fix
print one line and exit with status 2, never a traceback.

The rule that keeps ``billing --help`` and ``billing show --help`` instant (issue 15; the measurement
is in BENCHMARKS.md, tests/cli/test_startup.py checks what they import):

* A command is registered here with one line in ``COMMANDS``: its name, the module that defines it
  (with ``@main.command`` or ``@main.group``) and its one-line help as ``billing --help`` lists it,
  the first sentence of the command's docstring (tests/cli/test_help.py checks that they agree).
  The module is imported only when its command is named; the listing imports none.
* A command module imports click and the standard library at its top; anything heavy (SQLAlchemy,
  Celery, Alembic, Redis, tiktoken, rich, the ledger, the pipeline, the reports) inside the
  function that needs it, so that its own ``--help`` does not load it. ``show`` and the helpers of
  ``db`` it uses keep to this; modules that do not yet only pay for it on their own ``--help``.
"""

from __future__ import annotations

import click

from worker.cli.lazy_group import LazyGroup

COMMANDS: dict[str, tuple[str, str]] = {
    "account": ("worker.cli.credit", "Customer account settings."),
    "alerts": ("worker.cli.alerts", "Alerts: one page per kind per window past a threshold, digests, resolved notices."),
    "balance": ("worker.cli.balance", "Funded, held, charged and available for ACCOUNT (every account without one), in USD."),
    "credit": ("worker.cli.credit", "Fund customer accounts: `billing credit ACCOUNT AMOUNT --note … --key …`."),
    "customer": ("worker.cli.invoice", "Customer details printed on invoices (name, address, e-mail, tax id)."),
    "db": ("worker.cli.db", "Create and migrate the billing database (DATABASE_URL)."),
    "doctor": ("worker.cli.doctor", "Check configuration, Redis, the broker, the database and its migrations, the vocabularies, the notification backlog and the dead letters."),
    "export": ("worker.cli.export", "Exports for the warehouse: one row per call, CSV, JSON Lines or Parquet."),
    "invoice": ("worker.cli.invoice", "The customer's invoice for a closed month: finalized (numbered and stored) the first time, the stored document byte for byte afterwards; money posted into the month since goes on a credit note, finalized then."),
    "invoices": ("worker.cli.invoice", "Finalized invoices and credit notes: list, show, and set their status."),
    "metrics": ("worker.cli.metrics", "Prometheus metrics of the worker processes."),
    "prices": ("worker.cli.prices", "The effective-dated price book (USD per 1M tokens)."),
    "replay": ("worker.cli.replay", "Reconcile recorded SSE or JSON bodies and print one JSON result per FILE."),
    "report": ("worker.cli.report", "Calls, settled/unsettled/void, money held/charged/released and the tie-out, for a window."),
    "show": ("worker.cli.show", "Everything the ledger knows about REQUEST_ID: status, usage, charge, entries, failure."),
    "simulate": ("worker.cli.simulate", "Play simulated gateway calls into Redis (REDIS_URL, BILLING_PREFIX, BILLING_PARTITIONS)."),
    "statement": ("worker.cli.statement", "Opening balance, credits, charges by model and day, releases, open failures, closing."),
    "unsettled": ("worker.cli.unsettled", "Failures: calls whose hold is kept until a result arrives or someone resolves them."),
    "upstream": ("worker.cli.upstream", "The providers' own usage and cost exports (upstream reconciliation)."),
    "worker": ("worker.cli.worker", "Consume the gateway's events and settle every call until stopped."),
}  # fmt: skip


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Billing and usage reconciliation worker for an LLM gateway."""
