"""The providers' usage and cost exports, read as downloaded: pure, no IO beyond the bytes given.

Read (docs/reports.md, "Upstream reconciliation", says the same):

* **OpenAI** ``GET /v1/organization/usage/completions`` and ``GET /v1/organization/costs``: a page
  ``{"object": "page", "data": [bucket...], "has_more", "next_page"}``; a bucket ``{"object":
  "bucket", "start_time", "end_time"}`` (Unix seconds) with its rows in ``results`` (the OpenAPI
  document calls it ``result``: both are read). A usage row is ``organization.usage.completions.
  result``: ``num_model_requests``, ``input_tokens`` (cached ones included), ``input_cached_tokens``,
  ``output_tokens``, and the grouping fields ``model``, ``project_id``, ``api_key_id``,
  ``service_tier``, ``batch`` (null when not grouped by). A cost row is ``organization.costs.result``:
  ``amount: {value, currency}``, ``line_item``, ``project_id``, ``api_key_id``.
* **Anthropic** ``GET /v1/organizations/usage_report/messages``: ``{"data": [bucket...], "has_more",
  "next_page"}``; a bucket ``{"starting_at", "ending_at", "results"}`` (RFC 3339) whose rows hold
  ``uncached_input_tokens``, ``cache_read_input_tokens``, ``cache_creation:
  {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}``, ``output_tokens`` and the grouping
  fields ``model``, ``workspace_id``, ``api_key_id``, ``service_tier``. It counts no requests.

A file holds one page or a JSON list of pages. Anything else — an unknown row ``object``, a missing
or negative count, a non-USD currency, a bucket without its times — is an ``ExportError`` naming the
file and the JSON path; no row of a file is imported unless every row of it reads.

Costs are decimal USD: read from the JSON text as ``Decimal`` (never through a float), kept exactly
as exported, and rounded half-even to integer micro-USD once, here (``CostRow.rounded`` says when
that changed the amount).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from worker.core.errors import InputError
from worker.core.request import parse_rfc3339

PROVIDERS = ("openai", "anthropic")
USAGE_OBJECT = "organization.usage.completions.result"
COST_OBJECT = "organization.costs.result"
# A token count past this is not a count (the columns are BIGINT; no day of one key comes near it).
MAX_COUNT = 10**15
MAX_AMOUNT = Decimal(10**9)  # USD per cost row; larger is not an invoice line


class ExportError(InputError):
    """An export that cannot be read; the message names the file and the JSON path."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    provider: str
    bucket_start: datetime
    bucket_end: datetime
    model: str
    project_id: str
    api_key_id: str
    service_tier: str
    batch: str
    requests: int | None
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int

    @property
    def key(self) -> tuple[object, ...]:
        return (
            self.provider, self.bucket_start, self.model, self.project_id, self.api_key_id,
            self.service_tier, self.batch,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class CostRow:
    provider: str
    bucket_start: datetime
    bucket_end: datetime
    project_id: str
    api_key_id: str
    line_item: str
    model: str
    amount: Decimal
    amount_micros: int

    @property
    def rounded(self) -> bool:
        return Decimal(self.amount_micros) != self.amount * 1_000_000

    @property
    def key(self) -> tuple[object, ...]:
        return (self.provider, self.bucket_start, self.project_id, self.api_key_id, self.line_item)


@dataclass(frozen=True, slots=True)
class Export:
    usage: tuple[UsageRow, ...] = ()
    costs: tuple[CostRow, ...] = ()


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str) -> ExportError:
        return ExportError(f"{self.source}: {path}: {problem}")

    def obj(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        return value

    def array(self, value: object, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"expected an array, got {_kind(value)}")
        return value

    def count(self, row: dict[str, Any], key: str, path: str, *, required: bool = True) -> int:
        value = row.get(key)
        if value is None:
            if required:
                raise self.fail(f"{path}.{key}", "missing")
            return 0
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"expected an integer count, got {_kind(value)}")
        if not 0 <= value <= MAX_COUNT:
            raise self.fail(f"{path}.{key}", f"count {value} out of range 0..{MAX_COUNT}")
        return value

    def label(self, row: dict[str, Any], key: str, path: str) -> str:
        """A grouping field: '' when null (not grouped by it), else a short string."""
        value = row.get(key)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if not isinstance(value, str) or len(value) > 200 or not value.isprintable():
            raise self.fail(f"{path}.{key}", "expected a printable string of at most 200 chars")
        return value

    def unix(self, bucket: dict[str, Any], key: str, path: str) -> datetime:
        value = bucket.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**33:
            raise self.fail(f"{path}.{key}", "expected Unix seconds")
        return datetime.fromtimestamp(value, UTC)

    def rfc3339(self, bucket: dict[str, Any], key: str, path: str) -> datetime:
        try:
            return parse_rfc3339(bucket.get(key), key)
        except InputError as exc:
            raise self.fail(f"{path}.{key}", str(exc)) from None

    def amount(self, row: dict[str, Any], path: str) -> Decimal:
        amount = self.obj(row.get("amount"), f"{path}.amount")
        currency = amount.get("currency")
        if not isinstance(currency, str) or currency.lower() != "usd":
            raise self.fail(f"{path}.amount.currency", f"only USD is read, got {currency!r:.20}")
        value = amount.get("value")
        if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
            raise self.fail(
                f"{path}.amount.value", f"expected a decimal number, got {_kind(value)}"
            )
        try:
            exact = Decimal(value)
        except InvalidOperation:
            raise self.fail(
                f"{path}.amount.value", f"not a decimal number: {value!r:.40}"
            ) from None
        if not exact.is_finite() or abs(exact) > MAX_AMOUNT:
            raise self.fail(f"{path}.amount.value", f"out of range: {value!r:.40}")
        return exact


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def micros_half_even(amount: Decimal) -> int:
    """USD to integer micro-USD, rounded half to even (the banker's rounding finance sums use)."""
    return int((amount * 1_000_000).to_integral_value(rounding=ROUND_HALF_EVEN))


def line_item_model(line_item: str) -> str:
    """The model an OpenAI cost line item names (``gpt-4o-2024-08-06, input`` → the model id);
    '' when it names none (a tool, storage, or a line item not grouped by)."""
    model, sep, _kind_of_cost = line_item.rpartition(", ")
    return model.strip() if sep and model.strip() else ""


def _pages(reader: _Reader, data: object) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(data, list):
        return [(f"$[{i}]", reader.obj(page, f"$[{i}]")) for i, page in enumerate(data)]
    return [("$", reader.obj(data, "$"))]


def _openai(reader: _Reader, data: object) -> Export:
    usage: list[UsageRow] = []
    costs: list[CostRow] = []
    for page_path, page in _pages(reader, data):
        if page.get("object") != "page":
            raise reader.fail(f"{page_path}.object", "expected 'page' (an OpenAI usage/costs page)")
        for b, raw in enumerate(reader.array(page.get("data"), f"{page_path}.data")):
            path = f"{page_path}.data[{b}]"
            bucket = reader.obj(raw, path)
            if bucket.get("object") != "bucket":
                raise reader.fail(f"{path}.object", "expected 'bucket'")
            start = reader.unix(bucket, "start_time", path)
            end = reader.unix(bucket, "end_time", path)
            if end <= start:
                raise reader.fail(path, "end_time is not after start_time")
            name = "results" if "results" in bucket else "result"
            for r, raw_row in enumerate(reader.array(bucket.get(name), f"{path}.{name}")):
                row_path = f"{path}.{name}[{r}]"
                row = reader.obj(raw_row, row_path)
                kind = row.get("object")
                if kind == USAGE_OBJECT:
                    usage.append(_openai_usage(reader, row, row_path, start, end))
                elif kind == COST_OBJECT:
                    costs.append(_openai_cost(reader, row, row_path, start, end))
                else:
                    raise reader.fail(
                        f"{row_path}.object",
                        f"not a completions usage or costs row: {kind!r:.60}",
                    )
    return Export(tuple(usage), tuple(costs))


def _openai_usage(
    reader: _Reader, row: dict[str, Any], path: str, start: datetime, end: datetime
) -> UsageRow:
    input_tokens = reader.count(row, "input_tokens", path)
    cached = reader.count(row, "input_cached_tokens", path, required=False)
    if cached > input_tokens:
        raise reader.fail(f"{path}.input_cached_tokens", "larger than input_tokens")
    return UsageRow(
        provider="openai",
        bucket_start=start,
        bucket_end=end,
        model=reader.label(row, "model", path),
        project_id=reader.label(row, "project_id", path),
        api_key_id=reader.label(row, "api_key_id", path),
        service_tier=reader.label(row, "service_tier", path),
        batch=reader.label(row, "batch", path),
        requests=reader.count(row, "num_model_requests", path),
        input_tokens=input_tokens,
        cached_tokens=cached,
        cache_write_tokens=0,
        output_tokens=reader.count(row, "output_tokens", path),
    )


def _openai_cost(
    reader: _Reader, row: dict[str, Any], path: str, start: datetime, end: datetime
) -> CostRow:
    amount = reader.amount(row, path)
    line_item = reader.label(row, "line_item", path)
    return CostRow(
        provider="openai",
        bucket_start=start,
        bucket_end=end,
        project_id=reader.label(row, "project_id", path),
        api_key_id=reader.label(row, "api_key_id", path),
        line_item=line_item,
        model=line_item_model(line_item),
        amount=amount,
        amount_micros=micros_half_even(amount),
    )


def _anthropic(reader: _Reader, data: object) -> Export:
    usage: list[UsageRow] = []
    for page_path, page in _pages(reader, data):
        for b, raw in enumerate(reader.array(page.get("data"), f"{page_path}.data")):
            path = f"{page_path}.data[{b}]"
            bucket = reader.obj(raw, path)
            start = reader.rfc3339(bucket, "starting_at", path)
            end = reader.rfc3339(bucket, "ending_at", path)
            if end <= start:
                raise reader.fail(path, "ending_at is not after starting_at")
            for r, raw_row in enumerate(reader.array(bucket.get("results"), f"{path}.results")):
                row_path = f"{path}.results[{r}]"
                row = reader.obj(raw_row, row_path)
                creation = row.get("cache_creation") or {}
                creation = reader.obj(creation, f"{row_path}.cache_creation")
                where = f"{row_path}.cache_creation"
                writes = reader.count(
                    creation, "ephemeral_5m_input_tokens", where, required=False
                ) + reader.count(creation, "ephemeral_1h_input_tokens", where, required=False)
                uncached = reader.count(row, "uncached_input_tokens", row_path)
                reads = reader.count(row, "cache_read_input_tokens", row_path, required=False)
                usage.append(
                    UsageRow(
                        provider="anthropic",
                        bucket_start=start,
                        bucket_end=end,
                        model=reader.label(row, "model", row_path),
                        project_id=reader.label(row, "workspace_id", row_path),
                        api_key_id=reader.label(row, "api_key_id", row_path),
                        service_tier=reader.label(row, "service_tier", row_path),
                        batch="",
                        requests=None,
                        input_tokens=uncached + reads + writes,
                        cached_tokens=reads,
                        cache_write_tokens=writes,
                        output_tokens=reader.count(row, "output_tokens", row_path),
                    )
                )
    return Export(tuple(usage), ())


def read_export(provider: str, raw: bytes, source: str) -> Export:
    """Every usage and cost row of one downloaded file of ``provider``; ``ExportError`` otherwise."""
    reader = _Reader(source)
    if provider not in PROVIDERS:
        raise ExportError(f"unknown provider {provider!r}: use {', '.join(PROVIDERS)}")
    try:
        data = json.loads(raw, parse_float=Decimal)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise ExportError(f"{source}: not JSON: {exc}") from None
    return _openai(reader, data) if provider == "openai" else _anthropic(reader, data)
