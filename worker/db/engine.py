"""Engines, sessions and schema migrations for PostgreSQL (production) and SQLite (embedded default).

SQLite connections are set up on connect: WAL journal (readers never block the writer), a busy timeout
(a second writer waits instead of failing at once) and foreign keys on. Every SQLite transaction that
may write starts with ``BEGIN IMMEDIATE``: the ledger reads a reservation and then writes, and a
deferred transaction that tries to upgrade its read lock after another writer committed fails with
SQLITE_BUSY at once, without waiting out the busy timeout. Taking the write lock at BEGIN turns that
race into a wait. (It is also the documented way to get working SAVEPOINTs out of the ``sqlite3``
driver.)

Work that only reads (reports, the read-only commands, the worker's price book) goes through a
*read-only* engine (``read_only``, or ``readonly=True`` on ``make_engine`` / ``session_factory``):
the same pool, whose transactions never take the write lock, so a long report never holds a writer
out. SQLite begins them ``DEFERRED`` with ``PRAGMA query_only`` on (WAL gives the reader its snapshot
beside the writer; a write is refused); PostgreSQL begins them ``READ ONLY``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from worker.config import ensure_sqlite_dir, sqlite_file
from worker.core.errors import LedgerError


class NoDatabase(LedgerError):
    """A command that only reads was pointed at a SQLite file that does not exist."""


if TYPE_CHECKING:  # Alembic is imported by the functions that migrate: the read commands never do
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Execution option of a read-only engine; the SQLite begin listener reads it.
READ_ONLY = "billing_read_only"


def normalize_url(url: str) -> str:
    """Point bare PostgreSQL URLs at psycopg 3, the driver we ship."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Autocommit at the driver level; transactions are begun explicitly by the "begin" listener.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_begin(connection: Any) -> None:
    reading = bool(connection.get_execution_options().get(READ_ONLY))
    # query_only belongs to the driver connection, which the pool hands to readers and writers in
    # turn: set it whenever this transaction needs the other state than the connection last had.
    info = connection.connection.info
    if info.get(READ_ONLY, False) != reading:
        connection.exec_driver_sql(f"PRAGMA query_only = {int(reading)}")
        info[READ_ONLY] = reading
    connection.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")


def read_only(engine: Engine) -> Engine:
    """``engine`` for transactions that only read: the same pool and listeners, every transaction
    begun ``DEFERRED`` with ``query_only`` (SQLite) or ``READ ONLY`` (PostgreSQL). It never waits
    for the SQLite write lock nor holds a writer out; a write through it is refused."""
    options: dict[str, Any] = {READ_ONLY: True}
    if engine.dialect.name == "postgresql":
        options["postgresql_readonly"] = True
    return engine.execution_options(**options)


def require_sqlite_file(url: str) -> None:
    """``NoDatabase`` when ``url`` names a SQLite file that does not exist: the one check of every
    command that must not create it (the read commands, ``billing doctor``)."""
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise NoDatabase(f"database: {path} does not exist (run `billing db upgrade`)")


def engine_for(url: str, *, create: bool = True, **kwargs: Any) -> Engine:
    """An engine for ``url`` with the per-engine settings above; creates a SQLite file's directory.
    The ledger's engines add the money rollup to it (``worker.ledger.database.make_engine``).
    ``create`` False (a command that only reads): a SQLite file that does not exist is
    ``NoDatabase``, and neither it nor its directory is made."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        if create:
            ensure_sqlite_dir(url)
        else:
            require_sqlite_file(url)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
    else:
        kwargs.setdefault("pool_pre_ping", True)
        engine = create_engine(url, **kwargs)
    return engine


def session_factory(engine: Engine, *, readonly: bool = False) -> sessionmaker[Session]:
    """Sessions that do not expire objects on commit (the ledger returns plain values anyway);
    ``readonly``: on ``read_only(engine)``."""
    return sessionmaker(read_only(engine) if readonly else engine, expire_on_commit=False)


def script_location() -> Path:
    """The Alembic script directory, found through the installed ``migrations`` package (not cwd)."""
    return Path(str(resources.files("migrations")))


def alembic_config(url: str | None = None, connection: Any = None) -> Config:
    """An Alembic config built in code; pass ``connection`` to migrate inside a caller's connection."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()))
    if url is not None:
        config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def check(url: str) -> None:
    """Raise ``alembic.util.exc.AutogenerateDiffsDetected`` if the models drift from the migrations."""
    from alembic import command

    command.check(alembic_config(url))
