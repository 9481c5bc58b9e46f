"""The pure core: the wire (SSE, assembly), the billing rules (outcome, reconcile, usage, estimate,
the price book), and the shared types. No IO beyond reading the package's own data files, no ORM, no
Redis, no Celery (``make lint``'s import contracts hold it so)."""
