"""The one decision of what is transient: an error after which the same unit of work, rolled back
and run again, may succeed.

Transient: Redis's connection, timeout and cluster errors; a database ``OperationalError`` (a lost
connection, a deadlock, a serialization failure, a lock or statement timeout, SQLite's "database is
locked" after its busy timeout); any database error that invalidated its connection; and a *unique*
violation (two transactions raced to record the same reservation, account or (reservation, kind):
on retry the loser finds the winner's rows). Never transient: a ``BillingError`` (the input or the
ledger refused it), a CHECK violation or an unbalanced transaction (a bug, not a race).
"""

from __future__ import annotations

import redis
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

REDIS_TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError)
# SQLSTATEs of a retryable failure that some drivers report as another DBAPIError subclass.
RETRY_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57014"})


def is_transient(exc: BaseException) -> bool:
    """True for the errors a unit of work may be retried on (see the module docstring)."""
    if isinstance(exc, REDIS_TRANSIENT):
        return True
    if isinstance(exc, IntegrityError):
        code = getattr(exc.orig, "sqlstate", None)
        return code == "23505" or "UNIQUE constraint failed" in str(exc.orig)
    if isinstance(exc, OperationalError):
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or getattr(exc.orig, "sqlstate", None) in RETRY_SQLSTATES
    return False
