"""A call's admission: the gateway's write-ahead record, taken in one Redis step before the upstream
call (docs/gateway.md, *Trust model*; docs/events.md §1).

One script, atomically:

1. refuses a request id that already has a stream (``request_id_taken``: a second call must never
   settle onto the first) and an idempotency key whose call is still in flight (``in_flight``);
2. with spend control, runs the authorization store's own check and take (``authorization``: the
   same script text, so the two can never disagree) and answers its refusals;
3. writes the call's ``admission`` entry at the head of its stream (``ADMISSION_ENTRY_ID``, no
   TTL: only the worker deletes a call's stream, once it has finalized the call), stamped with
   Redis ``TIME``, and the ``open`` notification; marks the idempotency key in flight.

From that record alone the worker can finalize the call whatever happens next to the gateway
(killed mid-stream), its tee (the linger lost), the stream (never written) or the worker itself
(down past any TTL): settled from usage, or unsettled with the hold as its exposure.

The script touches the account's authorization keys, the call's stream and a notification stream
in one step, so it runs on one Redis server (as the tee does), not on a Redis Cluster.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from worker.contract.authorization import AUTHORIZE_SCRIPT, Decision, decision_of
from worker.contract.keys import Keys

# How long an idempotency key stays "in flight" when its gateway never said the call ended
# (killed): a reuse after this is a new call.
IN_FLIGHT_MS = 3_600_000

# KEYS: 1-3 the authorization store's (ready, account, its calls), 4 the call's stream, 5 its
# notification stream, 6 the idempotency key's in-flight marker. ARGV: 1-9 the authorization's,
# 10 spend control ('1'/'0'), 11 the admission body, 12 the in-flight marker's TTL (ms), 13 an
# idempotency key given ('1'/'0').
_ADMIT = (
    "local function authorize(KEYS, ARGV)\n"
    + AUTHORIZE_SCRIPT
    + """
end
local rid = ARGV[1]
if redis.call('EXISTS', KEYS[4]) == 1 then return {'request_id_taken'} end
if ARGV[13] == '1' and redis.call('EXISTS', KEYS[6]) == 1 then return {'in_flight'} end
if ARGV[10] == '1' then
  local decision = authorize(KEYS, ARGV)
  if decision[1] == 'duplicate' then return {'request_id_taken'} end
  if decision[1] ~= 'admitted' then return decision end
end
local now = redis.call('TIME')
local ms = now[1] .. string.format('%03d', math.floor(tonumber(now[2]) / 1000))
redis.call('XADD', KEYS[4], '0-1', 'kind', 'admission', 'at', ms, 'body', ARGV[11])
redis.call('XADD', KEYS[5], '*', 'kind', 'open', 'request_id', rid, 'ts', ms)
if ARGV[13] == '1' then redis.call('SET', KEYS[6], rid, 'PX', ARGV[12]) end
return {'admitted', ms}
"""
)

# KEYS: 1 the in-flight marker; ARGV: 1 the request id that set it.
_FINISH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

REQUEST_ID_TAKEN = "request_id_taken"
IN_FLIGHT = "in_flight"


@dataclass(frozen=True, slots=True)
class Admitted:
    """The script's answer: ``at_ms`` (Redis ``TIME``) when the record was written; else
    ``refused`` (``REQUEST_ID_TAKEN``, ``IN_FLIGHT``) or the authorization's ``decision``."""

    at_ms: int | None = None
    refused: str | None = None
    decision: Decision | None = None


def in_flight_key(keys: Keys, account_id: str, idempotency_key: str) -> str:
    """The marker of an idempotency key's call in flight, per account (a key is the client's,
    and two accounts' keys never collide); the key itself is hashed, never stored."""
    digest = hashlib.sha256(idempotency_key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{keys.prefix}:idem:{account_id}:{digest}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def admitted_from(reply: list[Any]) -> Admitted:
    verdict = _text(reply[0])
    if verdict == "admitted":
        return Admitted(at_ms=int(_text(reply[1])))
    if verdict in (REQUEST_ID_TAKEN, IN_FLIGHT):
        return Admitted(refused=verdict)
    return Admitted(decision=decision_of(reply))


class AdmissionScripts:
    """The admission and finish scripts, registered once per ``redis.asyncio`` client."""

    def __init__(self) -> None:
        self._scripts: dict[int, tuple[Any, Any]] = {}

    def _of(self, client: Any) -> tuple[Any, Any]:
        found = self._scripts.get(id(client))
        if found is None:
            found = self._scripts[id(client)] = (
                client.register_script(_ADMIT),
                client.register_script(_FINISH),
            )
        return found

    async def admit(
        self,
        client: Any,
        keys: Keys,
        auth_keys: list[str],
        auth_args: list[Any],
        *,
        request_id: str,
        body: bytes,
        check_spend: bool,
        in_flight: str | None,
    ) -> Admitted:
        """Run the admission (one round trip); raises ``redis.RedisError`` when Redis cannot."""
        script = self._of(client)[0]
        reply = await script(
            keys=[
                *auth_keys,
                keys.request(request_id),
                keys.events_for(request_id),
                in_flight or f"{keys.prefix}:idem:",
            ],
            args=[
                *auth_args,
                "1" if check_spend else "0",
                body,
                IN_FLIGHT_MS,
                "1" if in_flight else "0",
            ],
        )
        return admitted_from(reply)

    async def finish(self, client: Any, in_flight: str, request_id: str) -> None:
        """The call ended: its idempotency key may be used again."""
        await self._of(client)[1](keys=[in_flight], args=[request_id])
