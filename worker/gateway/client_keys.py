"""The LiteLLM hook's own keys in a call's metadata, and the client's copies of them (pure).

The hook keeps what it decided about a call in the call's metadata, under keys that start with
``billing_`` (the request id, the account, the fallback's reason, the hold, the unchecked flag),
and reads them back in its post-call hooks. LiteLLM merges the client's request ``metadata`` into
the same dict (and ``litellm_metadata`` on the routes that use it), so a client could send
``{"metadata": {"billing_account_id": "victim"}}``. ``strip`` removes every ``billing_`` key from
both, for every call type, before the hook writes its own: nothing a client sends chooses who pays,
which id a call is billed under, or how much is held.

Stripped rather than refused: the hook's namespace is its own, so a client's key of that name is
never read, and a client that tags its own metadata ``billing_code`` keeps being served.
"""

from __future__ import annotations

from typing import Any

PREFIX = "billing_"
# Where LiteLLM keeps a call's metadata: ``metadata``, or ``litellm_metadata`` on the routes that
# keep the client's ``metadata`` apart (threads, assistants, batches, ``/v1/messages``…).
METADATA_FIELDS = ("metadata", "litellm_metadata")


def strip(data: dict[str, Any]) -> list[str]:
    """Remove every ``billing_`` key from ``data``'s metadata dicts; the names removed (never
    their values)."""
    removed: list[str] = []
    for field in METADATA_FIELDS:
        metadata = data.get(field)
        if not isinstance(metadata, dict):
            continue
        for key in [k for k in metadata if isinstance(k, str) and k.startswith(PREFIX)]:
            del metadata[key]
            removed.append(f"{field}.{key}")
    return removed
