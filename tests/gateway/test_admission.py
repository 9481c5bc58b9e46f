"""The admission script on the real Redis (``worker.contract.admission`` through ``Authorizer``): what
it writes, what it refuses, and that the worker reads what it writes (issue 48, point 3)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
import redis

from worker.contract.authorization import AuthorizationStore
from worker.contract.entries import read_head
from worker.contract.keys import Keys
from worker.gateway.authorize import Admission, Authorizer

pytestmark = pytest.mark.redis

ACCOUNT = "acct-admit"


def facts(rid: str, hold: int = 5_000) -> dict[str, Any]:
    return {
        "request_id": rid,
        "account_id": ACCOUNT,
        "model": "gpt-4o-mini",
        "stream": True,
        "include_usage": True,
        "reserved_micros": hold,
        "created_at": "2026-12-07T10:00:00.000Z",
        "messages": [],
        "omitted_messages": True,
    }


def admit(authorizer: Authorizer, rid: str, hold: int = 5_000, **options: Any) -> Admission:
    async def run() -> Admission:
        return await authorizer.admit_async(
            ACCOUNT, rid, hold, datetime.now(UTC), "gpt-4o-mini", facts=facts(rid, hold),
            **options,
        )  # fmt: skip

    return asyncio.run(run())


def authorizer(client: redis.Redis, prefix: str, **options: Any) -> Authorizer:
    return Authorizer(AuthorizationStore(client, prefix), keys=Keys(prefix), **options)


def opens(client: redis.Redis, keys: Keys, rid: str) -> list[dict[bytes, bytes]]:
    return [f for _id, f in client.xrange(keys.events_for(rid)) if f[b"request_id"] == rid.encode()]


def test_the_record_heads_the_stream_and_the_worker_reads_it(
    redis_client: redis.Redis, prefix: str
) -> None:
    keys = Keys(prefix)
    before = int(redis_client.time()[0]) * 1000
    admission = admit(authorizer(redis_client, prefix, check_spend=False), "r1")
    assert admission.refusal is None and admission.fields is not None
    head = redis_client.xrange(keys.request("r1"))
    assert [entry_id for entry_id, _ in head] == [b"0-1"]
    assert redis_client.ttl(keys.request("r1")) == -1  # only the worker deletes it
    assert [n[b"kind"] for n in opens(redis_client, keys, "r1")] == [b"open"]
    meta, taken = read_head(head, "r1")
    at = int(head[0][1][b"at"])
    assert before <= at <= int(redis_client.time()[0]) * 1000 + 1000  # Redis TIME
    assert taken == 1 and meta.created_at == datetime.fromtimestamp(at / 1000, UTC)
    assert (meta.account_id, int(meta.reserved_micros), meta.messages) == (ACCOUNT, 5_000, ())


def test_a_request_id_that_has_a_call_is_refused(redis_client: redis.Redis, prefix: str) -> None:
    gate = authorizer(redis_client, prefix, check_spend=False)
    assert admit(gate, "dup").refusal is None
    again = admit(gate, "dup", hold=9_999)
    assert again.refusal is not None
    assert (again.refusal.status, again.refusal.code) == (409, "request_id_reused")
    keys = Keys(prefix)
    assert len(redis_client.xrange(keys.request("dup"))) == 1  # the first call's record alone
    assert len(opens(redis_client, keys, "dup")) == 1


def test_an_idempotency_key_in_flight_is_refused_per_account(
    redis_client: redis.Redis, prefix: str
) -> None:
    gate = authorizer(redis_client, prefix, check_spend=False)
    first = admit(gate, "k1", idempotency_key="same")
    assert first.refusal is None and first.in_flight is not None
    second = admit(gate, "k2", idempotency_key="same")
    assert second.refusal is not None and second.refusal.code == "idempotency_key_in_use"
    assert not redis_client.exists(Keys(prefix).request("k2"))  # nothing written for it
    asyncio.run(gate.finish_async(first, "k1"))
    assert admit(gate, "k3", idempotency_key="same").refusal is None


def test_a_spend_refusal_writes_no_record(redis_client: redis.Redis, prefix: str) -> None:
    store = AuthorizationStore(redis_client, prefix)
    store.install(ACCOUNT, funds=4_000, charged=0, fields={})
    store.mark_ready()
    gate = authorizer(redis_client, prefix)
    refused = admit(gate, "poor", hold=5_000)
    assert refused.refusal is not None and refused.refusal.status == 402
    assert not redis_client.exists(Keys(prefix).request("poor"))
    assert opens(redis_client, Keys(prefix), "poor") == []
    assert admit(gate, "fits", hold=4_000).refusal is None
    assert store.calls(ACCOUNT)["fits"]["a"] == "4000"


def test_a_store_not_built_admits_unchecked_or_refuses_as_set(
    redis_client: redis.Redis, prefix: str
) -> None:
    """No ``ready`` key: ``open`` writes the record without the check, flagged; ``closed`` 503."""
    unchecked = admit(authorizer(redis_client, prefix), "u1")
    assert unchecked.refusal is None and unchecked.unchecked and unchecked.fields is not None
    meta, _ = read_head(redis_client.xrange(Keys(prefix).request("u1")), "u1")
    assert meta.admitted_unchecked
    closed = admit(authorizer(redis_client, prefix, unreachable="closed"), "u2")
    assert closed.refusal is not None and closed.refusal.code == "authorization_unavailable"
    assert not redis_client.exists(Keys(prefix).request("u2"))


def test_redis_away_spools_the_record_or_refuses(prefix: str) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    gate = authorizer(dead, prefix, check_spend=False)
    spooled: list[Any] = []

    def spool(commands: list[Any]) -> bool:
        spooled.extend(commands)
        return True

    admitted = admit(gate, "s1", spool=spool)
    assert admitted.refusal is None and admitted.fields is not None
    assert [c.entry_id for c in spooled] == ["0-1", "*"]  # the record, then open
    refused = admit(gate, "s2", spool=lambda commands: False)
    assert refused.refusal is not None
    assert (refused.refusal.status, refused.refusal.code) == (503, "billing_unavailable")
    assert admit(gate, "s3").refusal is not None  # no spool at all: refused too
    body = orjson.loads(admitted.fields["body"])
    assert "authorization" not in body  # no spend control: nothing was unchecked


def test_the_request_entry_cannot_move_the_admitted_money(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The request entry written later (a proxy's, priced for the deployment that served) names
    another hold and another account: the call stays the admission's, held at what the ledger
    holds from its ``open`` (a larger figure here was refused by the ledger, dead-lettering it)."""
    keys = Keys(prefix)
    assert (
        admit(authorizer(redis_client, prefix, check_spend=False), "r9", hold=603).refusal is None
    )
    later = {**facts("r9", 609), "account_id": "acct-other", "model": "gpt-4o-mini-2024-07-18"}
    redis_client.xadd(keys.request("r9"), {"kind": "request", "body": orjson.dumps(later)})
    meta, taken = read_head(redis_client.xrange(keys.request("r9")), "r9")
    assert taken == 2
    assert (meta.account_id, int(meta.reserved_micros)) == (ACCOUNT, 603)
    assert meta.model == "gpt-4o-mini-2024-07-18"  # the model that served, as the entry says
