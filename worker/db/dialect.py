"""Statements that differ between PostgreSQL and SQLite, built the one way both engines accept.

Contract: each helper returns a statement (or a statement per dialect name, for statements built
once at import) with the same meaning on both engines; callers never branch on the dialect
themselves.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import any_, bindparam
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

DIALECTS = (("postgresql", postgresql), ("sqlite", sqlite))


def dialect(session: Session) -> str:
    """The session's dialect name: ``postgresql`` or ``sqlite``."""
    return session.get_bind().dialect.name


def insert_ignore(session: Session, table: Any) -> Any:
    """INSERT … ON CONFLICT DO NOTHING (any unique constraint) for the session's dialect."""
    module = postgresql if dialect(session) == "postgresql" else sqlite
    return module.insert(table).on_conflict_do_nothing()


def insert_ignore_on(table: Any, conflict: str, returning: Any = None) -> dict[str, Any]:
    """INSERT … ON CONFLICT (conflict) DO NOTHING, per dialect name (built once, at import)."""
    built = {}
    for name, module in DIALECTS:
        statement = module.insert(table).on_conflict_do_nothing(index_elements=[conflict])
        built[name] = statement if returning is None else statement.returning(returning)
    return built


def one_of(column: Any, name: str) -> dict[str, Any]:
    """``column`` is one of the list bound to ``name``, per dialect name: ``= ANY(array)`` on
    PostgreSQL (one statement text whatever the list's length), an expanding ``IN`` on SQLite."""
    return {
        "postgresql": column == any_(bindparam(name, type_=postgresql.ARRAY(column.type))),
        "sqlite": column.in_(bindparam(name, expanding=True)),
    }
