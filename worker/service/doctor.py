"""The checks behind ``billing doctor``: is this deployment able to settle calls right now?

Each check returns a ``Check`` — ok or a problem, one line of detail and, for a problem, one line of
advice — and never raises: an exception is itself the finding. Checks that need a service which just
failed are skipped rather than failing twice. URLs are redacted before they reach any detail.
Every check only reads: nothing here creates a database, a table or a Redis key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from worker import fingerprint_key
from worker.config import Settings, redact_url, sqlite_file
from worker.consumer.backlog import dead_letter_count, live_consumers, read_backlog
from worker.consumer.poison import MAX_DELIVERIES
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # "ok", "problem" or "skip"
    detail: str
    advice: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class Limits:
    max_lag: int = 10_000
    """Notifications not yet delivered beyond which the workers are behind."""
    max_dead: int = 0
    """Dead letters tolerated before the check is a problem (someone should look at each)."""
    max_deliveries: int = MAX_DELIVERIES
    """Deliveries of one notification beyond which it keeps failing: the consumer should have
    dead-lettered it at ``MAX_DELIVERIES``."""


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def problem(name: str, detail: str, advice: str) -> Check:
    return Check(name, "problem", detail, advice)


def skip(name: str, needs: str) -> Check:
    return Check(name, "skip", f"needs {needs}")


def first_line(exc: BaseException) -> str:
    text_ = str(getattr(exc, "orig", None) or exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__


@dataclass
class Context:
    """What the checks share: the settings and the connections they opened (closed by ``close``)."""

    env: Mapping[str, str]
    limits: Limits = field(default_factory=Limits)
    settings: Settings | None = None
    client: Any = None
    engine: Engine | None = None
    failed: set[str] = field(default_factory=set)

    def close(self) -> None:
        if self.client is not None:
            with suppress(Exception):
                self.client.close()
        if self.engine is not None:
            self.engine.dispose()


def _nodes(client: Any) -> list[Any]:
    """Plain clients for every master (one for a plain Redis)."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


# -- the checks --------------------------------------------------------------------------------


def check_config(ctx: Context) -> Iterator[Check]:
    try:
        ctx.settings = Settings.from_env(ctx.env)
    except ValueError as exc:
        yield problem("config", str(exc), "fix that variable in the environment or .env")
        return
    s = ctx.settings
    book = s.price_book
    if book and not Path(book).is_file():
        yield problem(
            "config", f"BILLING_PRICE_BOOK {book} is not a file", "point it at a TOML price book"
        )
        return
    yield ok(
        "config",
        f"prefix {s.prefix}, {s.partitions} partition(s), batch {s.batch_size}, "
        f"resolve policy {s.resolve_policy}{', Redis Cluster' if s.redis_cluster else ''}",
    )


def check_redis(ctx: Context) -> Iterator[Check]:
    from worker.service.runtime import redis_client

    assert ctx.settings is not None
    url, cluster = ctx.settings.redis_url, ctx.settings.redis_cluster
    where = redact_url(url)
    try:
        ctx.client = redis_client(url, cluster=cluster)
        ctx.client.ping()
        nodes = _nodes(ctx.client)
        infos = [node.info() for node in nodes]
    except Exception as exc:  # connection refused, auth, TLS, cluster discovery…
        yield problem(
            "redis",
            f"{where}: {first_line(exc)}",
            "start Redis or fix REDIS_URL (host, port, password, rediss:// for TLS)",
        )
        return
    enabled = any(info.get("cluster_enabled") for info in infos)
    if enabled and not cluster:
        yield problem(
            "redis", f"{where} is a Redis Cluster node", "set REDIS_CLUSTER=1 for the workers"
        )
        return
    policies = set()
    for node in nodes:
        with suppress(redis.RedisError):  # managed services may refuse CONFIG
            policies.add(node.config_get("maxmemory-policy").get("maxmemory-policy"))
    bad = sorted(p for p in policies if p and p != "noeviction")
    if bad:
        yield problem(
            "redis",
            f"{where}: maxmemory-policy {', '.join(bad)} may evict call streams before billing",
            "set maxmemory-policy noeviction (and alert on memory instead)",
        )
        return
    version = infos[0].get("redis_version", "?")
    shape = f"cluster of {len(nodes)} masters" if cluster else "single node"
    yield ok("redis", f"{where} answers (Redis {version}, {shape})")


def check_broker(ctx: Context) -> Iterator[Check]:
    assert ctx.settings is not None
    url = ctx.settings.broker_url
    where = redact_url(url)
    if url == ctx.settings.redis_url and "redis" in ctx.failed:
        yield skip("broker", "redis (the same URL)")
        return
    if url == ctx.settings.redis_url and ctx.settings.redis_cluster:
        yield problem(
            "broker",
            "the broker is REDIS_URL, a Redis Cluster",
            "point CELERY_BROKER_URL at a plain (non-cluster) Redis: Celery cannot use a cluster",
        )
        return
    if not url.startswith(("redis://", "rediss://", "unix://")):
        yield ok("broker", f"{where} (not Redis: not checked)")
        return
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
        enabled = client.info("cluster").get("cluster_enabled")
    except redis.RedisError as exc:
        yield problem(
            "broker", f"{where}: {first_line(exc)}", "start the broker or fix CELERY_BROKER_URL"
        )
        return
    finally:
        client.close()
    if enabled:
        yield problem(
            "broker",
            f"{where} is a Redis Cluster node",
            "point CELERY_BROKER_URL at a plain (non-cluster) Redis: Celery cannot use a cluster",
        )
        return
    yield ok("broker", f"{where} answers")


def check_database(ctx: Context) -> Iterator[Check]:
    from worker.ledger.database import make_engine

    assert ctx.settings is not None
    url = ctx.settings.database_url
    where = redact_url(url)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        yield problem(
            "database",
            f"{where}: the file does not exist",
            "run `billing db upgrade` (it creates and migrates the file), or fix DATABASE_URL",
        )
        return
    try:
        ctx.engine = make_engine(url, readonly=True)
        with ctx.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, ImportError, ValueError) as exc:  # ValueError: a bad port
        yield problem(
            "database",
            f"{where}: {first_line(exc)}",
            "start the database or fix DATABASE_URL (host, credentials, database name)",
        )
        return
    yield ok("database", f"{where} answers ({ctx.engine.dialect.name})")


def check_migrations(ctx: Context) -> Iterator[Check]:
    from worker.db.schema import revisions

    assert ctx.engine is not None
    try:
        with ctx.engine.connect() as conn:
            found = revisions(conn)
    except SQLAlchemyError as exc:
        yield problem("migrations", first_line(exc), "check the database user's read rights")
        return
    if found.at_head:
        yield ok("migrations", f"at head {found.heads_shown()}")
        return
    if found.ahead:
        yield problem(
            "migrations",
            f"at {found.shown()}, which this code does not know (head {found.heads_shown()})",
            "the database is newer than this release: deploy the release that migrated it",
        )
        return
    yield problem(
        "migrations",
        f"at {found.shown()}, head is {found.heads_shown()}",
        "run `billing db upgrade` before starting workers of this release",
    )


def check_fingerprint_key(ctx: Context) -> Iterator[Check]:
    """Where the key of the fingerprints comes from; never its value."""
    assert ctx.settings is not None and ctx.engine is not None
    name = "fingerprint-key"
    try:
        with ctx.engine.connect() as conn:
            has_stored = fingerprint_key.stored(conn) is not None
    except SQLAlchemyError as exc:
        yield problem(name, first_line(exc), "check the database user's read rights")
        return
    if ctx.settings.hash_salt:
        also = ", which wins over the one stored in the database" if has_stored else ""
        yield ok(name, f"configured (BILLING_HASH_SALT{also}): every process must see it")
    elif has_stored:
        yield ok(name, "stored in the database (deployment_secrets)")
    else:
        yield problem(
            name,
            "BILLING_HASH_SALT is unset and the database stores no key: workers refuse to start",
            "run `billing db upgrade` (it generates one), or set BILLING_HASH_SALT to a secret",
        )


def check_vocabularies(ctx: Context) -> Iterator[Check]:
    from worker.core.vocab import VOCABULARIES, verify_vocabularies

    try:
        problems = verify_vocabularies()
    except Exception as exc:
        problems = [first_line(exc)]
    if problems:
        yield problem(
            "vocabularies",
            "; ".join(problems),
            "reinstall the package: the shipped tiktoken files are damaged or missing",
        )
        return
    yield ok("vocabularies", f"{', '.join(VOCABULARIES)} match their checksums")


def check_backlog(ctx: Context) -> Iterator[Check]:
    assert ctx.settings is not None
    limits = ctx.limits
    claim_ms = ctx.settings.claim_idle_ms
    keys = Keys(ctx.settings.prefix, ctx.settings.partitions)
    try:
        backlog = read_backlog(ctx.client, keys)
    except redis.RedisError as exc:
        yield problem("backlog", first_line(exc), "check Redis; the streams could not be read")
        return
    for item in backlog:
        name = f"stream {item.stream}"
        if not item.group:
            if item.length:
                yield problem(
                    name,
                    f"{item.length} notifications and no consumer group",
                    "start the workers (`celery -A worker.service.app worker` and one beat)",
                )
            else:
                yield ok(name, "empty, no worker has read it yet")
            continue
        lag = "unknown" if item.lag is None else str(item.lag)
        live, gone = live_consumers(ctx.client, item.stream, keys.group, claim_ms)
        gone_note = f" ({gone} gone: idle over {claim_ms // 1000}s)" if gone else ""
        detail = f"lag {lag}, pending {item.pending}, {live} live consumer(s){gone_note}"
        idle, deliveries = item.oldest_pending_idle_ms, item.oldest_pending_deliveries
        if item.lag is not None and item.lag > limits.max_lag:
            yield problem(
                name,
                f"{detail}: workers are behind",
                "add worker processes or hosts (docs/operations.md, scale out); check the database",
            )
        elif idle is not None and idle > 2 * claim_ms:
            yield problem(
                name,
                f"{detail}: oldest unacknowledged entry idle {idle // 1000}s, nobody claims it",
                "no live worker reads this stream: check that workers and beat are running",
            )
        elif deliveries is not None and deliveries > limits.max_deliveries:
            yield problem(
                name,
                f"{detail}: oldest unacknowledged entry delivered {deliveries} times",
                "a call keeps failing in the database: read the workers' 'deferred' log lines",
            )
        else:
            yield ok(name, detail)


def check_dead_letters(ctx: Context) -> Iterator[Check]:
    assert ctx.settings is not None
    keys = Keys(ctx.settings.prefix, ctx.settings.partitions)
    try:
        count = dead_letter_count(ctx.client, keys)
    except redis.RedisError as exc:
        yield problem("dead-letters", first_line(exc), "check Redis")
        return
    if count > ctx.limits.max_dead:
        yield problem(
            "dead-letters",
            f"{count} in {keys.dead}",
            f"read them with `redis-cli XRANGE {keys.dead} - + COUNT 20`; "
            f"once handled, `XTRIM {keys.dead} MAXLEN 0`",
        )
        return
    yield ok("dead-letters", f"{count} in {keys.dead}")


def check_authorization(ctx: Context) -> Iterator[Check]:
    """Spend control (``BILLING_AUTHORIZE``): the store is built (else every gateway answers as if
    Redis were down), and how many accounts and calls in flight it holds."""
    assert ctx.settings is not None
    if not ctx.settings.authorize:
        yield ok("authorization", "spend control off (BILLING_AUTHORIZE=0)")
        return
    store = AuthorizationStore(_nodes(ctx.client)[0], ctx.settings.prefix)
    try:
        ready = store.is_ready()
        accounts = store.accounts() if ready else []
    except redis.RedisError as exc:
        yield problem("authorization", first_line(exc), "check Redis")
        return
    if not ready:
        yield problem(
            "authorization",
            f"the store {store.ready_key} is not built: gateways admit unchecked or refuse"
            f" (BILLING_AUTH_UNREACHABLE={ctx.settings.auth_unreachable})",
            "run a worker with BILLING_AUTHORIZE=1 and its beat: the sync task builds it once"
            " the notifications published before are recorded",
        )
        return
    yield ok("authorization", f"store built, {len(accounts)} accounts")


# Name, function, the checks it needs to have passed.
CHECKS: tuple[tuple[str, Callable[[Context], Iterator[Check]], tuple[str, ...]], ...] = (
    ("config", check_config, ()),
    ("redis", check_redis, ("config",)),
    ("broker", check_broker, ("config",)),
    ("database", check_database, ("config",)),
    ("migrations", check_migrations, ("config", "database")),
    ("fingerprint-key", check_fingerprint_key, ("config", "database", "migrations")),
    ("vocabularies", check_vocabularies, ()),
    ("backlog", check_backlog, ("config", "redis")),
    ("dead-letters", check_dead_letters, ("config", "redis")),
    ("authorization", check_authorization, ("config", "redis")),
)
CHECK_NAMES = tuple(name for name, _, _ in CHECKS)


def run(
    env: Mapping[str, str], only: tuple[str, ...] = (), limits: Limits | None = None
) -> Iterator[Check]:
    """Yield each finding as soon as it is known (a slow database should not hide Redis's line).

    ``only`` restricts the checks (their prerequisites run too, e.g. ``config``).
    """
    wanted = set(only or CHECK_NAMES)
    for name, _, needs in CHECKS:
        if name in wanted:
            wanted.update(needs)
    ctx = Context(env, limits or Limits())
    try:
        for name, function, needs in CHECKS:
            if name not in wanted:
                continue
            missing = [need for need in needs if need in ctx.failed]
            if missing:
                ctx.failed.add(name)
                yield skip(name, " and ".join(missing))
                continue
            for finding in function(ctx):
                if not finding.ok:
                    ctx.failed.add(name)
                yield finding
    finally:
        ctx.close()
