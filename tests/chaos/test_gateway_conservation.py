"""Conservation on the whole path (issue 35): every call either gateway served is in the ledger,
under the account that made it, with the status it earned, and the money adds up.

Rounds of calls through the real example gateway (the ASGI middleware and the tee) and the real
LiteLLM proxy (the billing hook), each with one of the edge faults that used to leak, settled by a
real ``billing worker`` (``tests/gateway/edges.py``):

* a vision call whose base64 image makes the prompt MBs (both gateways);
* bodies orjson refuses and Python's ``json`` reads (a UTF-8 byte order mark, UTF-16), a gzip body;
* ``"stream": "true"``, streamed by the upstream;
* a payer id no call can have (both gateways): billed to the gateway's fallback account;
* a client that hangs up mid-answer: unsettled ``incomplete``, its hold kept;
* calls made while Redis refuses the gateway's writes (its user's write permission taken away:
  NOPERM), spooled by the tee and replayed once it may write again.

Each call has an account of its own (or counts towards its gateway's fallback account), so the
ledger is checked call by call: the count and status per account, each settled call's charge at
the oracle price of its usage record (``harness.oracle_charge``), each account's balances equal
to what its calls hold and were charged, every transaction balanced, no dead letter. Short in
``make test`` (one round), full in ``make chaos`` (``ROUNDS_FULL`` rounds).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import openai
import orjson
import pytest
from consumer.waiting import wait_for
from gateway.edges import (
    ALIAS,
    PRICES,
    Edges,
    account,
    body,
    open_edges,
    vision,
)
from gateway.harness import MASTER_KEY, ledger, oracle_charge, wait_decided
from gateway.upstream import SCENARIO_HEADER
from sqlalchemy.orm import Session

from worker.ledger.balances import balance, ledger_is_balanced

from .harness import Figures

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis]

ROUNDS_FULL = 150  # 150 rounds of 11 calls, 3 more in every 10th: 1,695 through both gateways
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture(scope="module")
def edges(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edges]:
    with open_edges(pg_url, tmp_path_factory.mktemp("conservation")) as stack:
        yield stack


class Expected:
    """What each account must hold in the ledger once every call is decided."""

    def __init__(self) -> None:
        self.calls: dict[str, Counter[str]] = {}

    def add(self, account: str, status: str) -> None:
        self.calls.setdefault(account, Counter())[status] += 1

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self.calls.values())


def _served(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text


def asgi_plain(edges: Edges, expected: Expected) -> None:
    payer = account()
    _served(edges.post(edges.gateway, orjson.dumps({**body(payer), **STREAMED}), payer)[0])
    expected.add(payer, "settled")


def asgi_vision(edges: Edges, expected: Expected) -> None:
    payer = account()
    _served(edges.post(edges.gateway, orjson.dumps({**vision(payer), **STREAMED}), payer)[0])
    expected.add(payer, "settled")


def asgi_encodings(edges: Edges, expected: Expected) -> None:
    import gzip

    payer = account()
    text = orjson.dumps(body(payer)).decode()
    for raw, headers in (
        (b"\xef\xbb\xbf" + text.encode(), {}),
        (text.encode("utf-16"), {}),
        (gzip.compress(text.encode()), {"Content-Encoding": "gzip"}),
    ):
        _served(edges.post(edges.gateway, raw, payer, **headers)[0])
        expected.add(payer, "settled")


def asgi_stream_flag(edges: Edges, expected: Expected) -> None:
    payer = account()
    asked = body(payer, stream="true", stream_options={"include_usage": "true"})
    _served(edges.post(edges.gateway, orjson.dumps(asked), payer)[0])
    expected.add(payer, "settled")


def asgi_bad_payer(edges: Edges, expected: Expected) -> None:
    _served(edges.post(edges.gateway, orjson.dumps(body("bad\u0007id")), "key-edge")[0])
    expected.add(edges.asgi_fallback, "settled")


def asgi_hang_up(edges: Edges, expected: Expected) -> None:
    """Reads the first chunk of a slow answer and leaves."""
    payer = account()
    headers = {"Authorization": f"Bearer {payer}", SCENARIO_HEADER: "slow"}
    with httpx.stream(
        "POST", f"{edges.gateway}/chat/completions", json={**body(payer), **STREAMED},
        headers=headers, timeout=30,
    ) as answer:  # fmt: skip
        assert answer.status_code == 200
        next(answer.iter_raw())
    expected.add(payer, "unsettled")


def litellm_plain(edges: Edges, expected: Expected) -> None:
    payer = account()
    client = openai.OpenAI(base_url=edges.proxy.base_url, api_key=MASTER_KEY, max_retries=0)
    for _chunk in client.chat.completions.create(**body(payer, ALIAS), **STREAMED):
        pass
    expected.add(payer, "settled")


def litellm_vision(edges: Edges, expected: Expected) -> None:
    payer = account()
    client = openai.OpenAI(base_url=edges.proxy.base_url, api_key=MASTER_KEY, max_retries=0)
    client.chat.completions.create(**vision(payer, ALIAS))
    expected.add(payer, "settled")


def litellm_bad_payer(edges: Edges, expected: Expected) -> None:
    raw = orjson.dumps(body(" spaced ", ALIAS))
    _served(edges.post(edges.proxy.base_url, raw, MASTER_KEY)[0])
    expected.add(edges.litellm_fallback, "settled")


CASES: list[Callable[[Edges, Expected], None]] = [
    asgi_plain, asgi_vision, asgi_encodings, asgi_stream_flag, asgi_bad_payer, asgi_hang_up,
    litellm_plain, litellm_vision, litellm_bad_payer,
]  # fmt: skip


def while_redis_refuses_the_gateway(edges: Edges, expected: Expected, calls: int) -> None:
    """Calls served while the gateway may not write to Redis: the tee spools them; once it may
    write again, it replays them and they settle like any other."""
    edges.gateway_writes(False)
    try:
        for _ in range(calls):
            asgi_plain(edges, expected)
        # The tee writes after a linger, on its own thread: the fault is exercised once it found
        # its writes refused and spooled them (or the test waits out that it never does).
        wait_for(lambda: edges.tee.spooling, 30, "the tee to spool", edges.worker.log_tail)
    finally:
        edges.gateway_writes(True)


def _check(session: Session, edges: Edges, expected: Expected) -> None:
    calls = ledger(edges.sessions, sorted(expected.calls))
    found: dict[str, Counter[str]] = {}
    for call in calls:
        found.setdefault(call.account_id, Counter())[call.status] += 1
    fallbacks = {edges.asgi_fallback, edges.litellm_fallback}
    for payer, statuses in expected.calls.items():
        if payer in fallbacks:  # the module's other calls may use these accounts too
            assert found.get(payer, Counter())["settled"] >= statuses["settled"], payer
        else:
            assert found.get(payer) == statuses, (payer, found.get(payer), statuses)
    for call in calls:
        if call.status == "settled":
            usage = {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
                     "prompt_tokens_details": {"cached_tokens": call.cached_tokens or 0}}  # fmt: skip
            assert call.charge_micros == oracle_charge(PRICES, usage), call
        else:
            assert (call.status, call.reason) == ("unsettled", "incomplete"), call
    for payer in expected.calls:
        if payer in fallbacks:
            continue
        mine = [call for call in calls if call.account_id == payer]
        held = balance(session, payer)
        charged = sum(call.charge_micros or 0 for call in mine)
        assert held.charged == charged, payer
        assert (held.held == 0) == all(call.status == "settled" for call in mine), payer
    assert ledger_is_balanced(session)


def test_every_call_either_gateway_served_is_in_the_ledger(edges: Edges, scale, record) -> None:
    rounds = scale.pick(1, ROUNDS_FULL)
    expected = Expected()
    started = time.monotonic()
    for number in range(rounds):
        for case in CASES:
            case(edges, expected)
        if number % 10 == 0:
            while_redis_refuses_the_gateway(edges, expected, calls=3)
    assert edges.tee.flush(timeout=60)
    decided = wait_decided(
        edges.sessions, sorted(expected.calls), expected.total, timeout=120 + rounds,
        processes=(edges.worker, edges.proxy),
    )  # fmt: skip
    with edges.sessions() as session:
        _check(session, edges, expected)
    dead = edges.redis.client().xlen(edges.keys.dead)
    assert dead == 0, f"{dead} dead letters"
    record.append(
        Figures(
            "gateway_edges", expected.total, injected=expected.total, sim_faults=0, lost=0,
            charged_twice=0, wrong_outcome=0, seconds=time.monotonic() - started,
            extra={"in_ledger": len(decided), "dead_letters": dead},
        )
    )  # fmt: skip
