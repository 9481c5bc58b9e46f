"""The authorization store: what each account may still spend, taken atomically before a call goes
upstream (docs/gateway.md, "Spend control"). The ledger stays the truth; this is its fast copy.

Keys (an account's two keys share one hash tag, so each script touches one Redis Cluster slot):

- ``<prefix>:auth:ready``: set once the store was built from the ledger (``install``, by the sync
  task), to the policy for accounts the store does not know (``policy_value``: the worker's
  ``BILLING_AUTH_UNKNOWN_ACCOUNT`` and default budget; the script follows it, not the gateway's
  settings, so the gateway and the sync cannot disagree). Absent (a Redis restart or loss, a new
  deployment), every authorization answers ``not_ready`` and the gateway's
  ``BILLING_AUTH_UNREACHABLE`` setting decides, as when Redis is down.
- ``<prefix>:auth:{<account>}``, a hash: ``funds`` (funded + the credit limit in force; absent for an
  account never funded nor given a limit, which only its budgets bound), ``charged`` (what the
  ledger had charged it at the last sync), ``held`` (the sum of its calls' current amounts), budget
  limits ``b|<d|m>`` and ``b|<d|m>|<model>``, and per period scope (``d:<YYYY-MM-DD>`` or
  ``m:<YYYY-MM>``, optionally ``|<model>``) ``s|<scope>`` (charged by the ledger, calls created in
  the period) and ``p|<scope>`` (the current amounts of the calls in the store, likewise).
- ``<prefix>:auth:{<account>}:calls``, a hash: request id → the call's JSON (``a`` the hold, ``s``
  ``h`` held or ``r`` released, ``c`` what was charged once released, ``d``/``m``/``o`` its day,
  month and model, ``t`` when it was authorized, ms). A call's current amount is its hold while
  held, its charge once released.

spendable = funds - charged - held; a budget's use = ``s|scope`` + ``p|scope``; a budget of 0 refuses
every call (the kill switch), whatever its hold; an account with neither funds nor a budget that
bounds the call is refused (``unknown_account``), whatever the policy. Amounts are integer
micro-USD, kept as decimal strings and changed with HINCRBY only (never Lua floats).

Every operation is one script, idempotent per request id: ``authorize`` takes a hold once (a second
call with the same id answers ``duplicate`` and takes nothing), ``release`` applies a settlement
once, ``install`` (the sync task) replaces the ledger's figures and the calls the ledger closed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import redis

UNKNOWN_POLICIES = ("refuse", "default_budget")
BUDGET_PERIODS = ("day", "month")
_PERIOD_CODE = {"day": "d", "month": "m"}


class Verdict(StrEnum):
    ADMITTED = "admitted"
    DUPLICATE = "duplicate"  # this request id was authorized before: nothing taken again
    NOT_READY = "not_ready"  # the store is not built (or Redis is unreachable): the setting decides
    # an account with no funds, credit limit or budget bounding the call (the ledger does not know
    # it, or never funded it), refused by the setting ``refuse``
    UNKNOWN_ACCOUNT = "unknown_account"
    INSUFFICIENT_FUNDS = "insufficient_funds"
    BUDGET_EXCEEDED = "budget_exceeded"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    spendable: int | None = None  # insufficient_funds: what the account could still spend
    budget: str | None = None  # budget_exceeded: ``day``/``month``, `` for <model>`` when per model
    limit: int | None = None
    used: int | None = None

    @property
    def admitted(self) -> bool:
        return self.verdict in (Verdict.ADMITTED, Verdict.DUPLICATE)


def policy_value(unknown: str, default_budget: int, default_period: str) -> bytes:
    """The ready key's value: ``<unknown> <default budget micros> <d|m>``."""
    if unknown not in UNKNOWN_POLICIES:
        raise ValueError(f"unknown: one of {UNKNOWN_POLICIES}, not {unknown!r}")
    return f"{unknown} {int(default_budget)} {_PERIOD_CODE[default_period]}".encode()


def day_scope(at: datetime) -> str:
    return "d:" + at.astimezone(UTC).strftime("%Y-%m-%d")


def month_scope(at: datetime) -> str:
    return "m:" + at.astimezone(UTC).strftime("%Y-%m")


def budget_field(period: str, model: str = "") -> str:
    """The hash field of a budget limit: ``b|d``, ``b|m``, ``b|d|<model>``."""
    code = _PERIOD_CODE[period]
    return f"b|{code}|{model}" if model else f"b|{code}"


def spent_field(scope: str, model: str = "") -> str:
    return f"s|{scope}|{model}" if model else f"s|{scope}"


_AUTHORIZE = """
local policy = redis.call('GET', KEYS[1])
if not policy then return {'not_ready'} end
local unknown, dflt, dperiod = string.match(policy, '^(%S+) (%d+) ([dm])$')
if not unknown then unknown, dflt, dperiod = ARGV[7], ARGV[8], ARGV[9] end
local acct, calls = KEYS[2], KEYS[3]
local rid, amount = ARGV[1], tonumber(ARGV[2])
local day, month, model = ARGV[3], ARGV[4], ARGV[5]
if redis.call('HEXISTS', calls, rid) == 1 then return {'duplicate'} end
if redis.call('EXISTS', acct) == 0 then
  if unknown ~= 'default_budget' then return {'unknown_account'} end
  redis.call('HSET', acct, 'b|' .. dperiod, dflt, 'charged', '0', 'held', '0')
end
local scopes = {'d', 'm', 'd|' .. model, 'm|' .. model}
local periods = {day, month, day .. '|' .. model, month .. '|' .. model}
local names = {'funds', 'charged', 'held'}
for i = 1, 4 do
  names[#names + 1] = 'b|' .. scopes[i]
  names[#names + 1] = 's|' .. periods[i]
  names[#names + 1] = 'p|' .. periods[i]
end
local v = redis.call('HMGET', acct, unpack(names))
if not v[1] and not (v[4] or v[7] or v[10] or v[13]) then
  return {'unknown_account'}
end
if v[1] then
  local spendable = tonumber(v[1]) - tonumber(v[2] or '0') - tonumber(v[3] or '0')
  if spendable <= 0 or amount > spendable then return {'insufficient_funds', spendable} end
end
for i = 1, 4 do
  local limit = v[3 + 3 * i - 2]
  if limit then
    local used = tonumber(v[3 + 3 * i - 1] or '0') + tonumber(v[3 + 3 * i] or '0')
    if tonumber(limit) <= 0 or used + amount > tonumber(limit) then
      return {'budget_exceeded', scopes[i], tonumber(limit), used}
    end
  end
end
redis.call('HSET', calls, rid, cjson.encode({a = ARGV[2], s = 'h', d = day, m = month, o = model,
  t = ARGV[6]}))
redis.call('HINCRBY', acct, 'held', amount)
for i = 1, 4 do redis.call('HINCRBY', acct, 'p|' .. periods[i], amount) end
return {'admitted'}
"""

# The amounts a call's entry adds to ``held`` and to its four ``p|`` scopes, moved by ``delta``.
_MOVE = """
local function move(acct, e, delta)
  if delta == 0 then return end
  redis.call('HINCRBY', acct, 'held', delta)
  for _, p in ipairs({e.d, e.m, e.d .. '|' .. e.o, e.m .. '|' .. e.o}) do
    redis.call('HINCRBY', acct, 'p|' .. p, delta)
  end
end
local function current(e)
  if e.s == 'h' then return tonumber(e.a) end
  return tonumber(e.c)
end
"""

_RELEASE = (
    _MOVE
    + """
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then return 0 end
local e = cjson.decode(raw)
if e.s ~= 'h' then return 0 end
move(KEYS[1], e, tonumber(ARGV[2]) - tonumber(e.a))
e.s = 'r'
e.c = ARGV[2]
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(e))
return 1
"""
)

# ARGV[1]: the account's figures as JSON (``funds`` or null, ``charged``, ``fields``: budget limits
# and the current periods' ledger spend); ARGV[2]: the calls the ledger closed, JSON request ids;
# ARGV[3]: calls to drop (authorized, never recorded), likewise; ARGV[4]: the ledger's open holds
# absent from the store, JSON objects like the entries. Returns {old charged or false, the closed
# calls found still held (a missed release), the dropped calls found, the holds added}.
_INSTALL = (
    _MOVE
    + """
local acct, calls = KEYS[1], KEYS[2]
local figures = cjson.decode(ARGV[1])
local old = redis.call('HGET', acct, 'charged')
local missed, dropped, added = {}, {}, {}
for _, rid in ipairs(cjson.decode(ARGV[2])) do
  local raw = redis.call('HGET', calls, rid)
  if raw then
    local e = cjson.decode(raw)
    if e.s == 'h' then missed[#missed + 1] = rid end
    move(acct, e, -current(e))
    redis.call('HDEL', calls, rid)
  end
end
for _, rid in ipairs(cjson.decode(ARGV[3])) do
  local raw = redis.call('HGET', calls, rid)
  if raw then
    local e = cjson.decode(raw)
    if e.s == 'h' then
      dropped[#dropped + 1] = rid
      move(acct, e, -current(e))
      redis.call('HDEL', calls, rid)
    end
  end
end
for _, e in ipairs(cjson.decode(ARGV[4])) do
  if redis.call('HEXISTS', calls, e.r) == 0 then
    local rid = e.r
    e.r = nil
    redis.call('HSET', calls, rid, cjson.encode(e))
    move(acct, e, tonumber(e.a))
    added[#added + 1] = rid
  end
end
local names = redis.call('HKEYS', acct)
for _, name in ipairs(names) do
  local kind = string.sub(name, 1, 2)
  if kind == 'b|' or kind == 's|' then redis.call('HDEL', acct, name) end
end
if figures.funds == cjson.null then redis.call('HDEL', acct, 'funds')
else redis.call('HSET', acct, 'funds', figures.funds) end
redis.call('HSET', acct, 'charged', figures.charged)
for name, value in pairs(figures.fields) do redis.call('HSET', acct, name, value) end
if redis.call('HEXISTS', acct, 'held') == 0 then redis.call('HSET', acct, 'held', '0') end
return {old or false, missed, dropped, added}
"""
)


@dataclass(frozen=True, slots=True)
class Installed:
    """What ``install`` found: the account's charged before (None on a first install), the closed
    calls that were still held (their release was missed), the calls dropped, the holds added."""

    old_charged: int | None
    missed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _decision(reply: list[Any]) -> Decision:
    """The authorization script's reply as a ``Decision``."""
    verdict = Verdict(_text(reply[0]))
    if verdict is Verdict.INSUFFICIENT_FUNDS:
        return Decision(verdict, spendable=int(reply[1]))
    if verdict is Verdict.BUDGET_EXCEEDED:
        scope = _text(reply[1])
        period = "day" if scope.startswith("d") else "month"
        model_part = scope.partition("|")[2]
        name = f"{period} for {model_part}" if model_part else period
        return Decision(verdict, budget=name, limit=int(reply[2]), used=int(reply[3]))
    return Decision(verdict)


class AuthorizationStore:
    """The store's operations on one Redis client (the gateway's, with short timeouts)."""

    def __init__(self, client: redis.Redis, prefix: str = "billing") -> None:
        self.client = client
        self.prefix = prefix
        self._authorize = client.register_script(_AUTHORIZE)
        self._release = client.register_script(_RELEASE)
        self._install = client.register_script(_INSTALL)
        self._async_scripts: dict[int, Any] = {}

    @property
    def ready_key(self) -> str:
        return f"{self.prefix}:auth:ready"

    def account_key(self, account_id: str) -> str:
        return f"{self.prefix}:auth:{{{account_id}}}"

    def calls_key(self, account_id: str) -> str:
        return self.account_key(account_id) + ":calls"

    def authorize_call(
        self,
        account_id: str,
        request_id: str,
        amount: int,
        at: datetime,
        model: str,
        unknown: str,
        default_budget: int,
        default_period: str,
    ) -> dict[str, list[Any]]:
        return {
            "keys": [self.ready_key, self.account_key(account_id), self.calls_key(account_id)],
            "args": [
                request_id,
                int(amount),
                day_scope(at),
                month_scope(at),
                model,
                int(at.timestamp() * 1000),
                unknown,
                int(default_budget),
                _PERIOD_CODE[default_period],
            ],
        }

    def authorize(
        self,
        account_id: str,
        request_id: str,
        amount: int,
        at: datetime,
        model: str,
        *,
        unknown: str = "refuse",
        default_budget: int = 0,
        default_period: str = "day",
    ) -> Decision:
        """Take ``amount`` for the call if it fits the account's funds and budgets (one round trip).
        Raises ``redis.RedisError`` when Redis cannot answer: the caller's setting decides."""
        call = self.authorize_call(
            account_id, request_id, amount, at, model, unknown, default_budget, default_period
        )
        return _decision(self._authorize(**call))

    async def authorize_async(
        self,
        client: Any,
        account_id: str,
        request_id: str,
        amount: int,
        at: datetime,
        model: str,
        *,
        unknown: str = "refuse",
        default_budget: int = 0,
        default_period: str = "day",
    ) -> Decision:
        """``authorize`` on ``client``, a ``redis.asyncio`` client of the same server: the event
        loop serves other calls while the script runs (a gateway's path)."""
        call = self.authorize_call(
            account_id, request_id, amount, at, model, unknown, default_budget, default_period
        )
        script = self._async_scripts.get(id(client))
        if script is None:
            script = self._async_scripts[id(client)] = client.register_script(_AUTHORIZE)
        return _decision(await script(**call))

    def release(self, account_id: str, request_id: str, charged: int) -> bool:
        """The call settled at ``charged`` (0: voided): its hold becomes its charge. False when the
        store holds no such call or it was released before (idempotent)."""
        return bool(
            self._release(
                keys=[self.account_key(account_id), self.calls_key(account_id)],
                args=[request_id, int(charged)],
            )
        )

    def release_many(self, releases: Iterable[tuple[str, str, int]]) -> None:
        """``release`` of each (account, request id, charged), in one pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        queued = False
        for account_id, request_id, charged in releases:
            self._release(
                keys=[self.account_key(account_id), self.calls_key(account_id)],
                args=[request_id, int(charged)],
                client=pipe,
            )
            queued = True
        if queued:
            pipe.execute()

    def install(
        self,
        account_id: str,
        *,
        funds: int | None,
        charged: int,
        fields: Mapping[str, int],
        closed: Iterable[str] = (),
        dropped: Iterable[str] = (),
        added: Iterable[Mapping[str, Any]] = (),
    ) -> Installed:
        """Replace the account's ledger figures; remove the ``closed`` calls (their charge is in
        ``charged`` now), drop the ``dropped`` ones if still held, add the ``added`` holds."""
        figures = {
            "funds": None if funds is None else str(int(funds)),
            "charged": str(int(charged)),
            "fields": {name: str(int(value)) for name, value in fields.items()},
        }
        reply = self._install(
            keys=[self.account_key(account_id), self.calls_key(account_id)],
            args=[
                json.dumps(figures),
                json.dumps(list(closed)),
                json.dumps(list(dropped)),
                json.dumps([dict(e) for e in added]),
            ],
        )
        old = reply[0]
        return Installed(
            None if old is None else int(old),
            [_text(r) for r in reply[1] or []],
            [_text(r) for r in reply[2] or []],
            [_text(r) for r in reply[3] or []],
        )

    def mark_ready(
        self, unknown: str = "refuse", default_budget: int = 0, default_period: str = "day"
    ) -> None:
        """The store is built; an account it does not know is governed by this policy (the
        worker's ``BILLING_AUTH_UNKNOWN_ACCOUNT``, ``…_DEFAULT_BUDGET_USD``, ``…_DEFAULT_PERIOD``):
        the authorization script reads it here, so the gateway and the sync follow one rule."""
        self.client.set(self.ready_key, policy_value(unknown, default_budget, default_period))

    def keep_policy(
        self, unknown: str = "refuse", default_budget: int = 0, default_period: str = "day"
    ) -> None:
        """``mark_ready``'s policy written again, only while the store is ready (never marks a
        store ready that a Redis loss emptied)."""
        value = policy_value(unknown, default_budget, default_period)
        self.client.set(self.ready_key, value, xx=True)

    def is_ready(self) -> bool:
        return bool(self.client.exists(self.ready_key))

    def calls(self, account_id: str) -> dict[str, dict[str, Any]]:
        raw = self.client.hgetall(self.calls_key(account_id))
        return {_text(k): json.loads(v) for k, v in raw.items()}

    def figures(self, account_id: str) -> dict[str, str]:
        raw = self.client.hgetall(self.account_key(account_id))
        return {_text(k): _text(v) for k, v in raw.items()}

    def accounts(self) -> list[str]:
        """Every account the store has a hash for (SCAN: never blocks Redis)."""
        found: set[str] = set()
        head = f"{self.prefix}:auth:{{"
        for key in self.client.scan_iter(match=head + "*", count=1000):
            text = _text(key)
            if not text.endswith(":calls"):
                found.add(text[len(head) : -1])
        return sorted(found)


# For the admission script (``worker.contract.admission``), which runs this very check and take.
AUTHORIZE_SCRIPT = _AUTHORIZE
decision_of = _decision
