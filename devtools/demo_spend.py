"""``make demo``'s spend control: a funded account runs out of funds mid-run and is refused, then
topped up and served again.

The example gateway (``devtools.example_app``: the middleware over a proxy) runs in this process
with an ``Authorizer`` on the demo's Redis, in front of the recorded upstream; the demo's worker
settles what it publishes. The authorization store is synced from the ledger the way the worker's
beat does it with ``BILLING_AUTHORIZE=1`` (``worker.service.authorization.sync``), here called
directly, for this account, after each step, so the demo need not wait for a tick.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import openai
import redis
from rich.console import Console
from sqlalchemy.orm import sessionmaker

from devtools.example_app import create_app
from devtools.localservers.serving import served as serving
from devtools.recorded_upstream import Upstream
from worker.contract.authorization import AuthorizationStore
from worker.contract.keys import Keys
from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.gateway.authorize import Authorizer
from worker.gateway.reservation import reserve
from worker.gateway.tee import Tee
from worker.ledger.credits import credit
from worker.service.authorization import SyncPolicy, sync

ACCOUNT = "acct_spend"
MODEL = "gpt-4o-2024-08-06"  # what the recorded ``clean`` call names
MESSAGES = [{"role": "user", "content": "Say hello."}]
MAX_TOKENS = 300
HOLDS = 3  # the first credit pays for this many holds, and a little more


def _spendable(store: AuthorizationStore) -> int:
    f = store.figures(ACCOUNT)
    return int(f.get("funds", 0)) - int(f.get("charged", 0)) - int(f.get("held", 0))


def _fund(sessions: sessionmaker, amount: Micros, key: str) -> None:
    with sessions() as session, session.begin():
        credit(session, ACCOUNT, amount, key=key, note="demo", who="demo",
               now=datetime.now(UTC), new_account=True)  # fmt: skip


def show_spend_control(
    sessions: sessionmaker, client: redis.Redis, prefix: str, tmp: Any, out: Console
) -> bool:
    """The scene (see the module docstring); True when it went as it must: served while the
    holds fit, refused with 402 once they did not, served again after the top-up."""
    store = AuthorizationStore(client, prefix)
    policy = SyncPolicy()
    hold = int(reserve(load_price_book(), {"model": MODEL, "messages": MESSAGES,
                                           "max_tokens": MAX_TOKENS}, datetime.now(UTC)))  # fmt: skip
    funds = Micros(HOLDS * hold + hold // 2)
    out.print(
        f"spend control: {ACCOUNT} is funded {funds.usd()} USD; each call holds"
        f" {Micros(hold).usd()} USD until the worker settles it"
    )
    _fund(sessions, funds, "demo-spend-1")
    sync(sessions, store, policy, accounts=[ACCOUNT])
    store.mark_ready()
    upstream = Upstream.start()
    tee = Tee(client, Keys(prefix), spool_dir=tmp)
    authorizer = Authorizer(store)
    app = create_app(upstream.base_url, tee, authorizer=authorizer)
    served, refused, after = 0, 0, False
    try:
        with serving(app) as url:
            api = openai.OpenAI(base_url=url + "/v1", api_key=ACCOUNT, max_retries=0)

            def one(turn: int) -> str:
                try:
                    raw = api.chat.completions.with_raw_response.create(
                        model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS
                    )
                    return f"served ({raw.headers['x-billing-request-id']})"
                except openai.APIStatusError as exc:
                    body = exc.body if isinstance(exc.body, dict) else {}
                    return f"refused {exc.status_code} {body.get('code')}: {body.get('message')}"

            out.print(f"  {HOLDS + 2} calls at once:")
            with ThreadPoolExecutor(HOLDS + 2) as pool:
                answers = list(pool.map(one, range(HOLDS + 2)))
            for turn, answer in enumerate(answers, 1):
                out.print(f"  call {turn}: {answer}", highlight=False)
            served = sum(a.startswith("served") for a in answers)
            refused = sum(a.startswith("refused 402") for a in answers)
            out.print(f"  spendable now {Micros(_spendable(store)).usd()} USD")
            top_up = Micros(5 * hold)
            _fund(sessions, top_up, "demo-spend-2")
            sync(sessions, store, policy, accounts=[ACCOUNT])
            out.print(f"  topped up {top_up.usd()} USD (`billing credit add`), store synced")
            try:
                api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS)
                after = True
                out.print(f"  call {HOLDS + 3}: served again")
            except openai.APIStatusError as exc:
                out.print(f"  call {HOLDS + 3}: still refused ({exc.status_code})")
    finally:
        tee.stop()
        upstream.stop()
    return served == HOLDS and refused == 2 and after
