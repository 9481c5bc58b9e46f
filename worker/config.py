"""Configuration from environment variables (12-factor), read once into a frozen object.

Every variable the code reads is named here, so the deployment files can be checked against this list.
URLs may hold passwords: use ``redact_url`` before a URL reaches a log line or a report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit, urlunsplit

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
MAX_PARTITIONS = 256  # notification partitions (docs/events.md §2)
DEFAULT_DATABASE_URL = "sqlite:///var/billing.db"

# Every environment variable the worker reads, for the deployment files and their test. Kept by hand:
# tests/deploy checks it against ``Settings.from_env`` and every other read in the package.
ENV_VARS = (
    "REDIS_URL",
    "REDIS_CLUSTER",
    "CELERY_BROKER_URL",
    "DATABASE_URL",
    "BILLING_PREFIX",
    "BILLING_PARTITIONS",
    "BILLING_BATCH_SIZE",
    "BILLING_CLAIM_IDLE_MS",
    "BILLING_SWEEP_IDLE_MS",
    "BILLING_GRACE_SECONDS",
    "BILLING_STREAM_TTL_SECONDS",
    "BILLING_PRICE_BOOK",
    "BILLING_HASH_SALT",
    "BILLING_RESOLVE_POLICY",
    "BILLING_DRAIN_MS",
    "BILLING_BLOCK_MS",
    "BILLING_SWEEP_INTERVAL_SECONDS",
    "BILLING_RECHECK_SECONDS",
    "PROMETHEUS_MULTIPROC_DIR",
    "BILLING_PARITY_WINDOW_SECONDS",
    "BILLING_DRIFT_ALERT_PCT",
    "BILLING_DRIFT_WINDOW_SECONDS",
    "BILLING_NON_STREAMABLE_MODELS",
    "BILLING_ALERT_WINDOW_SECONDS",
    "BILLING_UNSETTLED_RATE_PCT",
    "BILLING_ALERT_WEBHOOK_URL",
    "BILLING_BATCH_BYTES",
    "BILLING_DEAD_LETTER_MAXLEN",
    "BILLING_ALERT_RETENTION_DAYS",
    "BILLING_ANOMALY_RETENTION_DAYS",
    "BILLING_UPSTREAM_LEAK_MICROS",
    "BILLING_UPSTREAM_LEAK_PCT",
)


def _int(
    env: Mapping[str, str], name: str, default: int, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name} must be 1 or 0, got {raw!r}")


# A configured key shorter than this is refused as guessable (the old public default had 14).
MIN_SECRET_LENGTH = 16


def _secret(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name) or None
    if raw is not None and len(raw) < MIN_SECRET_LENGTH:
        raise ValueError(
            f"{name} must be a secret of at least {MIN_SECRET_LENGTH} characters, or unset "
            "(then `billing db upgrade` generates one per deployment)"
        )
    return raw


def _prefixes(raw: str | None) -> tuple[str, ...]:
    """A comma-separated list of model name prefixes; blanks dropped."""
    return tuple(part.strip() for part in (raw or "").split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class Settings:
    redis_url: str = DEFAULT_REDIS_URL
    broker_url: str = DEFAULT_REDIS_URL
    database_url: str = DEFAULT_DATABASE_URL
    prefix: str = "billing"
    partitions: int = 1
    batch_size: int = 200
    claim_idle_ms: int = 60_000
    sweep_idle_ms: int = 300_000
    grace_seconds: int = 3_600
    stream_ttl_seconds: int = 86_400
    price_book: str | None = None
    # The fingerprint key when BILLING_HASH_SALT is set; None: the deployment's stored secret, which
    # ``worker.fingerprint_key.with_key`` fills in. There is no default: a known key is no key.
    hash_salt: str | None = field(default=None, repr=False)
    resolve_policy: str = "release"
    drain_ms: int = 2_000
    block_ms: int = 200
    sweep_interval_seconds: int = 10
    recheck_seconds: int = 30
    redis_cluster: bool = False
    metrics_dir: str | None = None
    parity_window_seconds: int = 3_600
    drift_alert_pct: int = 10
    drift_window_seconds: int = 3_600
    non_streamable_models: tuple[str, ...] = ()
    alert_window_seconds: int = 300
    unsettled_rate_pct: int = 5
    # May carry a token in its path (Slack): log it only through ``worker.alerts.config.redact``.
    alert_webhook_url: str | None = None
    # Limits and retention (docs/operations.md "Limits and retention"). A retention of 0 days keeps
    # the rows for ever.
    batch_bytes: int = 64 << 20
    dead_letter_maxlen: int = 100_000
    alert_retention_days: int = 30
    anomaly_retention_days: int = 90
    # Upstream leakage alert (docs/alerts.md): a day's leaked usage at our prices, micro-USD, and
    # its share of the day's upstream tokens, percent; either one reached raises it (0: that one off).
    upstream_leak_micros: int = 1_000_000
    upstream_leak_pct: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        redis_url = env.get("REDIS_URL") or DEFAULT_REDIS_URL
        policy = env.get("BILLING_RESOLVE_POLICY") or "release"
        if policy not in ("release", "charge_estimate", "none"):
            raise ValueError("BILLING_RESOLVE_POLICY must be release, charge_estimate or none")
        return cls(
            redis_url=redis_url,
            broker_url=env.get("CELERY_BROKER_URL") or redis_url,
            database_url=env.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
            prefix=env.get("BILLING_PREFIX") or "billing",
            # At most MAX_PARTITIONS: streams a count change leaves behind are found by name up to
            # it (``worker.pipeline.partitions``), so a larger count could strand some.
            partitions=_int(env, "BILLING_PARTITIONS", 1, minimum=1, maximum=MAX_PARTITIONS),
            batch_size=_int(env, "BILLING_BATCH_SIZE", 200, minimum=1),
            claim_idle_ms=_int(env, "BILLING_CLAIM_IDLE_MS", 60_000),
            sweep_idle_ms=_int(env, "BILLING_SWEEP_IDLE_MS", 300_000),
            grace_seconds=_int(env, "BILLING_GRACE_SECONDS", 3_600),
            stream_ttl_seconds=_int(env, "BILLING_STREAM_TTL_SECONDS", 86_400, minimum=1),
            price_book=env.get("BILLING_PRICE_BOOK") or None,
            hash_salt=_secret(env, "BILLING_HASH_SALT"),
            resolve_policy=policy,
            drain_ms=_int(env, "BILLING_DRAIN_MS", 2_000, minimum=100),
            block_ms=_int(env, "BILLING_BLOCK_MS", 200, minimum=1),
            sweep_interval_seconds=_int(env, "BILLING_SWEEP_INTERVAL_SECONDS", 10, minimum=1),
            recheck_seconds=_int(env, "BILLING_RECHECK_SECONDS", 30, minimum=1),
            redis_cluster=_flag(env, "REDIS_CLUSTER"),
            metrics_dir=env.get("PROMETHEUS_MULTIPROC_DIR") or None,
            parity_window_seconds=_int(env, "BILLING_PARITY_WINDOW_SECONDS", 3_600, minimum=1),
            drift_alert_pct=_int(env, "BILLING_DRIFT_ALERT_PCT", 10, minimum=1),
            drift_window_seconds=_int(env, "BILLING_DRIFT_WINDOW_SECONDS", 3_600, minimum=60),
            non_streamable_models=_prefixes(env.get("BILLING_NON_STREAMABLE_MODELS")),
            alert_window_seconds=_int(env, "BILLING_ALERT_WINDOW_SECONDS", 300, minimum=5),
            unsettled_rate_pct=_int(env, "BILLING_UNSETTLED_RATE_PCT", 5, minimum=1),
            alert_webhook_url=env.get("BILLING_ALERT_WEBHOOK_URL") or None,
            batch_bytes=_int(env, "BILLING_BATCH_BYTES", 64 << 20, minimum=1),
            dead_letter_maxlen=_int(env, "BILLING_DEAD_LETTER_MAXLEN", 100_000, minimum=1),
            alert_retention_days=_int(env, "BILLING_ALERT_RETENTION_DAYS", 30),
            anomaly_retention_days=_int(env, "BILLING_ANOMALY_RETENTION_DAYS", 90),
            upstream_leak_micros=_int(env, "BILLING_UPSTREAM_LEAK_MICROS", 1_000_000),
            upstream_leak_pct=_int(env, "BILLING_UPSTREAM_LEAK_PCT", 1, maximum=100),
        )


# Query parameters that carry a secret: libpq's ``password`` and ``sslpassword``, and what other drivers
# and services call theirs (compared lower-case, without ``-`` and ``_``, as substrings).
_SECRET_PARAMETERS = ("pass", "pwd", "token", "secret", "apikey", "accesskey", "credential", "auth")


def _secret_parameter(name: str) -> bool:
    folded = unquote_plus(name).lower().replace("_", "").replace("-", "")
    return any(word in folded for word in _SECRET_PARAMETERS)


def _redact_query(query: str) -> str:
    """The query with the value of every secret parameter replaced by ``***``; the rest as written."""
    if not query:
        return query
    parts = []
    for item in query.split("&"):
        name, sep, _value = item.partition("=")
        parts.append(f"{name}=***" if sep and _secret_parameter(name) else item)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """The URL with every password replaced by ``***``: the one in ``user:password@`` and the values of
    query parameters such as ``?password=`` or ``?sslpassword=`` (user names stay, they help
    debugging)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable url>"
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        if port is not None:
            host = f"{host}:{port}"
        user = parts.username or ""
        netloc = f"{user}:***@{host}" if user else f":***@{host}"
    query = _redact_query(parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def ensure_sqlite_dir(database_url: str) -> None:
    """Create the directory of a relative or absolute SQLite file URL, so the default just works."""
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and ":memory:" not in database_url:
        path = Path(database_url[len(prefix) :].split("?", 1)[0])
        path.parent.mkdir(parents=True, exist_ok=True)
