"""Spend control at the gateway: each billed call's hold taken from the authorization store before
anything goes upstream (``worker.contract.authorization``; docs/gateway.md, "Spend control").

``Authorizer.admit_async`` answers with an ``Admission``: admitted (the hold is taken, or was taken before
under this request id), admitted *unchecked* (Redis could not answer, or the store is not built
yet, and ``unreachable`` is ``open``: the call is served and its entry says
``"authorization": "unchecked"``, which the worker records as the anomaly ``admitted_unchecked``
and which is counted here), or refused with the ``Refusal`` the client gets: HTTP 402 with an
OpenAI-shaped error whose ``code`` is ``insufficient_funds``, ``budget_exceeded`` or
``unknown_account`` and whose extra keys give the account and the amounts; HTTP 503
``authorization_unavailable`` when ``unreachable`` is ``closed``. The openai client raises a 402
at once (it retries 408, 409, 429 and 5xx only).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
import redis.asyncio

from worker.config import Settings
from worker.contract.authorization import (
    UNKNOWN_POLICIES,
    AuthorizationStore,
    Decision,
    Verdict,
)
from worker.core.money import Micros
from worker.gateway.refusals import Refusal

log = logging.getLogger(__name__)

UNREACHABLE_POLICIES = ("open", "closed")
ASYNC_CONNECTIONS = 32  # per gateway process and event loop
SPEND_ERROR = "insufficient_quota"  # the error ``type``: OpenAI's for a quota the caller ran out of


@dataclass(frozen=True, slots=True)
class Admission:
    refusal: Refusal | None = None
    unchecked: bool = False


ADMITTED = Admission()
UNCHECKED = Admission(unchecked=True)


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
    ``default_budget`` micros per ``default_period``)."""

    def __init__(
        self,
        store: AuthorizationStore,
        *,
        unreachable: str = "open",
        unknown: str = "refuse",
        default_budget: int = 0,
        default_period: str = "day",
    ) -> None:
        if unreachable not in UNREACHABLE_POLICIES:
            raise ValueError(f"unreachable: one of {UNREACHABLE_POLICIES}, not {unreachable!r}")
        if unknown not in UNKNOWN_POLICIES:
            raise ValueError(f"unknown: one of {UNKNOWN_POLICIES}, not {unknown!r}")
        if not 0 <= default_budget <= 10**15:
            raise ValueError(f"default_budget out of range: {default_budget}")
        self.store = store
        self.unreachable = unreachable
        self.unknown = unknown
        self.default_budget = default_budget
        self.default_period = default_period
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
            timeout_ms=settings.auth_timeout_ms,
            unreachable=settings.auth_unreachable,
            unknown=settings.auth_unknown_account,
            default_budget=settings.auth_default_budget_micros,
            default_period=settings.auth_default_period,
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
        self, account_id: str, request_id: str, amount: int, at: datetime, model: str
    ) -> Admission:
        """Take the hold (one Redis round trip, awaited: the event loop serves other calls
        meanwhile) or say why not."""
        try:
            decision = await self.store.authorize_async(
                self._async_client(), account_id, request_id, amount, at, model, **self._policy()
            )
        except redis.RedisError as exc:
            log.warning("billing: authorization store unreachable: %s", type(exc).__name__)
            decision = Decision(Verdict.NOT_READY)
        return self._admission(decision, account_id, request_id, amount)

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

    def _admission(
        self, decision: Decision, account_id: str, request_id: str, amount: int
    ) -> Admission:
        if decision.admitted:
            return ADMITTED
        if decision.verdict is Verdict.NOT_READY:
            if self.unreachable == "closed":
                self.refused += 1
                return Admission(
                    Refusal(
                        503,
                        "Billing authorization is unavailable; retry shortly.",
                        None,
                        "authorization_unavailable",
                        "server_error",
                        (),
                        request_id,
                    )
                )
            self.unchecked += 1
            log.warning("billing: %s admitted without a spend check", request_id)
            return UNCHECKED
        self.refused += 1
        return Admission(spend_refusal(decision, account_id, amount, request_id))
