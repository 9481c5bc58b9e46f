"""``billing db``: migrate the database. Also the one way the ledger commands open it.

``ledger_session`` gives a command one transaction: committed when the command's body returns, rolled
back on any error, so a failing command leaves nothing half-written. Expected errors (bad input, a
refused ledger operation, an unreachable or unmigrated database) print one line and exit with 2.

Light at import (``worker.cli``'s rule: every command imports these helpers): SQLAlchemy and the
ledger's database module are imported inside the functions that use them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
import orjson

from worker.cli import main
from worker.config import Settings, redact_url
from worker.core.errors import BillingError
from worker.core.terminal import printable

if TYPE_CHECKING:
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import Session


def fail(command: str, message: str) -> NoReturn:
    """One line on stderr (outside text in ``message`` made printable) and exit status 2."""
    click.echo(printable(f"billing {command}: {message}"), err=True)
    sys.exit(2)


def database_error(exc: SQLAlchemyError) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    if "no such table" in text or ("relation" in text and "does not exist" in text):
        text += " (run `billing db upgrade`)"
    return f"database: {text}"


def settings(command: str) -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        fail(command, str(exc))


def check_sqlite_file(url: str) -> None:
    """A missing SQLite file would be created empty; say it is missing instead (``ReportError``:
    the report, statement, invoice and export commands print it as one line)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from worker.reports.spec import ReportError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ReportError(f"DATABASE_URL: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        from worker.db.engine import NoDatabase, require_sqlite_file

        try:
            require_sqlite_file(url)
        except NoDatabase as exc:
            raise ReportError(str(exc)) from None


@contextmanager
def ledger_session(command: str, *, readonly: bool = False) -> Iterator[Session]:
    """A session in one transaction for one command; errors end the command with status 2.
    ``readonly`` for a command that only reads: its transaction never holds a writer out
    (``database.read_only``)."""
    from sqlalchemy.exc import SQLAlchemyError

    from worker.ledger import database

    try:
        engine = database.make_engine(settings(command).database_url, readonly=readonly)
    except BillingError as exc:
        fail(command, str(exc))
    try:
        with database.session_factory(engine)() as session, session.begin():
            yield session
    except BillingError as exc:
        fail(command, str(exc))
    except SQLAlchemyError as exc:
        fail(command, database_error(exc))
    finally:
        engine.dispose()


def echo_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def write_output(command: str, text: str, out: Path | None, written: str) -> None:
    """A document to ``out`` (its folders made; one line on stderr says ``written`` went there),
    or to stdout: exact in a file or a pipe, its control characters made visible on a terminal.
    A file that cannot be written is one line and exit 2."""
    if out is None:
        if sys.stdout.isatty():
            text = "\n".join(printable(line) for line in text.split("\n"))
        sys.stdout.write(text)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(command, f"cannot write {out}: {exc.strerror}")
    click.echo(f"{written} written to {out}", err=True)


@main.group("db")
def db_group() -> None:
    """Create and migrate the billing database (DATABASE_URL)."""


def _migrate(command: str, action: Any, revision: str) -> None:
    from sqlalchemy.exc import SQLAlchemyError

    url = settings(command).database_url
    try:
        action(url, revision)
    except SQLAlchemyError as exc:
        fail(command, database_error(exc))
    except Exception as exc:  # Alembic reports unknown revisions and the like as plain errors
        fail(command, str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
    click.echo(f"{redact_url(url)}: at {revision}")


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def upgrade_command(revision: str) -> None:
    """Migrate up to REVISION (creates the SQLite file and its directory if needed), and make sure
    the deployment has its fingerprint key (generated and stored when BILLING_HASH_SALT is unset)."""
    from worker.ledger import database

    _migrate("db upgrade", database.upgrade, revision)
    _ensure_fingerprint_key()


def _ensure_fingerprint_key() -> None:
    """Store a fresh key if the schema has the table and holds none; say where the key comes from
    (never its value)."""
    from sqlalchemy import inspect
    from sqlalchemy.exc import SQLAlchemyError

    from models import DeploymentSecret
    from worker import fingerprint_key
    from worker.ledger import database

    current = settings("db upgrade")
    engine = database.make_engine(current.database_url)
    try:
        if not inspect(engine).has_table(DeploymentSecret.__tablename__):
            return  # an older revision than the one that adds it
        generated = fingerprint_key.ensure_stored(engine)
        with engine.connect() as conn:
            found = fingerprint_key.source(current, conn)
    except SQLAlchemyError as exc:
        fail("db upgrade", database_error(exc))
    finally:
        engine.dispose()
    click.echo(f"fingerprint key: {found}{' (generated now)' if generated else ''}")


@db_group.command("downgrade")
@click.argument("revision")
def downgrade_command(revision: str) -> None:
    """Migrate down to REVISION (``base`` drops every table)."""
    from worker.ledger import database

    _migrate("db downgrade", database.downgrade, revision)


@db_group.command("check")
def check_command() -> None:
    """Fail if the models and the migrations disagree."""
    from worker.ledger import database

    url = settings("db check").database_url
    try:
        database.check(url)
    except Exception as exc:
        fail("db check", str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
    click.echo("models and migrations agree")
