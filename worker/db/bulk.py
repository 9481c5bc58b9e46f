"""Many rows in one statement: one JSON document of rows on PostgreSQL, executemany elsewhere.

Contract: each function writes exactly what the equivalent multi-row Core statement would (same
columns, same conflict handling, the same bind-side type processing, so a naive datetime is still
refused), inside the caller's transaction; it never commits. Rows are dicts keyed by column name and
must all carry the same keys. Returned rows carry the ``returning`` columns, in no promised order:
callers key them (a request id, a reservation and kind), never zip them with their input.

Why: SQLAlchemy's multi-row ``VALUES`` renders a placeholder per value, so every batch size is a new
statement text of several kilobytes. psycopg keeps converted queries in a cache only while they are
short, so it re-parsed each one with a regular expression, and PostgreSQL planned each anew; in the
consumer's profile that conversion alone was about a third of the ledger's CPU. ``INSERT … SELECT …
FROM json_populate_recordset(NULL::table, %(rows)s::json)`` is one short text whatever the batch
size: converted once and prepared by psycopg after a few runs. Its one parameter is the rows as JSON,
serialized by orjson in C, and PostgreSQL parses it into the table's own column types on its side
(column arrays through ``unnest`` were tried first: psycopg dumps arrays element by element in
Python, which cost as much as the conversion they saved).

``insert_linked`` writes parents and their children (transactions and their entries) in one
statement: the parents' INSERT … RETURNING is a CTE that the children's document joins on the
parents' natural key, so the children need no ids from a first round trip.

SQLite has no arrays; there the same functions run the Core statements as executemany.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

import orjson
from sqlalchemy import Connection, Table, bindparam, func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from worker.core.errors import LedgerError

_PG = postgresql.dialect()


def _is_pg(session: Session | Connection) -> bool:
    bind = session if isinstance(session, Connection) else session.get_bind()
    return bind.dialect.name == "postgresql"


def _connection(session: Session | Connection) -> Connection:
    return session if isinstance(session, Connection) else session.connection()


def _quote(name: str) -> str:
    return _PG.identifier_preparer.quote(name)


@cache
def _processors(table: Table, names: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """(column, bind processor) of the columns that have one for psycopg: only the type decorators
    (``UTCDateTime`` refuses naive datetimes and converts to UTC)."""
    dialect = postgresql.psycopg.dialect()
    found = (
        (name, table.c[name].type.bind_processor(dialect)) for name in names if name in table.c
    )
    return tuple((name, process) for name, process in found if process is not None)


def _document(table: Table, names: tuple[str, ...], rows: Sequence[dict[str, Any]]) -> str:
    processors = _processors(table, names)
    if processors:
        rows = [dict(row) for row in rows]
        for row in rows:
            for name, process in processors:
                row[name] = process(row[name])
    return orjson.dumps(rows, default=_subclass).decode()


def _subclass(value: Any) -> Any:
    """What orjson does not serialize itself: a datetime subclass (freezegun's, in tests) as the
    ISO text orjson writes for a datetime."""
    if isinstance(value, datetime):
        return datetime.isoformat(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _source(table: Table, names: tuple[str, ...]) -> str:
    """A SELECT of the document's rows, typed as the table's columns."""
    columns = ", ".join(f"r.{_quote(name)}" for name in names)
    return f"SELECT {columns} FROM json_populate_recordset(NULL::{_quote(table.name)}, %(rows)s::json) AS r"


@cache
def _insert_sql(
    table: Table,
    names: tuple[str, ...],
    conflict: tuple[str, ...] | None,
    add: tuple[str, ...],
    returning: tuple[str, ...],
) -> str:
    columns = ", ".join(_quote(name) for name in names)
    sql = f"INSERT INTO {_quote(table.name)} ({columns}) {_source(table, names)}"
    if conflict is not None:
        target = f" ({', '.join(_quote(name) for name in conflict)})" if conflict else ""
        if add:
            sets = ", ".join(
                f"{_quote(c)} = {_quote(table.name)}.{_quote(c)} + EXCLUDED.{_quote(c)}"
                for c in add
            )
            sql += f" ON CONFLICT{target} DO UPDATE SET {sets}"
        else:
            sql += f" ON CONFLICT{target} DO NOTHING"
    if returning:
        sql += " RETURNING " + ", ".join(_quote(name) for name in returning)
    return sql


@cache
def _insert_core(
    table: Table,
    conflict: tuple[str, ...] | None,
    add: tuple[str, ...],
    returning: tuple[str, ...],
) -> Any:
    statement = sqlite.insert(table)
    if conflict is not None:
        if add:
            statement = statement.on_conflict_do_update(
                index_elements=list(conflict),
                set_={c: table.c[c] + statement.excluded[c] for c in add},
            )
        else:
            statement = statement.on_conflict_do_nothing(index_elements=list(conflict) or None)
    if returning:
        statement = statement.returning(*(table.c[name] for name in returning))
    return statement


def insert(
    session: Session | Connection,
    table: Table,
    rows: Sequence[dict[str, Any]],
    *,
    conflict: Sequence[str] | None = None,
    add: Sequence[str] = (),
    returning: Sequence[str] = (),
) -> list[Any]:
    """Insert ``rows`` in one statement; returns the ``returning`` columns of the rows written.

    ``conflict``: None raises on a conflict, as a plain INSERT does; a sequence of column names
    (empty: any unique constraint) skips the conflicting rows (ON CONFLICT DO NOTHING), or, with
    ``add``, adds their ``add`` columns to the existing row's (ON CONFLICT DO UPDATE SET c = c + new).
    """
    if not rows:
        return []
    key = (tuple(conflict) if conflict is not None else None, tuple(add), tuple(returning))
    if not _is_pg(session):
        result = session.execute(_insert_core(table, *key), list(rows))
        return result.all() if returning else []
    names = tuple(rows[0])
    result = _connection(session).exec_driver_sql(
        _insert_sql(table, names, *key), {"rows": _document(table, names, rows)}
    )
    return result.all() if returning else []


@cache
def _linked_sql(
    parent: Table, parent_names: tuple[str, ...], child: Table, child_names: tuple[str, ...],
    key: tuple[str, ...], link: str,
) -> str:  # fmt: skip
    """The parents' INSERT … RETURNING as a CTE, the children's rows (typed by their columns,
    the key's by the parent's) joined to it on ``key``; the statement returns how many children it
    wrote."""
    own = tuple(name for name in child_names if name not in key)
    typed = ", ".join(
        f"{_quote(name)} {(parent if name in key else child).c[name].type.compile(dialect=_PG)}"
        for name in child_names
    )
    on = " AND ".join(f"p.{_quote(name)} = k.{_quote(name)}" for name in key)
    returned = ", ".join(_quote(name) for name in ("id", *key))
    columns = ", ".join(_quote(name) for name in (link, *own))
    values = ", ".join(["p.id", *(f"k.{_quote(name)}" for name in own)])
    return (
        f"WITH p AS ({_insert_sql(parent, parent_names, None, (), ())} RETURNING {returned}), "
        f"c AS (INSERT INTO {_quote(child.name)} ({columns}) SELECT {values} "
        f"FROM json_to_recordset(%(children)s::json) AS k({typed}) JOIN p ON {on} RETURNING 1) "
        "SELECT count(*) FROM c"
    )


def insert_linked(
    session: Session | Connection,
    parent: Table,
    parent_rows: Sequence[dict[str, Any]],
    child: Table,
    child_rows: Sequence[dict[str, Any]],
    *,
    key: Sequence[str],
    link: str,
) -> None:
    """Insert ``parent_rows``, then ``child_rows`` whose ``link`` column is their parent's ``id``.

    A child row names its parent by the parent's ``key`` columns (unique together among the
    parents), in place of ``link``. PostgreSQL: one statement, the parents' insert a CTE joined to
    the children's document; SQLite: the parents with their ids returned, then the children. A
    child row that names no parent written here is refused (``LedgerError``), never dropped."""
    if not parent_rows:
        if child_rows:
            raise LedgerError(f"{len(child_rows)} {child.name} rows without a {parent.name} row")
        return
    key = tuple(key)
    if not _is_pg(session):
        written = insert(session, parent, parent_rows, returning=("id", *key))
        ids = {tuple(row[1:]): row[0] for row in written}
        rows = []
        for row in child_rows:
            found = ids.get(tuple(row[name] for name in key))
            if found is None:
                raise LedgerError(f"a {child.name} row names no {parent.name} row: {row}")
            own = {name: value for name, value in row.items() if name not in key}
            rows.append({link: found, **own})
        insert(session, child, rows)
        return
    parent_names, child_names = tuple(parent_rows[0]), tuple(child_rows[0]) if child_rows else key
    written = (
        _connection(session)
        .exec_driver_sql(
            _linked_sql(parent, parent_names, child, child_names, key, link),
            {
                "rows": _document(parent, parent_names, parent_rows),
                "children": _document(child, child_names, child_rows),
            },
        )
        .scalar_one()
    )
    if written != len(child_rows):
        raise LedgerError(
            f"{len(child_rows) - written} {child.name} rows name no {parent.name} row written here"
        )


@cache
def _update_sql(
    table: Table,
    match: str,
    names: tuple[str, ...],
    keep: tuple[str, ...],
) -> str:
    target = _quote(table.name)

    def value(name: str) -> str:
        new = f"v.{_quote(name)}"
        return f"COALESCE({target}.{_quote(name)}, {new})" if name in keep else new

    sets = ", ".join(f"{_quote(name)} = {value(name)}" for name in names)
    return (
        f"UPDATE {target} SET {sets} FROM ({_source(table, (match, *names))}) AS v "
        f"WHERE {target}.{_quote(match)} = v.{_quote(match)}"
    )


@cache
def _update_core(
    table: Table,
    match: str,
    names: tuple[str, ...],
    keep: tuple[str, ...],
) -> Any:
    statement = update(table).where(table.c[match] == bindparam(f"b_{match}"))
    return statement.values(
        {
            name: func.coalesce(table.c[name], bindparam(f"b_{name}"))
            if name in keep
            else bindparam(f"b_{name}")
            for name in names
        }
    )


def update_many(
    session: Session,
    table: Table,
    rows: Sequence[dict[str, Any]],
    *,
    match: str,
    keep: Sequence[str] = (),
) -> None:
    """Set, for each row, its other columns on the table's row whose ``match`` column equals the
    row's; the columns in ``keep`` are set only where they are still NULL, the rest either way.
    ``match`` should be unique."""
    if not rows:
        return
    names = tuple(name for name in rows[0] if name != match)
    key = (match, names, tuple(keep))
    if not _is_pg(session):
        statement = _update_core(table, *key)
        session.execute(statement, [{f"b_{k}": v for k, v in row.items()} for row in rows])
        return
    session.connection().exec_driver_sql(
        _update_sql(table, *key), {"rows": _document(table, (match, *names), rows)}
    )
