"""Upstream reconciliation: what the providers say they served, against what the ledger billed.

``exports`` reads the providers' usage and cost exports (pure), ``store`` imports them idempotently,
``routes`` records where the gateway sent each call, ``matching`` ties the two sides together per
day, provider, model and upstream key (pure), ``query`` reads both sides from the database,
``leakage`` raises the alert, ``simulated`` writes the export of a simulated run and ``demo`` is
``make demo``'s step. The report's section is ``worker.reports.upstream``. See docs/reports.md,
"Upstream reconciliation".
"""
