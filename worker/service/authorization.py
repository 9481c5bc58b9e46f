"""The sync task of spend control: the Redis authorization store recomputed from the ledger.

The ledger stays the truth (``worker.contract.authorization`` is its fast copy). Each run, under a
Redis lock so that two runs never interleave:

1. one database snapshot (REPEATABLE READ on PostgreSQL; one read transaction on SQLite) gives each
   account's funds, charges, budgets, the current day's and month's spend (on the Redis server's
   clock; near a period's bound, the neighbouring period's too: a call counts in the period of its
   own ``created_at``, ``worker.ledger.spend.period_windows``), and its open holds; every model
   named by a budget, a charge or a hold is named by ``PriceBook.budget_model``, as the gateway
   names a call's model, so one model's budget counts all its spellings;
2. then the store's calls are read, and their state looked up in that same snapshot. A call the
   gateway authorized after the snapshot was taken cannot be closed in it (a call is authorized
   before it is published), so nothing is counted twice;
3. each account's figures are installed in one script (``AuthorizationStore.install``): the calls
   the ledger closed leave the store (their charge is in ``charged`` now), a call authorized but
   never recorded is dropped after ``stale_after``, an open hold the store lacks is added.

Every correction is a row in ``authorization_corrections`` with its amount: ``missed_release`` (the
ledger closed the call more than ``missed_after`` ago and the store still held it),
``never_recorded`` (authorized, never published), ``unauthorized_hold`` (a hold the store never
took: a call admitted unchecked, or a gateway without authorization), ``unseen_charge`` (a charge
that moved the ledger past what the store accounted for). A rebuild (the store's ``ready`` key
absent: Redis restarted or lost its data) records none, and sets ``ready`` only once every
account is installed, so authorizations resume on a whole store; the ``ready`` key holds the
worker's policy for accounts the store does not know (``BILLING_AUTH_UNKNOWN_ACCOUNT`` and the default
budget), written again by every run, which the authorization script follows. Before it starts, the calls
authorized before the loss must be in the ledger: the first rebuilding run notes the tip of every
notification stream (``events``) and does nothing more; a later run rebuilds once the consumer
group has read and acknowledged everything up to those tips (``backlog_passed``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import insert
from sqlalchemy.orm import Session

from models import AuthorizationCorrection
from worker.config import Settings
from worker.contract.authorization import (
    AuthorizationStore,
    budget_field,
    day_scope,
    month_scope,
    spent_field,
)
from worker.contract.keys import Keys
from worker.core.prices import PriceBook
from worker.ledger.spend import AccountSpend, call_states, spend_snapshot

log = logging.getLogger(__name__)

corrections = AuthorizationCorrection.__table__
LOCK_SECONDS = 120


@dataclass
class SyncStats:
    accounts: int = 0
    rebuilt: bool = False
    waiting: bool = False  # a rebuild waits for the calls published before it to be recorded
    removed: int = 0
    corrections: list[dict[str, Any]] = field(default_factory=list)

    def corrected_micros(self) -> int:
        return sum(abs(c["amount_micros"]) for c in self.corrections)


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    unknown: str = "refuse"  # BILLING_AUTH_UNKNOWN_ACCOUNT
    default_budget: int = 0  # micros, for an account without funds under ``default_budget``
    default_period: str = "day"
    stale_after: timedelta = timedelta(hours=1)  # an authorized call never recorded is dropped
    missed_after: timedelta = timedelta(seconds=60)  # a release later than this is a correction

    @classmethod
    def from_settings(cls, settings: Settings) -> SyncPolicy:
        return cls(
            unknown=settings.auth_unknown_account,
            default_budget=settings.auth_default_budget_micros,
            default_period=settings.auth_default_period,
            stale_after=timedelta(seconds=settings.auth_stale_seconds),
        )


def _fields(
    spend: AccountSpend, policy: SyncPolicy, model_of: Callable[[str], str]
) -> dict[str, int]:
    """The account's budget limits and its periods' ledger spend, each per-model figure under the
    model's budget name (``model_of``: ``PriceBook.budget_model``, as the gateway names the call's
    model): budgets naming one model in two ways keep the lower limit; spend under several names
    of one model is summed."""
    found: dict[str, int] = {}
    for (period, model), limit in spend.budgets.items():
        name = budget_field(period, model_of(model) if model else "")
        found[name] = min(limit, found.get(name, limit))
    if spend.funds is None and policy.unknown == "default_budget":
        found.setdefault(budget_field(policy.default_period), policy.default_budget)
    for (scope, model), amount in spend.scoped.items():
        name = spent_field(scope, model_of(model) if model else "")
        found[name] = found.get(name, 0) + amount
    return found


def _entry(request_id: str, amount: int, created_at: datetime, model: str) -> dict[str, Any]:
    """A hold the ledger has and the store lacks, as the store keeps a call (``model``: its
    budget name)."""
    return {
        "r": request_id,
        "a": str(amount),
        "s": "h",
        "d": day_scope(created_at),
        "m": month_scope(created_at),
        "o": model,
        "t": str(int(created_at.timestamp() * 1000)),
    }


def _governed(spend: AccountSpend, policy: SyncPolicy) -> bool:
    return spend.funds is not None or bool(spend.budgets) or policy.unknown == "default_budget"


def _snapshot(session: Session) -> None:
    """The transaction's first statement: on PostgreSQL, one snapshot for all its reads."""
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def _stream_id(value: bytes | str) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def backlog_passed(store: AuthorizationStore, events: tuple[Any, Keys] | None) -> bool:
    """Whether the notifications published before the rebuild began are all acknowledged (their
    calls are in the ledger). The first call notes each stream's tip and answers False."""
    if events is None:
        return True
    client, keys = events
    noted_key = f"{store.prefix}:auth:rebuild-tips"
    noted = store.client.hgetall(noted_key)
    if not noted:
        tips = {}
        for stream in keys.all_events():
            try:
                tips[stream] = client.xinfo_stream(stream)["last-generated-id"]
            except redis.ResponseError:  # no such stream: nothing to wait for
                continue
        store.client.hset(noted_key, mapping={"": "", **tips})
        return False
    for stream, tip in noted.items():
        name = stream.decode() if isinstance(stream, bytes) else stream
        if not name:
            continue
        try:
            groups = {g["name"]: g for g in client.xinfo_groups(name)}
            group = groups.get(keys.group.encode()) or groups.get(keys.group)
            if group is None or _stream_id(group["last-delivered-id"]) < _stream_id(tip):
                return False
            pending = client.xpending(name, keys.group)
            if pending["pending"] and _stream_id(pending["min"]) <= _stream_id(tip):
                return False
        except redis.ResponseError:  # the stream went away: nothing left of it to wait for
            continue
    store.client.delete(noted_key)
    return True


def sync(
    sessions: Callable[[], Session],
    store: AuthorizationStore,
    policy: SyncPolicy,
    *,
    now: datetime | None = None,
    accounts: Sequence[str] | None = None,
    events: tuple[Any, Keys] | None = None,
    book: PriceBook | None = None,
) -> SyncStats:
    """One run (see the module docstring); returns what it did. Another run holding the lock:
    nothing done. ``accounts``: only these (a test, an operator's look at one account); a
    rebuild always takes every account. ``events``: the Redis client and keys of the notification
    streams, whose backlog a rebuild waits for (``backlog_passed``). ``book``: the worker's price
    book, whose ``budget_model`` names each model's budgets and spend as the gateway names a call's
    (None: models as the ledger records them). ``now`` (default: the Redis server's clock, the one
    the store's periods are read on) picks the periods whose spend is installed."""
    lock = store.client.lock(f"{store.prefix}:auth:sync-lock", timeout=LOCK_SECONDS)
    if not lock.acquire(blocking=False):
        return SyncStats()
    try:
        if not store.is_ready() and not backlog_passed(store, events):
            return SyncStats(rebuilt=False, waiting=True)
        model_of = book.budget_model if book is not None else _as_recorded
        return _sync(sessions, store, policy, now or redis_now(store), accounts, model_of)
    finally:
        try:
            lock.release()
        except Exception:  # expired or Redis gone: the next run takes it again
            log.warning("authorization sync: lock not released")


def _as_recorded(model: str) -> str:
    return model


def redis_now(store: AuthorizationStore) -> datetime:
    """The Redis server's clock (``TIME``)."""
    seconds, micros = store.client.time()
    return datetime.fromtimestamp(int(seconds) + int(micros) / 1e6, UTC)


def _sync(
    sessions: Callable[[], Session],
    store: AuthorizationStore,
    policy: SyncPolicy,
    now: datetime,
    only: Sequence[str] | None,
    model_of: Callable[[str], str],
) -> SyncStats:
    stats = SyncStats(rebuilt=not store.is_ready())
    if stats.rebuilt:
        only = None
    with sessions() as session, session.begin():
        _snapshot(session)
        snapshot = spend_snapshot(session, now, only)
        in_store = set(store.accounts()) if only is None else set(only)
        accounts = sorted(
            in_store | {a for a, spend in snapshot.items() if _governed(spend, policy)}
        )
        calls = {account: store.calls(account) for account in accounts}
        states = call_states(session, [rid for found in calls.values() for rid in found])
    for account in accounts:
        spend = snapshot.get(account) or AccountSpend(account, funds=None, charged=0)
        stats.corrections.extend(
            _install(store, spend, calls[account], states, policy, now, stats, model_of)
        )
        stats.accounts += 1
    rule = (policy.unknown, policy.default_budget, policy.default_period)
    if stats.rebuilt:
        store.mark_ready(*rule)
        stats.corrections = []  # a rebuild's additions are the store being built, not corrected
    else:
        store.keep_policy(*rule)
    if stats.corrections:
        with sessions() as session, session.begin():
            session.execute(insert(corrections), stats.corrections)
        log.warning(
            "authorization sync: %d corrections, %d micros",
            len(stats.corrections),
            stats.corrected_micros(),
        )
    return stats


def awaiting_no_record(store: AuthorizationStore, request_ids: list[str]) -> list[str]:
    """Of the stale holds the ledger does not know, those no record will ever come for: a call
    whose stream still exists in Redis was admitted (its admission record heads the stream,
    written by the script that took the hold) and the worker will record it, however far behind
    it is; only a hold without one is dropped."""
    if not request_ids:
        return []
    keys = Keys(store.prefix)
    pipe = store.client.pipeline(transaction=False)
    for rid in request_ids:
        pipe.exists(keys.request(rid))
    found = pipe.execute()
    return [rid for rid, exists in zip(request_ids, found, strict=True) if not exists]


def _install(
    store: AuthorizationStore,
    spend: AccountSpend,
    calls: dict[str, dict[str, Any]],
    states: dict[str, Any],
    policy: SyncPolicy,
    now: datetime,
    stats: SyncStats,
    model_of: Callable[[str], str],
) -> Iterable[dict[str, Any]]:
    account = spend.account_id
    closed = [rid for rid in calls if rid in states and not states[rid].open]
    stale = int((now - policy.stale_after).timestamp() * 1000)
    dropped = awaiting_no_record(
        store,
        [
            rid
            for rid, call in calls.items()
            if rid not in states and call.get("s") == "h" and int(call.get("t", 0)) < stale
        ],
    )
    added = [
        _entry(rid, amount, created_at, model_of(model))
        for rid, (amount, created_at, model) in spend.open_holds.items()
        if rid not in calls
    ]
    done = store.install(
        account,
        funds=spend.funds,
        charged=spend.charged,
        fields=_fields(spend, policy, model_of),
        closed=closed,
        dropped=dropped,
        added=added,
    )
    stats.removed += len(closed)

    def correction(kind: str, amount: int, request_id: str | None, detail: str) -> dict[str, Any]:
        return {
            "account_id": account,
            "kind": kind,
            "amount_micros": amount,
            "request_id": request_id,
            "detail": detail,
            "detected_at": now,
        }

    found = []
    for rid in done.missed:
        state = states[rid]
        if state.updated_at < now - policy.missed_after:
            hold = int(calls[rid]["a"])
            found.append(correction(
                "missed_release", state.charged - hold, rid,
                f"closed at {state.updated_at.isoformat()}, still held ({hold} micros)"))  # fmt: skip
    for rid in done.dropped:
        hold = int(calls[rid]["a"])
        found.append(correction(
            "never_recorded", -hold, rid,
            f"authorized {hold} micros over {policy.stale_after} ago; no call recorded"))  # fmt: skip
    for rid in done.added:
        amount = spend.open_holds[rid][0]
        found.append(correction(
            "unauthorized_hold", amount, rid, f"open hold of {amount} micros the store never took"))  # fmt: skip
    if done.old_charged is not None:
        counted = sum(states[rid].charged for rid in closed)
        unseen = spend.charged - done.old_charged - counted
        if unseen:
            found.append(correction(
                "unseen_charge", unseen, None,
                f"the ledger charged {spend.charged} micros, the store accounted for "
                f"{done.old_charged + counted}"))  # fmt: skip
    return found
