"""Billing and usage reconciliation worker for an OpenAI-compatible LLM gateway.

Layout, top to bottom (``make lint`` checks the direction with import-linter): ``cli`` and
``service`` (the command line; the Celery app, its tasks and each process's runtime) → ``consumer``
(the steps, the sweeper), ``gateway``, ``alerts``, ``reports``, ``upstream``, ``simulation`` →
``ledger`` → ``db`` → ``contract`` (the Redis contract both sides share) → ``core`` (pure: the wire,
the billing rules, the price book, the shared types).
"""
