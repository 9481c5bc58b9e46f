"""Configuration from environment variables (12-factor), read once into a frozen object.

Each setting is declared once, as a field of ``Settings``: its attribute name and type, then one call
that names its environment variable, default, bounds and one-line meaning::

    batch_size: int = integer("BILLING_BATCH_SIZE", 200, "notifications per batch", minimum=1)

``Settings.from_env``, its validation and error messages, ``ENV_VARS`` (for the deployment files and
their test) and the README's settings table (checked by tests/test_config.py) all derive from these
declarations. The kinds: ``integer``, ``text``, ``url``, ``optional_text``, ``secret``, ``flag``,
``choice``, ``prefixes``, ``usd``. URLs may hold passwords: use ``redact_url`` before a URL reaches a log
line or a report. A ``url`` is checked here, once, the way its client will read it (``check_url``): a
bad ``DATABASE_URL`` or ``REDIS_URL`` is one line naming the variable and what is wrong, and never
echoes the value (it may hold a password).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from decimal import Decimal
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from worker.core.money import parse_usd

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
MAX_PARTITIONS = 256  # notification partitions (docs/events.md §2)
DEFAULT_DATABASE_URL = "sqlite:///var/billing.db"
# What ``billing unsettled expire`` and the sweeper do with a failure past its grace period.
# What the grace's end does to a failure still unsettled: ``charge_delivered`` (the default)
# charges the estimate of what the client was sent (prompt + delivered completion) for the calls
# whose answer reached the client without a usage block (``incomplete``: a hang-up or a drop
# mid-answer; ``missing_usage``) and releases the rest; ``release`` releases every one;
# ``charge_estimate`` charges every priced one; ``none`` leaves them to a person.
RESOLVE_POLICIES = ("charge_delivered", "release", "charge_estimate", "none")
# The reasons ``charge_delivered`` charges: the answer was served, only its usage is missing.
DELIVERED_REASONS = ("incomplete", "missing_usage")
# A configured key shorter than this is refused as guessable (the old public default had 14).
MIN_SECRET_LENGTH = 16
# The gateway tee's default linger (``worker.gateway.tee``; ``BILLING_TEE_LINGER_MS``).
TEE_LINGER_MS = 100


# -- URLs ------------------------------------------------------------------------------------------
# The schemes each URL setting accepts, with the module its client imports for it (checked installed
# without importing it). The ledger runs on PostgreSQL through psycopg 3 (``postgres://`` and
# ``postgresql://`` are pointed at it, ``worker.db.engine.normalize_url``) and on SQLite through the
# standard library: the two engines the tests run on, nothing else.
URL_SCHEMES: dict[str, str] = {
    "postgresql": "psycopg",
    "postgres": "psycopg",
    "postgresql+psycopg": "psycopg",
    "sqlite": "sqlite3",
    "sqlite+pysqlite": "sqlite3",
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
}
DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "sqlite", "sqlite+pysqlite")
REDIS_SCHEMES = ("redis", "rediss", "unix")
# Celery's broker may be any transport kombu knows (``ANY_SCHEME``); a Redis one is checked as
# ``REDIS_URL`` is.
ANY_SCHEME = "*"
BROKER_SCHEMES = (*REDIS_SCHEMES, ANY_SCHEME)
_EXAMPLES = {
    DATABASE_SCHEMES: "postgresql://user:password@host:5432/name or sqlite:///path/to/billing.db",
    REDIS_SCHEMES: "redis://[:password@]host:6379/0, rediss://… or unix:///path/to/redis.sock",
    BROKER_SCHEMES: "redis://[:password@]host:6379/1 or another transport Celery knows",
}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_PORT = re.compile(r"[0-9]{1,5}")


def _port_problem(port: str | None) -> str | None:
    """None for no port at all; ``host:`` with nothing after the colon is a bad port."""
    if port is None:
        return None
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        return "its port is not a number from 1 to 65535"
    return None


def _database_problem(raw: str, scheme: str) -> str | None:
    """What SQLAlchemy could not use in a database URL, read by SQLAlchemy's own ``make_url``
    (imported here, only when a database URL is checked). Its messages are not passed on: they
    may quote the value, password included."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(raw)
    except ValueError:  # what int() says of the text where the port stands
        return "its port is not a number from 1 to 65535"
    except ArgumentError:
        return (
            "it is not a URL SQLAlchemy can read (percent-encode any ':', '@', '/' or '?' of a"
            " password)"
        )
    if url.port is not None and not 1 <= url.port <= 65535:
        return "its port is not a number from 1 to 65535"
    if scheme.startswith("sqlite") and (url.host or url.username or url.password or url.port):
        return "a SQLite URL names a file, not a server: sqlite:///relative.db or sqlite:////abs.db"
    return None


def _redis_problem(raw: str, scheme: str) -> str | None:
    try:
        parts = urlsplit(raw)
    except ValueError:
        return "its address is malformed (an unclosed [ of an IPv6 address?)"
    try:
        port = parts.port  # raises on a port that is not a number from 0 to 65535
    except ValueError:
        port = 0
    if port == 0:
        return "its port is not a number from 1 to 65535"
    if scheme == "unix":
        return None if parts.path else "a unix:// URL needs the socket's path"
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return "its path is not a database number (redis://host:6379/0)"
    return None


def check_url(env: str, raw: str, schemes: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming ``env`` and what is wrong with ``raw``, one line, if its client
    could not use it: not a URL, a scheme not in ``schemes`` or whose driver is not installed, a
    malformed address, port or database number. The message names the scheme at most, never another
    part of the value (a misplaced ``@`` or ``/`` can put a password where the host should be)."""
    found = _SCHEME.match(raw)
    example = _EXAMPLES[schemes]
    if found is None:
        raise ValueError(f"{env} is not a URL: use {example}")
    # Redis reads its schemes in any case, SQLAlchemy only in lower case.
    scheme = found[1].lower() if found[1].lower() in REDIS_SCHEMES else found[1]
    if scheme not in schemes and ANY_SCHEME not in schemes:
        raise ValueError(f"{env}: {scheme}:// is not supported: use {example}")
    module = URL_SCHEMES.get(scheme)
    if module is not None and find_spec(module) is None:
        raise ValueError(f"{env}: {scheme}:// needs the {module} module, which is not installed")
    if scheme in DATABASE_SCHEMES:
        problem = _database_problem(raw, scheme)
    elif scheme in REDIS_SCHEMES:
        problem = _redis_problem(raw, scheme)
    else:
        problem = _port_problem(_netloc_port(raw))
    if problem:
        raise ValueError(f"{env} ({scheme}://…): {problem}")


def _netloc_port(raw: str) -> str | None:
    """The port text of a generic URL (after the last ``:`` of its address), or None."""
    try:
        netloc = urlsplit(raw).netloc.rpartition("@")[2]
    except ValueError:
        return "?"  # a malformed address: not a port either
    if netloc.endswith("]") or ":" not in netloc:
        return None
    return netloc.rpartition(":")[2]


@dataclass(frozen=True, slots=True)
class Declaration:
    """One setting's environment variable: how its value is read and checked, and how the README
    shows it. ``read`` returns the field's value, or raises ``ValueError`` with the message the user
    sees; ``shown`` is the README's default column."""

    env: str
    meaning: str
    default: object
    shown: str
    read: Callable[[Mapping[str, str], Declaration], object]
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    same_as: str | None = None  # unset: the value of this other field (as read), not ``default``


def _declare(declaration: Declaration, *, in_repr: bool = True) -> Any:
    return field(default=declaration.default, repr=in_repr, metadata={"setting": declaration})


def _read_int(env: Mapping[str, str], d: Declaration) -> int | None:
    raw = env.get(d.env)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{d.env} must be an integer, got {raw!r}") from None
    if d.minimum is not None and value < d.minimum:
        raise ValueError(f"{d.env} must be at least {d.minimum}, got {value}")
    if d.maximum is not None and value > d.maximum:
        raise ValueError(f"{d.env} must be at most {d.maximum}, got {value}")
    return value


def _read_text(env: Mapping[str, str], d: Declaration) -> str | None:
    return env.get(d.env) or None


def _read_flag(env: Mapping[str, str], d: Declaration) -> bool:
    raw = (env.get(d.env) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{d.env} must be 1 or 0, got {raw!r}")


def _read_secret(env: Mapping[str, str], d: Declaration) -> str | None:
    raw = env.get(d.env) or None
    if raw is not None and len(raw) < MIN_SECRET_LENGTH:
        raise ValueError(
            f"{d.env} must be a secret of at least {MIN_SECRET_LENGTH} characters, or unset "
            "(then `billing db upgrade` generates one per deployment)"
        )
    return raw


def _read_choice(env: Mapping[str, str], d: Declaration) -> str | None:
    raw = env.get(d.env) or None
    if raw is not None and raw not in d.choices:
        listed = ", ".join(d.choices[:-1]) + f" or {d.choices[-1]}"
        raise ValueError(f"{d.env} must be {listed}")
    return raw


def _read_prefixes(env: Mapping[str, str], d: Declaration) -> tuple[str, ...]:
    """A comma-separated list of model name prefixes; blanks dropped."""
    return tuple(part.strip() for part in (env.get(d.env) or "").split(",") if part.strip())


def integer(
    env: str,
    default: int,
    meaning: str,
    *,
    minimum: int = 0,
    maximum: int | None = None,
    shown: str | None = None,
) -> Any:
    """An integer within ``[minimum, maximum]``; unset or empty: ``default``."""
    shown = shown or f"`{default}`"
    return _declare(Declaration(env, meaning, default, shown, _read_int, minimum, maximum))


def text(
    env: str, default: str, meaning: str, *, same_as: str | None = None, shown: str | None = None
) -> Any:
    """A string; unset or empty: ``default``, or the field ``same_as`` names when given."""
    shown = shown or f"`{default}`"
    return _declare(Declaration(env, meaning, default, shown, _read_text, same_as=same_as))


def _read_url(env: Mapping[str, str], d: Declaration) -> str | None:
    raw = env.get(d.env) or None
    if raw is not None:
        check_url(d.env, raw, d.choices)
    return raw


def url(
    env: str,
    default: str,
    meaning: str,
    *,
    schemes: tuple[str, ...],
    same_as: str | None = None,
    shown: str | None = None,
) -> Any:
    """A URL of one of ``schemes`` (a key of ``URL_SCHEMES``), checked by ``check_url``; unset or
    empty: ``default`` (or the field ``same_as`` names)."""
    shown = shown or f"`{default}`"
    return _declare(
        Declaration(env, meaning, default, shown, _read_url, choices=schemes, same_as=same_as)
    )


def optional_text(env: str, meaning: str, *, shown: str = "unset") -> Any:
    """A string; unset or empty: ``None``."""
    return _declare(Declaration(env, meaning, None, shown, _read_text))


def secret(env: str, meaning: str, *, shown: str = "unset") -> Any:
    """A key of at least ``MIN_SECRET_LENGTH`` characters, or ``None``; never in ``repr``."""
    return _declare(Declaration(env, meaning, None, shown, _read_secret), in_repr=False)


def flag(env: str, meaning: str) -> Any:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case); unset: false."""
    return _declare(Declaration(env, meaning, False, "`0`", _read_flag))


def choice(env: str, choices: tuple[str, ...], meaning: str) -> Any:
    """One of ``choices``; unset or empty: the first."""
    default = choices[0]
    return _declare(
        Declaration(env, meaning, default, f"`{default}`", _read_choice, choices=choices)
    )


def prefixes(env: str, meaning: str) -> Any:
    """A comma-separated list (blanks dropped); unset: empty."""
    return _declare(Declaration(env, meaning, (), "empty", _read_prefixes))


def _read_usd(env: Mapping[str, str], d: Declaration) -> int | None:
    """An amount in USD as integer micro-USD, read by the one USD parser (``money.parse_usd``)."""
    raw = env.get(d.env)
    if raw is None or raw.strip() == "":
        return None
    return int(parse_usd(raw, what=d.env, allow_zero=True))


def usd(env: str, default_micros: int, meaning: str) -> Any:
    """An amount in USD (at most 6 decimals, not negative), held as integer micro-USD."""
    shown = f"`{Decimal(default_micros) / 1_000_000:f}`".replace(".000000", "")
    return _declare(Declaration(env, meaning, default_micros, shown, _read_usd))


def declaration(settings_field: Field[Any]) -> Declaration:
    found: Declaration = settings_field.metadata["setting"]
    return found


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting, one declaration each (see the module docstring). ``Settings()`` holds the
    defaults; ``from_env`` reads and checks the environment."""

    redis_url: str = url(
        "REDIS_URL",
        DEFAULT_REDIS_URL,
        "the event streams (`rediss://` and passwords work)",
        schemes=REDIS_SCHEMES,
    )
    broker_url: str = url(
        "CELERY_BROKER_URL",
        DEFAULT_REDIS_URL,
        "Celery's broker",
        schemes=BROKER_SCHEMES,
        same_as="redis_url",
        shown="`REDIS_URL`",
    )
    redis_cluster: bool = flag(
        "REDIS_CLUSTER",
        "`1` when `REDIS_URL` is a Redis Cluster node (the Celery broker must stay a plain Redis)",
    )
    database_url: str = url(
        "DATABASE_URL",
        DEFAULT_DATABASE_URL,
        "the ledger; `postgresql://…` in production",
        schemes=DATABASE_SCHEMES,
    )
    prefix: str = text("BILLING_PREFIX", "billing", "key prefix of every Redis key")
    # At most MAX_PARTITIONS: streams a count change leaves behind are found by name up to it
    # (``worker.consumer.partitions``), so a larger count could strand some.
    partitions: int = integer(
        "BILLING_PARTITIONS",
        1,
        f"notification streams `billing:events:<p>` (at most {MAX_PARTITIONS}; change it freely,"
        " see Operations)",
        minimum=1,
        maximum=MAX_PARTITIONS,
    )
    batch_size: int = integer("BILLING_BATCH_SIZE", 200, "notifications per batch", minimum=1)
    claim_idle_ms: int = integer(
        "BILLING_CLAIM_IDLE_MS", 60_000, "claim entries a dead consumer left pending this long"
    )
    sweep_idle_ms: int = integer(
        "BILLING_SWEEP_IDLE_MS",
        300_000,
        "finalize a call whose `close` never came after this silence",
    )
    grace_seconds: int = integer(
        "BILLING_GRACE_SECONDS", 3_600, "how long an unsettled call may still settle late"
    )
    recheck_seconds: int = integer(
        "BILLING_RECHECK_SECONDS",
        30,
        "how often an unsettled call's stream is re-read for late data",
        minimum=1,
    )
    resolve_policy: str = choice(
        "BILLING_RESOLVE_POLICY",
        RESOLVE_POLICIES,
        "after grace: "
        + ", ".join(f"`{p}`" for p in RESOLVE_POLICIES[:-1])
        + f" or `{RESOLVE_POLICIES[-1]}`",
    )
    price_book: str | None = optional_text(
        "BILLING_PRICE_BOOK",
        "TOML override rows used instead of `worker/data/prices.toml` (the bundled list and the"
        " database's rows still apply)",
        shown="bundled",
    )
    # The fingerprint key when BILLING_HASH_SALT is set; None: the deployment's stored secret, which
    # ``worker.fingerprint_key.with_key`` fills in. There is no default: a known key is no key.
    hash_salt: str | None = secret(
        "BILLING_HASH_SALT",
        "key of the prompt fingerprints; unset, `billing db upgrade` generates one and stores it in"
        " the database ([operations](docs/operations.md#the-fingerprint-key))",
        shown="unset: a secret per deployment",
    )
    drain_ms: int = integer("BILLING_DRAIN_MS", 2_000, "how long one drain task reads", minimum=100)
    block_ms: int = integer(
        "BILLING_BLOCK_MS", 200, "how long a drain task blocks per read", minimum=1
    )
    sweep_interval_seconds: int = integer(
        "BILLING_SWEEP_INTERVAL_SECONDS", 10, "beat period of the sweeper", minimum=1
    )
    stream_ttl_seconds: int = integer(
        "BILLING_STREAM_TTL_SECONDS", 86_400, "TTL the publisher sets on call streams", minimum=1
    )
    spool_dir: str = text(
        "BILLING_SPOOL_DIR",
        "var/spool",
        "the LiteLLM hook's spool: where its tee appends what Redis could not take"
        " ([gateway](docs/gateway.md#the-tee-publishing-that-never-slows-the-user))",
    )
    tee_linger_ms: int = integer(
        "BILLING_TEE_LINGER_MS",
        TEE_LINGER_MS,
        "the LiteLLM hook's tee: how long a call's events wait to be written with others; each"
        " write wakes a thread, so a longer wait costs the proxy less CPU, but a call reaches"
        " Redis up to this much later, and a proxy killed outright loses what waited"
        " ([gateway](docs/gateway.md#the-tee-publishing-that-never-slows-the-user))",
        minimum=1,
        maximum=10_000,
    )
    metrics_dir: str | None = optional_text(
        "PROMETHEUS_MULTIPROC_DIR",
        "the empty directory where worker processes write their metrics (`billing worker` uses"
        " `var/prometheus`; it refuses a directory holding anything but metric files)",
    )
    # May carry a token in its path (Slack): log it only through ``worker.alerts.config.redact``.
    alert_webhook_url: str | None = optional_text(
        "BILLING_ALERT_WEBHOOK_URL",
        "webhook the alerts are POSTed to (Slack-compatible); unset: log only",
    )
    alert_window_seconds: int = integer(
        "BILLING_ALERT_WINDOW_SECONDS",
        300,
        "alert window: each alert kind pages at most once per window ([alerts](docs/alerts.md))",
        minimum=5,
    )
    alert_digest_seconds: int = integer(
        "BILLING_ALERT_DIGEST_SECONDS",
        3_600,
        "windows that do not page go to one digest per alert kind this often (a multiple of the"
        " alert window)",
        minimum=5,
    )
    exposure_page_micros: int = usd(
        "BILLING_EXPOSURE_PAGE_USD",
        10_000_000,
        "page when a window's exposure (USD, up to 6 decimals) reaches this; `0`: never on exposure",
    )
    unsettled_rate_pct: int = integer(
        "BILLING_UNSETTLED_RATE_PCT",
        5,
        "page when this share of a window's streams is unsettled",
        minimum=1,
    )
    drift_alert_pct: int = integer(
        "BILLING_DRIFT_ALERT_PCT",
        10,
        "alert when a model's median reported-vs-estimated drift passes this",
        minimum=1,
    )
    drift_window_seconds: int = integer(
        "BILLING_DRIFT_WINDOW_SECONDS", 3_600, "window of the drift median", minimum=60
    )
    parity_window_seconds: int = integer(
        "BILLING_PARITY_WINDOW_SECONDS",
        3_600,
        "streamed/non-streamed twins must be this close in time",
        minimum=1,
    )
    non_streamable_models: tuple[str, ...] = prefixes(
        "BILLING_NON_STREAMABLE_MODELS", "comma-separated model prefixes that must not stream"
    )
    # Read by the LiteLLM proxy hook (worker/gateway/litellm_hook.py), in the proxy's process.
    litellm_account: str = text(
        "BILLING_LITELLM_ACCOUNT",
        "team,user,key",
        "LiteLLM proxy hook: who pays, the first found of `team`, `user`, `key`, `end_user`"
        " ([gateway](docs/gateway.md))",
    )
    # Read by both gateways (worker/gateway/routes.py): what they do with a path they do not bill.
    unbilled_routes: str = choice(
        "BILLING_UNBILLED_ROUTES",
        ("refuse", "pass"),
        "a path or LiteLLM call type the gateway does not bill (not a billed endpoint, a model list"
        " or a health check): `refuse` answers 403 `route_not_billed`; `pass` serves it unbilled,"
        " recorded as the anomaly `unbilled_route` and alerted ([gateway](docs/gateway.md))",
    )
    # Spend control (docs/gateway.md "Spend control"): read by the gateway and by the sync task.
    authorize: bool = flag(
        "BILLING_AUTHORIZE",
        "spend control: the gateway takes each call's hold from the Redis authorization store"
        " before the upstream call (402 when it does not fit); the worker keeps the store in sync",
    )
    auth_unreachable: str = choice(
        "BILLING_AUTH_UNREACHABLE",
        ("open", "closed"),
        "when Redis cannot authorize: `open` serves the call unchecked (counted, flagged"
        " `admitted_unchecked`), `closed` refuses it with 503",
    )
    auth_unknown_account: str = choice(
        "BILLING_AUTH_UNKNOWN_ACCOUNT",
        ("refuse", "default_budget"),
        "an account with no funds, credit limit or budget: `refuse` (402) or give it"
        " `BILLING_AUTH_DEFAULT_BUDGET_USD`; the worker's setting decides (its sync writes it"
        " into the store, which the gateways follow)",
    )
    auth_default_budget_micros: int = usd(
        "BILLING_AUTH_DEFAULT_BUDGET_USD",
        0,
        "the budget of an account with no funds, credit limit or budget of its own"
        " (with `default_budget`)",
    )
    auth_default_period: str = choice(
        "BILLING_AUTH_DEFAULT_PERIOD", ("day", "month"), "the default budget's period (UTC)"
    )
    auth_unpriced_hold_micros: int = usd(
        "BILLING_AUTH_UNPRICED_HOLD_USD",
        0,
        "the hold of a call whose model the price book does not price; `0`: such a call is"
        " refused (400 `model_not_priced`), never held at 0",
    )
    auth_timeout_ms: int = integer(
        "BILLING_AUTH_TIMEOUT_MS",
        1000,
        "the gateway's Redis timeout for an authorization (connecting, then the answer; a refused"
        " connection is at once); past it, `BILLING_AUTH_UNREACHABLE`",
        minimum=1,
    )
    auth_sync_seconds: int = integer(
        "BILLING_AUTH_SYNC_SECONDS",
        5,
        "how often the worker recomputes the authorization store from the ledger (and rebuilds"
        " it after a Redis loss); top-ups and budgets take effect within this",
        minimum=1,
    )
    auth_stale_seconds: int = integer(
        "BILLING_AUTH_STALE_SECONDS",
        3_600,
        "a hold authorized but never recorded by the worker is dropped (and reported) after this",
        minimum=60,
    )
    # Limits and retention (docs/operations.md "Limits and retention").
    batch_bytes: int = integer(
        "BILLING_BATCH_BYTES",
        64 << 20,
        "bytes of call streams (as Redis counts them) one batch reads at most; the rest wait for"
        " the next batch",
        minimum=1,
        shown="`67108864` (64 MiB)",
    )
    dead_letter_maxlen: int = integer(
        "BILLING_DEAD_LETTER_MAXLEN",
        100_000,
        "the dead-letter stream is capped near this many entries, oldest dropped first",
        minimum=1,
    )
    alert_retention_days: int = integer(
        "BILLING_ALERT_RETENTION_DAYS",
        30,
        "`alert_events` and `alert_outbox` rows are purged after this many days; `0` keeps them",
    )
    anomaly_retention_days: int = integer(
        "BILLING_ANOMALY_RETENTION_DAYS",
        90,
        "`anomalies` rows are purged after this many days; `0` keeps them",
    )
    low_balance_micros: int = usd(
        "BILLING_LOW_BALANCE_USD",
        0,
        "alert (`low_balance`) when a funded account's spendable balance falls below this; below"
        " zero always alerts; `0`: the threshold alert is off",
    )
    upstream_leak_micros: int = usd(
        "BILLING_UPSTREAM_LEAK_USD",
        1_000_000,
        "alert (`upstream_leakage`) when a day's upstream usage with no call in the ledger costs this"
        " much at our prices; `0`: not on cost",
    )
    upstream_leak_pct: int = integer(
        "BILLING_UPSTREAM_LEAK_PCT",
        1,
        "...or when its leaked tokens are this share of the day's upstream tokens; `0`: not on share",
        maximum=100,
    )
    invoice_prefix: str = text(
        "BILLING_INVOICE_PREFIX",
        "INV",
        "invoice numbers are `<prefix>-000001`, `<prefix>-000002`, ... (`billing invoice`)",
    )
    credit_note_prefix: str = text(
        "BILLING_CREDIT_NOTE_PREFIX",
        "CN",
        "credit notes are numbered apart from invoices, `<prefix>-000001`, ...; not the invoice prefix",
    )
    invoice_due_days: int = integer(
        "BILLING_INVOICE_DUE_DAYS",
        30,
        "an invoice is due this many days after it is finalized",
        maximum=365,
    )
    invoice_issuer_name: str | None = optional_text(
        "BILLING_INVOICE_ISSUER_NAME",
        "who issues the invoices (your company's legal name); unset: `billing invoice` refuses",
    )
    invoice_issuer_address: str | None = optional_text(
        "BILLING_INVOICE_ISSUER_ADDRESS", "the issuer's postal address, lines separated by `;`"
    )
    invoice_issuer_email: str | None = optional_text(
        "BILLING_INVOICE_ISSUER_EMAIL", "the issuer's billing e-mail, printed on invoices"
    )
    invoice_issuer_tax_id: str | None = optional_text(
        "BILLING_INVOICE_ISSUER_TAX_ID", "the issuer's tax id (VAT number), printed on invoices"
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every declared variable read and checked, in declaration order; the first bad one raises
        ``ValueError`` naming it. Unset or empty means the default."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for settings_field in fields(cls):
            d = declaration(settings_field)
            value = d.read(env, d)
            if value is None:
                value = values[d.same_as] if d.same_as else d.default
            values[settings_field.name] = value
        if values["alert_digest_seconds"] % values["alert_window_seconds"]:
            raise ValueError(
                "BILLING_ALERT_DIGEST_SECONDS must be a multiple of BILLING_ALERT_WINDOW_SECONDS"
                f" ({values['alert_window_seconds']}), got {values['alert_digest_seconds']}"
            )
        return cls(**values)


DECLARATIONS: tuple[Declaration, ...] = tuple(declaration(f) for f in fields(Settings))
# Every environment variable the worker reads, for the deployment files and their test
# (tests/deploy/test_compose.py checks that nothing else in the package reads another).
ENV_VARS: tuple[str, ...] = tuple(d.env for d in DECLARATIONS)


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


def sqlite_file(database_url: str) -> Path | None:
    """The file of a relative or absolute SQLite file URL; None for any other URL (in memory)."""
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and ":memory:" not in database_url:
        return Path(database_url[len(prefix) :].split("?", 1)[0])
    return None


def ensure_sqlite_dir(database_url: str) -> None:
    """Create the directory of a relative or absolute SQLite file URL, so the default just works."""
    path = sqlite_file(database_url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
