"""Billing and usage reconciliation worker for an OpenAI-compatible LLM gateway.

Layout: the pure core (``sse``, ``assembly``, ``outcome``, ``estimate``, ``prices``, ``reconcile``)
does no IO; ``ledger`` holds the database operations, ``pipeline`` the Redis and Celery edges,
``cli`` the command line.
"""
