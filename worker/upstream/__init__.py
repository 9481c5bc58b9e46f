"""Upstream reconciliation: what the providers say they served, against what the ledger billed.

``exports`` reads the providers' usage and cost exports (pure), ``tiers`` says which service tier
each usage line is of (pure), ``store`` imports them idempotently,
``routes`` records where the gateway sent each call, ``matching`` ties the two sides together per
day, provider, model, upstream key and tier (pure), ``query`` reads both sides from the database,
and ``simulated`` writes the export of a simulated run. Above this package: the report's section
(``worker.reports.upstream``), the alert (``worker.alerts.upstream_leakage``), ``make demo``'s step
(``devtools.demo_upstream``); the consumer records routes through ``routes``. This package imports
none of them. See docs/reports.md, "Upstream reconciliation".
"""
