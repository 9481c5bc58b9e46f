"""A request the gateway does not bill, served anyway: ``BILLING_UNBILLED_ROUTES=pass``.

With ``refuse`` (the default) a gateway answers a route the table does not bill (``routes``) with
``routes.not_billed``. With ``pass`` it serves it, and publishes an ``unbilled`` notification first
(docs/events.md §2): the request id the gateway made for it, the method and path (or the LiteLLM
call type), and the account its authentication named, when it named one. The worker records each
as a call of its own, voided at 0 with the anomaly ``unbilled_route``, alerted like every anomaly:
served unbilled is never served unrecorded.
"""

from __future__ import annotations

import logging
from typing import Any

from worker.gateway.metadata import usable_account
from worker.gateway.routes import shown

log = logging.getLogger(__name__)

MODES = ("refuse", "pass")


def passes(mode: str) -> bool:
    """Whether ``mode`` (``BILLING_UNBILLED_ROUTES``) serves unbilled routes."""
    if mode not in MODES:
        raise ValueError(f"unbilled routes: expected one of {MODES}, got {mode!r}")
    return mode == "pass"


def record(publisher: Any, request_id: str, route: str, account: object | None) -> None:
    """Publish the ``unbilled`` notification; an account id the worker would refuse is left out
    (the route is still recorded). A publisher error is logged, never raised: the request goes on."""
    account_id = None
    if account is not None:
        account_id, problem = usable_account(account, "")
        if problem is not None:
            account_id = None
    try:
        publisher.unbilled(request_id, shown(route), account_id)
    except Exception:
        log.exception("billing: unbilled %s (%s) not published", request_id, shown(route))
    log.info("billing: %s served unbilled as %s", shown(route), request_id)
