"""One named database on a PostgreSQL server: create it empty, or drop it (by its exact name only).

``admin_url`` is any database URL of that server whose user may create databases; the new database's
URL is the same with the database name replaced.
"""

from __future__ import annotations

from sqlalchemy import text

from worker.ledger.database import make_engine


def database_url(admin_url: str, name: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + name


def _execute(admin_url: str, *statements: str) -> None:
    admin = make_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        admin.dispose()


def create_database(admin_url: str, name: str) -> str:
    """Create (or re-create, dropping one of the same name first) an empty database; its URL.
    Raises SQLAlchemy's ``OperationalError`` when the server does not answer."""
    _execute(
        admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"'
    )
    return database_url(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    """Drop the database ``name`` if it exists, closing its connections first."""
    _execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
