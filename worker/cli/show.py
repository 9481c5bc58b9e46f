"""``billing show``: the support answer for one request, from the ledger alone."""

from __future__ import annotations

from typing import Any

import click

from worker.cli import main
from worker.cli.db import echo_json, fail, ledger_session
from worker.core.calibration import format_factor
from worker.core.money import Micros
from worker.core.terminal import printable


def _usd(micros: int | None) -> str:
    return "-" if micros is None else f"{micros} micros (${Micros(micros).usd()})"


def _text(answer: dict[str, Any]) -> list[str]:
    lines = [
        f"request    {answer['request_id']}  account {answer['account_id']}  model "
        f"{answer['model']}  stream {answer['stream']}"
        + (f"  client id {answer['client_request_id']}" if answer["client_request_id"] else "")
        + (f"  endpoint {answer['endpoint']}" if answer["endpoint"] != "chat_completions" else ""),
        f"created    {answer['created_at']}  updated {answer['updated_at']}",
        f"status     {answer['status']}  outcome {answer['outcome'] or '-'}"
        f"  reason {answer['reason'] or '-'}",
        f"reserved   {_usd(answer['reserved_micros'])}",
        f"charge     {_usd(answer['charge_micros'])}  charged {_usd(answer['charged_micros'])}",
    ]
    usage = answer["usage"]
    if usage is not None:
        lines.append(
            f"usage      {answer['usage_source']}: prompt {usage['prompt_tokens']} (cached "
            f"{usage['cached_tokens']}), completion {usage['completion_tokens']} (reasoning "
            f"{usage['reasoning_tokens']}); finish {answer['finish_reasons'] or '-'}"
        )
    if usage is not None:
        parts = [
            f"{name.removesuffix('_tokens').replace('_', ' ')} {usage[name]}"
            for name in (
                "cache_write_tokens",
                "cache_write_1h_tokens",
                "audio_prompt_tokens",
                "image_prompt_tokens",
                "citation_tokens",
                "audio_completion_tokens",
                "web_search_requests",
            )
            if usage.get(name)
        ]
        if parts:
            size = usage.get("search_context_size")
            geo = usage.get("inference_geo")
            lines.append(
                "parts      "
                + ", ".join(parts)
                + (f" (search context {size})" if size else "")
                + (f" (inference geo {geo})" if geo else "")
            )
    rates = answer.get("unit_prices")
    if rates is not None:
        row = rates.get("row") or {}
        priced = "  ".join(
            f"{kind} {value}" for kind, value in rates.items() if kind not in ("rates", "row")
        )
        lines.append(
            f"charged at {rates.get('rates')} rates, USD per 1M tokens (web_search: per "
            f"request): {priced}"
        )
        lines.append(
            f"  from the {row.get('layer')} row of {row.get('model')} (provider "
            f"{row.get('provider') or 'any'}, tier {row.get('tier')}, from "
            f"{row.get('effective_from')}): {row.get('source') or '-'}"
        )
    estimate = answer["estimate"]
    if estimate is not None:
        lines.append(
            f"estimate   prompt {estimate['prompt_tokens']}, completion "
            f"{estimate['completion_tokens']}"
        )
        factors = estimate.get("calibration")
        if factors is not None and usage is not None:
            lines.append(
                f"calibrated v{factors['version']}, segment {factors.get('segment') or '-'} "
                "(its own factors when the version fitted that segment, else the model's pooled "
                f"ones): prompt {estimate['prompt_tokens']} x "
                f"{format_factor(factors['prompt_factor_ppm'])} = {usage['prompt_tokens']}, "
                f"completion {estimate['completion_tokens']} x "
                f"{format_factor(factors['completion_factor_ppm'])} = "
                f"{usage['completion_tokens']} (rounded half up; billed at these counts)"
            )
    if usage is not None and usage["provider"] is not None:
        lines.append(
            f"provider   {usage['provider']}  shape {usage['usage_shape'] or '-'}  tier "
            f"{usage['service_tier'] or '-'}  its cost {_usd(usage['provider_cost_micros'])}"
        )
    if answer["anomalies"]:
        lines.append(f"anomalies  {answer['anomalies']}")
    for finding in answer["findings"]:
        lines.append(f"finding    {finding['kind']}: {finding['detail'] or '-'}")
    failure = answer["failure"]
    if failure is not None:
        lines.append(
            f"failure    {failure['reason']} at {failure['detected_at']}, exposure "
            f"{_usd(failure['exposure_micros'])}"
        )
        resolution = failure["resolution"]
        if resolution is not None:
            lines.append(
                f"resolved   {resolution['action']} by {resolution['resolved_by']} at "
                f"{resolution['resolved_at']}: {resolution['note']}"
            )
    lines.append("entries")
    for entry in answer["entries"]:
        flag = "  FLAGGED" if entry["flagged"] else ""
        lines.append(
            f"  #{entry['transaction_id']:<8} {entry['kind']:<16} {entry['direction']:<6} "
            f"{entry['ledger_account']:<32} {entry['amount_micros']:>12}{flag}"
        )
    return lines


@main.command("show")
@click.argument("request_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show_command(request_id: str, as_json: bool) -> None:
    """Everything the ledger knows about REQUEST_ID: status, usage, charge, entries, failure.

    REQUEST_ID is the billing request id (the X-Billing-Request-Id header of the response), the
    completion id the client got (``chatcmpl-…``), or the client's own X-Request-Id."""
    from worker.ledger.queries import requests_of_client_reference, requests_of_completion, show

    what = "completion id"
    with ledger_session("show", readonly=True) as session:
        answer = show(session, request_id)
        if answer is None:
            found = requests_of_completion(session, request_id)
            if not found:
                what, found = (
                    "client X-Request-Id",
                    requests_of_client_reference(session, request_id),
                )
            if len(found) == 1:
                answer = show(session, found[0])
    if answer is None:
        if found:
            listed = ", ".join(found[:20])
            fail("show", f"{request_id}: the {what} of {len(found)} calls: {listed}")
        fail("show", f"{request_id}: no such request, completion or client request id")
    if as_json:
        echo_json(answer)
        return
    click.echo("\n".join(printable(line) for line in _text(answer)))
