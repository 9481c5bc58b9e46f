"""Notification streams outside the configured partitions: found by name, drained, then deleted.

Changing ``BILLING_PARTITIONS`` (on the workers or on a gateway, in either order) leaves notifications
in streams the workers' count no longer names: ``<prefix>:events`` when going from one partition to
more, ``<prefix>:events:<p>`` for each ``p`` at or above the new count, and, while a gateway runs
ahead of the workers, the new count's extra streams. The contract names exactly these streams, so
the worker finds them without SCAN and without help from the gateway: one pipelined ``EXISTS`` per
possible name (``Keys.possible_events``, counts up to ``MAX_PARTITIONS``). Every command touches one
key, so this works unchanged on Redis Cluster.

Each stream found that the configuration does not name (a *retired* stream) is drained through the
same consumer group as a partition (``billing.drain_retired`` sends one ``billing.drain`` for each
stream ``backlog.to_drain`` names), and the sweeper trims it like a partition. Once every entry was delivered
and acknowledged and nothing was written to it for ``RETIRE_QUIET_MS``, ``retire`` deletes it: one
script on the one key, so an entry written in between keeps it. A gateway that writes there again
later only creates it again, to be found and drained again.
"""

from __future__ import annotations

from typing import Any

import redis

from worker.contract.keys import Keys

# A drained retired stream is deleted after this long without a new entry: long past the last drain
# that read it (a drain of a retired stream stops at its first empty read).
RETIRE_QUIET_MS = 60_000

# KEYS[1]: a retired notification stream; ARGV[1]: quiet milliseconds. Deletes the stream when its
# last entry is older than that and every consumer group has been delivered every entry and has
# none pending; a stream nobody ever read is kept while it holds entries. Returns 1 if deleted.
_RETIRE = """
local stream = KEYS[1]
if redis.call('EXISTS', stream) == 0 then return 0 end
local function field(reply, name)
  for i = 1, #reply, 2 do
    if reply[i] == name then return reply[i + 1] end
  end
end
local last = field(redis.call('XINFO', 'STREAM', stream), 'last-generated-id')
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if now_ms - tonumber(string.match(last, '^(%d+)')) < tonumber(ARGV[1]) then return 0 end
local groups = redis.call('XINFO', 'GROUPS', stream)
if #groups == 0 and redis.call('XLEN', stream) > 0 then return 0 end
for _, group in ipairs(groups) do
  if field(group, 'pending') ~= 0 or field(group, 'last-delivered-id') ~= last then return 0 end
end
redis.call('DEL', stream)
return 1
"""


def existing(client: Any, names: list[str]) -> list[str]:
    """Those of ``names`` that exist, in their order (one pipelined round trip)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.exists(name)
    return [name for name, found in zip(names, pipe.execute(), strict=True) if found]


def retired(client: Any, keys: Keys) -> list[str]:
    """Notification streams that exist and that the configured partition count does not name."""
    configured = set(keys.all_events())
    return [name for name in existing(client, keys.possible_events()) if name not in configured]


def streams(client: Any, keys: Keys) -> list[str]:
    """Every notification stream to read: the configured partitions', then the retired ones."""
    return [*keys.all_events(), *retired(client, keys)]


def adopt(client: Any, keys: Keys, stream: str) -> None:
    """Create the consumer group on a retired stream that has none (a gateway ahead of the workers
    wrote it, or wrote it again after it was deleted), from its first entry. Done here, once per
    sighting, because each worker process remembers the groups it created and would not look again
    on a stream that was deleted and written anew."""
    try:
        client.xgroup_create(stream, keys.group, id="0")
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc) and "key to exist" not in str(exc):  # or deleted meanwhile
            raise


def retire(client: Any, stream: str, quiet_ms: int | None = None) -> bool:
    """Delete ``stream`` if it is drained and nothing was written to it for ``quiet_ms`` (default
    ``RETIRE_QUIET_MS``, read at each call) (see ``_RETIRE``); whether it was."""
    quiet = RETIRE_QUIET_MS if quiet_ms is None else quiet_ms
    return bool(client.register_script(_RETIRE)(keys=[stream], args=[quiet]))
