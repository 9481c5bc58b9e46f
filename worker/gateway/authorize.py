"""Admission at the gateway: each billed call's write-ahead record, and with spend control its hold,
taken in one Redis step before anything goes upstream (``worker.contract.admission``; docs/gateway.md,
"Trust model" and "Spend control").

``Authorizer.admit_async`` answers with an ``Admission``: admitted, with the ``admission`` entry's
fields the call's ``request`` entry is later published beside (``fields``); admitted *unchecked*
(spend control on, but Redis could not answer or the store is not built yet, and ``unreachable``
is ``open``: the call is served, its entries say ``"authorization": "unchecked"``, which the worker
records as the anomaly ``admitted_unchecked`` and which is counted here); or refused with the
``Refusal`` the client gets: HTTP 402 with an OpenAI-shaped error whose ``code`` is
``insufficient_funds``, ``budget_exceeded`` or ``unknown_account`` and whose extra keys give the
account and the amounts; HTTP 409 when the request id already has a call (``request_id_reused``) or
the idempotency key's call is still in flight (``idempotency_key_in_use``); HTTP 503
``authorization_unavailable`` when Redis cannot answer and ``unreachable`` is ``closed``, and
``billing_unavailable`` when neither Redis nor the spool can take the record: a call that cannot
be recorded is not served. The openai client raises a 402 at once (it retries 408, 409, 429 and
5xx only).

When Redis cannot answer, the record goes to the tee's spool instead (``spool``), synchronously:
the file holds it before the call is served, and the tee replays it when Redis is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import redis
import redis.asyncio

from worker.config import Settings
from worker.contract.admission import IN_FLIGHT, AdmissionScripts, in_flight_key
from worker.contract.authorization import (
    UNKNOWN_POLICIES,
    AuthorizationStore,
    Decision,
    Verdict,
)
from worker.contract.keys import Keys
from worker.contract.publisher import Command, admission_commands, admission_fields, now_ms
from worker.core.money import Micros
from worker.core.request import MAX_RESERVED_MICROS
from worker.gateway.refusals import Refusal

log = logging.getLogger(__name__)

UNREACHABLE_POLICIES = ("open", "closed")
ASYNC_CONNECTIONS = 32  # per gateway process and event loop
SPEND_ERROR = "insufficient_quota"  # the error ``type``: OpenAI's for a quota the caller ran out of


@dataclass(frozen=True, slots=True)
class Admission:
    refusal: Refusal | None = None
    unchecked: bool = False
    # The ``admission`` entry written (or spooled): its fields go with the call's ``request``
    # entry to the tee, which spools them again before the call's writes if it must.
    fields: dict[str, bytes] | None = None
    # The idempotency key's in-flight marker, to clear when the call ends (``finish_async``).
    in_flight: str | None = None


# What the tee offers when Redis cannot take an admission: the commands written to its spool
# before the call is served (True), or not (False: the disk refuses them).
Spool = Callable[[list[Command]], bool]


def _conflict(request_id: str, code: str, message: str) -> Refusal:
    return Refusal(409, message, None, code, "invalid_request_error", (), request_id)


def _unavailable(request_id: str, code: str, message: str) -> Refusal:
    return Refusal(503, message, None, code, "server_error", (), request_id)


def _usd(micros: int) -> str:
    return f"{Micros(micros).usd()} USD"


def spend_refusal(decision: Decision, account_id: str, amount: int, request_id: str) -> Refusal:
    """The 402 a refused decision is answered with."""
    base: tuple[tuple[str, object], ...] = (
        ("account_id", account_id),
        ("requested_micros", amount),
    )
    if decision.verdict is Verdict.INSUFFICIENT_FUNDS:
        spendable = int(decision.spendable or 0)
        return Refusal(
            402,
            f"Insufficient funds: this call needs a hold of {_usd(amount)}; account {account_id} "
            f"can spend {_usd(max(spendable, 0))}. Add funds or raise its credit limit.",
            None,
            "insufficient_funds",
            SPEND_ERROR,
            (*base, ("spendable_micros", spendable)),
            request_id,
        )
    if decision.verdict is Verdict.BUDGET_EXCEEDED:
        limit, used = int(decision.limit or 0), int(decision.used or 0)
        return Refusal(
            402,
            f"Budget exceeded: the {decision.budget} budget of account {account_id} is "
            f"{_usd(limit)}, {_usd(used)} of it is spent or held, and this call needs a hold of "
            f"{_usd(amount)}.",
            None,
            "budget_exceeded",
            SPEND_ERROR,
            (*base, ("budget", decision.budget), ("limit_micros", limit), ("used_micros", used)),
            request_id,
        )
    return Refusal(
        402,
        f"Account {account_id} has no funds, credit limit or budget for this call.",
        None,
        "unknown_account",
        SPEND_ERROR,
        base,
        request_id,
    )


def _async_connection_class(client: redis.Redis) -> type:
    """The ``redis.asyncio`` connection class matching the sync client's (TCP, TLS, socket)."""
    name = client.connection_pool.connection_class.__name__
    return {
        "SSLConnection": redis.asyncio.SSLConnection,
        "UnixDomainSocketConnection": redis.asyncio.UnixDomainSocketConnection,
    }.get(name, redis.asyncio.Connection)


class Authorizer:
    """Takes holds for one gateway process. ``store`` should use a Redis client with short
    timeouts (``for_url``): a slow Redis must not stall the event loop for long.
    ``unreachable``: ``open`` (serve unchecked, the default) or ``closed`` (refuse with 503).
    ``unknown``: ``refuse`` or ``default_budget`` (an account without funds or a budget gets
    ``default_budget`` micros per ``default_period``). ``check_spend``: spend control
    (``BILLING_AUTHORIZE``); off, every call is still admitted with its write-ahead record.
    ``keys``: the contract's keys (prefix and partitions, as the worker's). ``unpriced_hold``:
    with spend control, the hold of a call whose model the price book does not price (0:
    refused, ``holds.unpriced_hold``)."""

    def __init__(
        self,
        store: AuthorizationStore,
        *,
        check_spend: bool = True,
        keys: Keys | None = None,
        unreachable: str = "open",
        unknown: str = "refuse",
        default_budget: int = 0,
        default_period: str = "day",
        unpriced_hold: int = 0,
    ) -> None:
        if unreachable not in UNREACHABLE_POLICIES:
            raise ValueError(f"unreachable: one of {UNREACHABLE_POLICIES}, not {unreachable!r}")
        if unknown not in UNKNOWN_POLICIES:
            raise ValueError(f"unknown: one of {UNKNOWN_POLICIES}, not {unknown!r}")
        if not 0 <= default_budget <= 10**15:
            raise ValueError(f"default_budget out of range: {default_budget}")
        self.store = store
        self.check_spend = check_spend
        self.keys = keys or Keys(store.prefix)
        self.scripts = AdmissionScripts()
        self.unreachable = unreachable
        self.unknown = unknown
        self.default_budget = default_budget
        self.default_period = default_period
        if not 0 <= unpriced_hold <= MAX_RESERVED_MICROS:
            raise ValueError(f"unpriced_hold out of range: {unpriced_hold}")
        # The hold of a call whose model the price book does not price; 0: such a call is refused.
        self.unpriced_hold = unpriced_hold
        self._async_clients: dict[int, Any] = {}
        self.unchecked = 0  # calls admitted without a check (Redis away, store not built)
        self.refused = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Authorizer:
        """The gateway's authorizer as ``BILLING_AUTH_*`` configure it (``REDIS_URL``,
        ``BILLING_PREFIX``)."""
        return cls.for_url(
            settings.redis_url,
            settings.prefix,
            check_spend=settings.authorize,
            keys=Keys(settings.prefix, settings.partitions),
            timeout_ms=settings.auth_timeout_ms,
            unreachable=settings.auth_unreachable,
            unknown=settings.auth_unknown_account,
            default_budget=settings.auth_default_budget_micros,
            default_period=settings.auth_default_period,
            unpriced_hold=settings.auth_unpriced_hold_micros,
        )

    @classmethod
    def for_url(
        cls, url: str, prefix: str = "billing", *, timeout_ms: int = 1000, **options: object
    ) -> Authorizer:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout_ms / 1000, socket_connect_timeout=timeout_ms / 1000
        )
        return cls(AuthorizationStore(client, prefix), **options)  # type: ignore[arg-type]

    async def admit_async(
        self,
        account_id: str,
        request_id: str,
        amount: int,
        at: datetime,
        model: str,
        *,
        facts: dict[str, Any],
        idempotency_key: str | None = None,
        spool: Spool | None = None,
    ) -> Admission:
        """Write the call's admission record ``facts`` (the money facts of its request entry),
        with spend control taking its hold, in one Redis round trip (awaited: the event loop
        serves other calls meanwhile); or say why not (the module's docstring)."""
        in_flight = (
            in_flight_key(self.keys, account_id, idempotency_key) if idempotency_key else None
        )
        auth = self.store.authorize_call(
            account_id, request_id, amount, at, model, **self._policy()
        )
        body = orjson.dumps(facts)
        try:
            answer = await self.scripts.admit(
                self._async_client(), self.keys, auth["keys"], auth["args"],
                request_id=request_id, body=body, check_spend=self.check_spend,
                in_flight=in_flight,
            )  # fmt: skip
            if answer.decision is not None and answer.decision.verdict is Verdict.NOT_READY:
                if self.unreachable == "closed":
                    return self._closed(request_id)
                self.unchecked += 1
                log.warning("billing: %s admitted without a spend check", request_id)
                body = orjson.dumps({**facts, "authorization": "unchecked"})
                answer = await self.scripts.admit(
                    self._async_client(), self.keys, auth["keys"], auth["args"],
                    request_id=request_id, body=body, check_spend=False, in_flight=in_flight,
                )  # fmt: skip
                if answer.at_ms is not None:
                    fields = admission_fields(body, answer.at_ms)
                    return Admission(unchecked=True, fields=fields, in_flight=in_flight)
        except redis.RedisError as exc:
            log.warning("billing: admission store unreachable: %s", type(exc).__name__)
            return self._spooled(facts, request_id, spool)
        if answer.at_ms is not None:
            return Admission(fields=admission_fields(body, answer.at_ms), in_flight=in_flight)
        self.refused += 1
        if answer.refused == IN_FLIGHT:
            return Admission(
                _conflict(
                    request_id,
                    "idempotency_key_in_use",
                    "A call with this Idempotency-Key is still in progress; retry once it ended.",
                )
            )
        if answer.refused is not None:
            return Admission(
                _conflict(
                    request_id,
                    "request_id_reused",
                    f"Request id {request_id} already names a call; each call needs its own.",
                )
            )
        decision = answer.decision or Decision(Verdict.NOT_READY)
        return Admission(spend_refusal(decision, account_id, amount, request_id))

    def _closed(self, request_id: str) -> Admission:
        self.refused += 1
        return Admission(
            _unavailable(
                request_id,
                "authorization_unavailable",
                "Billing authorization is unavailable; retry shortly.",
            )
        )

    def _spooled(self, facts: dict[str, Any], request_id: str, spool: Spool | None) -> Admission:
        """Redis cannot answer: the record goes to the spool before the call is served, or the
        call is refused (503). With spend control and ``unreachable`` ``closed``: refused."""
        if self.check_spend and self.unreachable == "closed":
            return self._closed(request_id)
        if self.check_spend:
            facts = {**facts, "authorization": "unchecked"}
        fields = admission_fields(orjson.dumps(facts), now_ms())
        if spool is None or not spool(admission_commands(self.keys, request_id, fields)):
            self.refused += 1
            log.error(
                "billing: %s refused: neither Redis nor the spool took its admission", request_id
            )
            return Admission(
                _unavailable(
                    request_id,
                    "billing_unavailable",
                    "The call cannot be recorded for billing right now; retry shortly.",
                )
            )
        if self.check_spend:
            self.unchecked += 1
            log.warning("billing: %s admitted without a spend check (spooled)", request_id)
        return Admission(unchecked=self.check_spend, fields=fields)

    async def finish_async(self, admission: Admission, request_id: str) -> None:
        """The call ended: its idempotency key may be used again (never raises; the marker
        expires by itself otherwise)."""
        if admission.in_flight is None:
            return
        try:
            await self.scripts.finish(self._async_client(), admission.in_flight, request_id)
        except redis.RedisError as exc:
            log.warning(
                "billing: idempotency key of %s not cleared: %s", request_id, type(exc).__name__
            )

    def _policy(self) -> dict[str, Any]:
        return {
            "unknown": self.unknown,
            "default_budget": self.default_budget,
            "default_period": self.default_period,
        }

    def _async_client(self) -> Any:
        """A ``redis.asyncio`` client with the sync client's connection settings, one per event
        loop (an asyncio connection belongs to the loop that made it)."""
        loop = asyncio.get_running_loop()
        found = self._async_clients.get(id(loop))
        if found is None:
            kwargs = dict(self.store.client.connection_pool.connection_kwargs)
            kwargs.pop("retry", None)  # a sync Retry; the asyncio client makes its own
            # A few connections shared by every call in flight (not one each under a burst);
            # waiting for one counts against the reply's timeout.
            found = self._async_clients[id(loop)] = redis.asyncio.Redis(
                connection_pool=redis.asyncio.BlockingConnectionPool(
                    connection_class=_async_connection_class(self.store.client),
                    max_connections=ASYNC_CONNECTIONS,
                    timeout=kwargs.get("socket_timeout") or 1.0,
                    **kwargs,
                )
            )
        return found
