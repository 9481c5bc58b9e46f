"""Alerts: aggregation of what went wrong into messages (pure), the outbox (database) and the
webhook sender (HTTP). Nothing here ever holds prompt or completion text."""
