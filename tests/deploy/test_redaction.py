"""Passwords never reach an operator's screen: in ``user:password@`` nor in the URL's query."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REDIS_URL, create_pg_database, drop_pg_database
from hypothesis import given
from hypothesis import strategies as st

from worker.config import ENV_VARS, redact_url

BILLING = str(Path(sys.executable).parent / "billing")
SECRET = "secret123"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://billing:pw-1@db:5432/billing?password=secret123&sslmode=require",
            "postgresql://billing:***@db:5432/billing?password=***&sslmode=require",
        ),
        (
            "postgresql://billing@db/billing?sslpassword=secret123&application_name=w",
            "postgresql://billing@db/billing?sslpassword=***&application_name=w",
        ),
        ("redis://db/0?pass=secret123", "redis://db/0?pass=***"),
        ("rediss://db/0?Auth_Token=secret123", "rediss://db/0?Auth_Token=***"),
        ("postgresql://db/x?PASS%57ORD=secret123", "postgresql://db/x?PASS%57ORD=***"),
        ("redis://:secret123@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        ("sqlite:///var/billing.db", "sqlite:///var/billing.db"),
        (
            "postgresql://db/x?host=/run/pg&sslmode=disable",
            "postgresql://db/x?host=/run/pg&sslmode=disable",
        ),
    ],
)
def test_both_forms_are_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown


_secret = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.~", min_size=8, max_size=30)


@given(
    password=_secret,
    query_secret=_secret,
    key=st.sampled_from(
        ["password", "sslpassword", "pass", "passwd", "token", "api_key", "secret"]
    ),
    user=st.sampled_from(["", "billing"]),
)
def test_no_secret_survives(password: str, query_secret: str, key: str, user: str) -> None:
    url = f"postgresql://{user}:{password}@db.internal:5432/billing?sslmode=require&{key}={query_secret}"
    # The whole URL, exactly: a substring check fails by chance on a secret such as "postgres",
    # which the scheme itself holds.
    assert redact_url(url) == (
        f"postgresql://{user}:***@db.internal:5432/billing?sslmode=require&{key}=***"
    )


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``billing`` command with exactly ``env`` for our variables: what an operator sees."""
    full = {k: v for k, v in os.environ.items() if k not in ENV_VARS} | env
    return subprocess.run(
        [BILLING, *args], env=full, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def pg_url_with_query_password() -> Iterator[str]:
    """A fresh PostgreSQL database whose URL carries ``?password=secret123`` (trust auth ignores it)."""
    name = f"billing_redact_{uuid.uuid4().hex[:10]}"
    url = create_pg_database(name)
    yield f"{url}?password={SECRET}&application_name=redaction-test"
    drop_pg_database(name)


@pytest.mark.postgres
def test_db_upgrade_and_doctor_mask_a_query_password(pg_url_with_query_password: str) -> None:
    env = {"DATABASE_URL": pg_url_with_query_password, "REDIS_URL": REDIS_URL}
    upgraded = run(env, "db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    doctor = run(env, "doctor", "--only", "database", "--only", "migrations")
    for result in (upgraded, doctor):
        seen = result.stdout + result.stderr
        assert SECRET not in seen, seen
        assert "password=***" in seen, seen
    assert "at head" in doctor.stdout, doctor.stdout


def test_doctor_reports_an_unparsable_database_url_without_its_secrets() -> None:
    url = f"postgresql://billing:pw-{SECRET}@db:notaport/billing?password={SECRET}"
    result = run({"DATABASE_URL": url, "REDIS_URL": REDIS_URL}, "doctor", "--only", "database")
    seen = result.stdout + result.stderr
    assert result.returncode == 1, seen
    assert "Traceback" not in seen and SECRET not in seen
    # Refused with the settings (issue 39), before any check opens the database.
    assert result.stdout.startswith("PROBLEM  config"), result.stdout
    assert "DATABASE_URL (postgresql://…): its port" in result.stdout
