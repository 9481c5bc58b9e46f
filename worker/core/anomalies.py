"""Contract anomalies of one finished call (pure): what the gateway promised never to send.

None of these blocks settlement; each becomes a row in ``anomalies`` and, aggregated, an alert. See
``models.anomalies.AnomalyKind`` for the list and docs/alerts.md for what to do about each.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from worker.core.result import Reason, Result
from worker.core.usage import cost_drift_ppm


class AnomalyKind(StrEnum):
    IDEMPOTENCY_KEY_ON_STREAM = "idempotency_key_on_stream"  # the gateway must answer 400
    NON_STREAMABLE_STREAM = "non_streamable_stream"  # streamed a model configured as not streamable
    NO_CLOSE = "no_close"  # a non-zero hold the sweeper had to finalize: the close never came
    NO_OPEN = "no_open"  # a close settled a non-zero call whose open had not come
    FOREIGN_CHUNKS = "foreign_chunks"  # objects other than chat.completion.chunk in the stream
    MIXED_IDS = "mixed_ids"  # chunks of more than one completion id in one stream
    CHARGE_ABOVE_HOLD = "charge_above_hold"  # the ledger posted a flagged true_up
    FRAMES_AFTER_DONE = "frames_after_done"  # frames after [DONE]: not part of the call
    N_IGNORED = "n_ignored"  # fewer choices than the request's n, every one finished
    PROVIDER_COST_DRIFT = "provider_cost_drift"  # our charge and the provider's cost differ > 1 %
    IMPLAUSIBLE_USAGE = "implausible_usage"  # the usage block's problem, for ``billing show``
    INCONSISTENT_USAGE = "inconsistent_usage"  # the usage block's disagreement, likewise
    # usage fields the book has no price for, with their values (the call is unsettled
    # ``unpriced_component``, its exposure priced without them: a lower bound)
    UNPRICED_COMPONENT = "unpriced_component"
    # a second call was published under the request id of this one; it was dead-lettered, unbilled
    REQUEST_ID_REUSED = "request_id_reused"
    # a complete result came after the call's failure was resolved: charged late, flagged
    CHARGED_LATE = "charged_late"
    # why the worker could not read the call (its failure is ``unreadable``), for ``billing show``
    UNREADABLE = "unreadable"
    # the gateway billed the call to its fallback account: the payer's id was unusable
    ACCOUNT_FALLBACK = "account_fallback"
    # the upstream answered with another model than the request named, one the book prices
    # differently: the call is priced at the served model; the detail names both models
    MODEL_SUBSTITUTED = "model_substituted"
    # the gateway served the call without a spend check: Redis was unreachable (or the store not
    # built yet) and BILLING_AUTH_UNREACHABLE is ``open``
    ADMITTED_UNCHECKED = "admitted_unchecked"
    # the request entry came without its prompt (``omitted_messages``) and no count of it: the
    # estimate lacks the prompt; a call without usage is unsettled ``missing_usage``
    PROMPT_UNCOUNTED = "prompt_uncounted"
    # the gateway served a route it does not bill (BILLING_UNBILLED_ROUTES=pass): the call is
    # recorded voided at 0, the detail names the route
    UNBILLED_ROUTE = "unbilled_route"


def is_non_streamable(model: str, prefixes: Iterable[str]) -> bool:
    return any(model.startswith(prefix) for prefix in prefixes)


def classify(
    result: Result,
    *,
    non_streamable: Iterable[str] = (),
    closed: bool = True,
    opened: bool = True,
    charged_above_hold: bool = False,
    requested: str | None = None,
) -> dict[AnomalyKind, str]:
    """The anomalies of a call with a one-line detail each (counts, ids and model names, never text).

    ``closed`` is False when the sweeper finalized the call (its close never came); ``opened`` is
    False when a close settled the call before any open had recorded its hold. Both only count for a
    non-zero reservation: a zero hold has nothing at stake. ``requested`` is the model the request
    named (the reservation's); a substituted call's ``result.model`` is the one that served it.
    """
    found: dict[AnomalyKind, str] = {}
    if "idempotency_key_on_stream" in result.anomalies:
        found[AnomalyKind.IDEMPOTENCY_KEY_ON_STREAM] = (
            "streamed call carried an Idempotency-Key (the gateway must refuse it with 400)"
        )
    asked = result.model if requested is None else requested  # what the gateway's filter saw
    if result.stream and is_non_streamable(asked, non_streamable):
        found[AnomalyKind.NON_STREAMABLE_STREAM] = (
            f"{asked} is configured as not streamable, yet was streamed"
        )
    if result.reserved_micros > 0 and not closed:
        found[AnomalyKind.NO_CLOSE] = (
            f"hold of {int(result.reserved_micros)} micros finalized by the sweeper: no close"
        )
    if result.reserved_micros > 0 and not opened:
        found[AnomalyKind.NO_OPEN] = (
            f"close settled a hold of {int(result.reserved_micros)} micros before its open"
        )
    if "foreign_chunks" in result.anomalies:
        found[AnomalyKind.FOREIGN_CHUNKS] = "objects other than chat.completion.chunk in the stream"
    if "mixed_ids" in result.anomalies:
        count = result.mixed_id_count
        found[AnomalyKind.MIXED_IDS] = (
            f"{count} chunk{'' if count == 1 else 's'} with a completion id other than the first"
        )
    if "frames_after_done" in result.anomalies:
        count = result.frames_after_done
        found[AnomalyKind.FRAMES_AFTER_DONE] = (
            f"{count} frame{'' if count == 1 else 's'} after [DONE], not part of the call"
            + ("; one held a usage block, not billed" if result.usage_after_done else "")
        )
    if "n_ignored" in result.anomalies:
        found[AnomalyKind.N_IGNORED] = (
            f"n={result.n_requested} requested, {len(result.choices)} choice"
            f"{'' if len(result.choices) == 1 else 's'} came, every one finished"
        )
    if "provider_cost_drift" in result.anomalies and result.provider_cost_micros is not None:
        charge = 0 if result.charge_micros is None else int(result.charge_micros)
        cost = int(result.provider_cost_micros)
        drift = cost_drift_ppm(charge, cost)
        share = "" if drift is None else f" ({drift / 10_000:+.2f} %)"
        found[AnomalyKind.PROVIDER_COST_DRIFT] = (
            f"charged {charge} micros, the provider reported {cost}{share}"
        )
    if "model_substituted" in result.anomalies:
        named = "another model" if requested is None else requested
        found[AnomalyKind.MODEL_SUBSTITUTED] = f"requested {named}, served {result.model}" + (
            ", which has no price" if result.unpriced else ""
        )
    if "prompt_uncounted" in result.anomalies:
        found[AnomalyKind.PROMPT_UNCOUNTED] = (
            "the request entry came without its prompt and no count of it: the estimate lacks it"
            + ("; no usage either, so unsettled" if result.usage is None else "")
        )
    if result.reason is Reason.IMPLAUSIBLE_USAGE:
        found[AnomalyKind.IMPLAUSIBLE_USAGE] = result.usage_problem or "implausible usage"
    if result.reason is Reason.INCONSISTENT_USAGE:
        found[AnomalyKind.INCONSISTENT_USAGE] = result.usage_problem or "inconsistent usage"
    if result.reason is Reason.UNPRICED_COMPONENT:
        found[AnomalyKind.UNPRICED_COMPONENT] = result.usage_problem or "unpriced usage component"
    if charged_above_hold:
        charge = 0 if result.charge_micros is None else int(result.charge_micros)
        found[AnomalyKind.CHARGE_ABOVE_HOLD] = (
            f"charge {charge} micros above the hold of {int(result.reserved_micros)}"
        )
    return found
