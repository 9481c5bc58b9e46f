"""The ``billing`` command line: a thin shell over the core, the ledger and the pipeline.

Each command group lives in its own module and registers itself on ``main``; errors the user can fix
print one line and exit with status 2, never a traceback.
"""

from __future__ import annotations

import importlib

import click

COMMAND_MODULES = (
    "replay",
    "worker",
    "db",
    "prices",
    "unsettled",
    "balance",
    "show",
    "simulate",
    "metrics",
    "doctor",
    "alerts",
    "report",
    "upstream",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Billing and usage reconciliation worker for an LLM gateway."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"worker.cli.{_name}")
