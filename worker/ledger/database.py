"""The ledger's engines: ``worker.db.engine``'s, with the money rollup's queue wired in.

Every engine that may post to the ledger comes from ``make_engine`` (a posting on an engine without
the rollup's hook is refused: ``rollup``). The rest of the engine and migration plumbing lives in
``worker.db.engine`` and is re-exported here for the ledger's callers.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from worker.db.engine import (
    alembic_config,
    check,
    downgrade,
    engine_for,
    normalize_url,
    read_only,
    script_location,
    session_factory,
    upgrade,
)
from worker.ledger import rollup

__all__ = [
    "alembic_config",
    "check",
    "downgrade",
    "make_engine",
    "normalize_url",
    "read_only",
    "script_location",
    "session_factory",
    "upgrade",
]


def make_engine(url: str, *, readonly: bool = False, **kwargs: Any) -> Engine:
    """An engine for ``url`` (``worker.db.engine.engine_for``) with the money rollup's queue
    (``rollup.install``: money_daily is written at COMMIT, in key order). ``readonly``:
    ``read_only`` of it."""
    engine = engine_for(url, create=not readonly, **kwargs)
    rollup.install(engine)
    return read_only(engine) if readonly else engine
