"""The providers' usage and cost exports, read as downloaded or pulled: pure, no IO.

Read (docs/reports.md, "Upstream reconciliation", says the same):

* **OpenAI** ``GET /v1/organization/usage/completions`` and ``GET /v1/organization/costs``: a page
  ``{"object": "page", "data": [bucket...], "has_more", "next_page"}``; a bucket ``{"object":
  "bucket", "start_time", "end_time"}`` (Unix seconds; 1m, 1h or 1d wide) with its rows in
  ``results`` (the OpenAPI document calls it ``result``: both are read). A usage row is
  ``organization.usage.completions.result``: ``num_model_requests``, ``input_tokens`` (cached ones
  included), ``input_cached_tokens``, ``output_tokens``, and the grouping fields ``project_id``,
  ``user_id``, ``api_key_id``, ``model``, ``batch``, ``service_tier``, ``api_source`` (null when
  not grouped by). A cost row is ``organization.costs.result``: ``amount: {value, currency}``,
  ``line_item``, ``project_id``, ``api_key_id``.
* **Anthropic** ``GET /v1/organizations/usage_report/messages`` and ``GET /v1/organizations/
  cost_report``: ``{"data": [bucket...], "has_more", "next_page"}``; a bucket ``{"starting_at",
  "ending_at", "results"}`` (RFC 3339). A usage row holds ``uncached_input_tokens``,
  ``cache_read_input_tokens``, ``cache_creation: {ephemeral_5m_input_tokens,
  ephemeral_1h_input_tokens}``, ``output_tokens`` and the grouping fields ``api_key_id``,
  ``workspace_id``, ``model``, ``service_tier``, ``context_window``, ``inference_geo``, ``speed``
  (it counts no requests). A cost row (it has ``amount``) holds ``amount`` (a decimal string in
  **cents**), ``currency``, ``workspace_id``, ``description``, ``model``, ``cost_type``,
  ``token_type``, ``service_tier``, ``context_window``.

A usage row must name its model: an export not grouped by model (OpenAI without
``group_by=model``, Anthropic without ``group_by[]=model``: ``model`` null) cannot be matched to the
ledger per model, so the file is refused, with how to download it grouped. The tier fields are
read as they are (OpenAI's ``batch`` a boolean or null); ``worker.upstream.tiers`` says which tier a
line is and which lines cannot be priced.

The rows of one bucket that differ only in a field the reconciliation does not keep (OpenAI's
``user_id`` and ``api_source``, Anthropic's ``context_window``, ``inference_geo``, ``speed``,
``account_id``...) are parts of one figure and are **summed** into one row: every documented
``group_by`` reads. One bucket twice in a file (two pages overlapping) must hold the same rows.

A file holds one page or a JSON list of pages. A page with ``has_more: true`` that is not followed
by another page leaves the export **incomplete** (``Export.gaps``: the report says so until an
import holds the buckets after it). Anything else — an unknown row ``object``, a missing or
negative count, a non-USD currency, a bucket without its times, a label longer than the column
that stores it (one limit, checked here for both engines) — is an ``ExportError`` naming the file,
the JSON path and the field; no row of a file is imported unless every row of it reads.

Costs are decimal USD (Anthropic's cents divided by 100): read from the JSON text as ``Decimal``
(never through a float), kept exactly as exported, and rounded half-even to integer micro-USD
once, here (``CostRow.rounded`` says when that changed the amount).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
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
# The longest value each stored label may have: the column's length (models/upstream.py), checked
# here so that SQLite (which does not enforce VARCHAR lengths) and PostgreSQL accept the same files.
LIMITS = {
    "model": 200, "project_id": 200, "api_key_id": 200, "service_tier": 32, "batch": 8,
    "line_item": 300,
}  # fmt: skip
_OTHER_LABEL = 200  # a grouping field that is read, checked, and summed over


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
    cache_write_tokens: int  # every cache write (5-minute and 1-hour), part of input_tokens
    output_tokens: int
    cache_write_1h_tokens: int = 0  # the 1-hour writes, part of cache_write_tokens

    @property
    def key(self) -> tuple[object, ...]:
        return (
            self.provider, self.bucket_start, self.model, self.project_id, self.api_key_id,
            self.service_tier, self.batch,
        )  # fmt: skip

    def __add__(self, other: UsageRow) -> UsageRow:
        requests = (
            None
            if self.requests is None or other.requests is None
            else self.requests + other.requests
        )
        return replace(
            self,
            requests=requests,
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )


@dataclass(frozen=True, slots=True)
class CostRow:
    provider: str
    bucket_start: datetime
    bucket_end: datetime
    project_id: str
    api_key_id: str
    line_item: str
    model: str
    amount: Decimal  # USD, exact
    amount_micros: int

    @property
    def rounded(self) -> bool:
        return Decimal(self.amount_micros) != self.amount * 1_000_000

    @property
    def key(self) -> tuple[object, ...]:
        return (self.provider, self.bucket_start, self.project_id, self.api_key_id, self.line_item)

    def __add__(self, other: CostRow) -> CostRow:
        amount = self.amount + other.amount
        return replace(self, amount=amount, amount_micros=micros_half_even(amount))


@dataclass(frozen=True, slots=True)
class Gap:
    """A page said ``has_more`` and its next page is not in the export: the buckets from
    ``after`` on (of ``kind``: ``usage`` or ``cost``) are missing until an import holds them."""

    provider: str
    kind: str
    after: datetime
    path: str  # the JSON path of the page that said has_more


@dataclass(frozen=True, slots=True)
class Export:
    usage: tuple[UsageRow, ...] = ()
    costs: tuple[CostRow, ...] = ()
    gaps: tuple[Gap, ...] = ()
    # Every bucket read, rows or none, as (kind, start): kind '' for an empty bucket (an OpenAI
    # page does not say whether it is of usage or costs). The store closes gaps with them.
    buckets: tuple[tuple[str, datetime], ...] = ()


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

    def model(self, row: dict[str, Any], path: str, provider: str) -> str:
        """A usage row's model; null (or empty) is an export not grouped by model, refused."""
        if row.get("model") in (None, ""):
            how = "group_by=model" if provider == "openai" else "group_by[]=model"
            raise self.fail(
                f"{path}.model",
                "no model: the export is not grouped by model, so its usage cannot be matched to the "
                f"ledger per model; download it with {how} (billing upstream pull does)",
            )
        return self.label(row, "model", path)

    def flag(self, row: dict[str, Any], key: str, path: str) -> str:
        """A boolean grouping field: 'true', 'false', or '' when null (not grouped by it)."""
        value = row.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"expected a boolean or null, got {_kind(value)}")
        return self.label(row, key, path)

    def label(self, row: dict[str, Any], key: str, path: str, limit: int | None = None) -> str:
        """A grouping field: '' when null (not grouped by it), else a short printable string."""
        value = row.get(key)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        limit = limit or LIMITS.get(key, _OTHER_LABEL)
        if not isinstance(value, str) or len(value) > limit or not value.isprintable():
            raise self.fail(
                f"{path}.{key}", f"expected a printable string of at most {limit} characters"
            )
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

    def decimal(self, value: object, path: str) -> Decimal:
        if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
            raise self.fail(path, f"expected a decimal number, got {_kind(value)}")
        try:
            exact = Decimal(value)
        except InvalidOperation:
            raise self.fail(path, "not a decimal number") from None
        if not exact.is_finite() or abs(exact) > MAX_AMOUNT * 100:
            raise self.fail(path, "out of range")
        return exact

    def usd(self, currency: object, path: str) -> None:
        if not isinstance(currency, str) or currency.lower() != "usd":
            shown = currency if isinstance(currency, str) else _kind(currency)
            raise self.fail(path, f"only USD is read, got {shown[:20]}")

    def amount(self, row: dict[str, Any], path: str) -> Decimal:
        amount = self.obj(row.get("amount"), f"{path}.amount")
        self.usd(amount.get("currency"), f"{path}.amount.currency")
        exact = self.decimal(amount.get("value"), f"{path}.amount.value")
        if abs(exact) > MAX_AMOUNT:
            raise self.fail(f"{path}.amount.value", "out of range")
        return exact

    def bucket_times(
        self, bucket: dict[str, Any], path: str, openai: bool
    ) -> tuple[datetime, datetime]:
        if openai:
            start, end = self.unix(bucket, "start_time", path), self.unix(bucket, "end_time", path)
            names = ("start_time", "end_time")
        else:
            start = self.rfc3339(bucket, "starting_at", path)
            end = self.rfc3339(bucket, "ending_at", path)
            names = ("starting_at", "ending_at")
        if end <= start:
            raise self.fail(path, f"{names[1]} is not after {names[0]}")
        return start, end


_JSON_KINDS = ((bool, "boolean"), (int, "number"), (Decimal, "number"), (float, "number"),
               (str, "string"), (list, "array"), (dict, "object"))  # fmt: skip


def _kind(value: object) -> str:
    """What a JSON value is, in JSON's words (never a Python repr)."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_KINDS if isinstance(value, kind)), "value")


def micros_half_even(amount: Decimal) -> int:
    """USD to integer micro-USD, rounded half to even (the banker's rounding finance sums use)."""
    return int((amount * 1_000_000).to_integral_value(rounding=ROUND_HALF_EVEN))


def line_item_model(line_item: str) -> str:
    """The model an OpenAI cost line item names; '' when it names none (a tool, storage).

    The forms read: ``MODEL, KIND`` (``gpt-4o-2024-08-06, input``, ``gpt-4o, cached input``), with
    a tier before it (``priority | gpt-4o, input``, ``flex | o3, output``) and qualifiers after it
    (``gpt-4.1, input, long context``): the model is the first comma-separated part, after the
    last ``|``. A line item without a comma (``web search tool calls``) names no model."""
    _tier, _sep, rest = line_item.rpartition("|")
    model, sep, _kind_of_cost = rest.partition(",")
    return model.strip() if sep and model.strip() else ""


def _pages(reader: _Reader, data: object) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(data, list):
        return [(f"$[{i}]", reader.obj(page, f"$[{i}]")) for i, page in enumerate(data)]
    return [("$", reader.obj(data, "$"))]


class _Collector:
    """The rows of one export: rows of one bucket with one key are summed (a finer grouping's
    parts); one bucket read twice (pages overlapping) must hold the same rows."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.usage: dict[tuple[object, ...], UsageRow] = {}
        self.costs: dict[tuple[object, ...], CostRow] = {}
        self.buckets: dict[tuple[str, datetime], tuple[str, tuple[object, ...]]] = {}
        self.gaps: list[Gap] = []
        self.kinds: set[str] = set()
        self.last_end: datetime | None = None

    def bucket(
        self,
        kind: str,
        start: datetime,
        end: datetime,
        path: str,
        rows: list[UsageRow] | list[CostRow],
    ) -> None:
        kind = kind if rows else ""
        if kind:
            self.kinds.add(kind)
        self.last_end = max(self.last_end or end, end)
        merged: dict[tuple[object, ...], Any] = {}
        for row in rows:
            merged[row.key] = merged[row.key] + row if row.key in merged else row
        seen = self.buckets.get((kind, start))
        fingerprint = tuple(sorted(merged.items(), key=lambda item: repr(item[0])))
        if seen is not None:
            if seen[1] != fingerprint:
                raise self.reader.fail(
                    path,
                    f"the bucket starting {start.isoformat()} is also at {seen[0]} with other "
                    "rows (two downloads of one period in one file?)",
                )
            return
        self.buckets[(kind, start)] = (path, fingerprint)
        target: dict[tuple[object, ...], Any] = self.usage if kind == "usage" else self.costs
        target.update(merged)

    def page_end(self, provider: str, page: dict[str, Any], path: str, last: bool) -> None:
        has_more = page.get("has_more")
        if has_more is not None and not isinstance(has_more, bool):
            raise self.reader.fail(f"{path}.has_more", f"expected a boolean, got {_kind(has_more)}")
        if not has_more or not last:
            return
        # The next page starts after the last bucket read; its kind is the rows' (or usage).
        after = self.last_end or datetime.fromtimestamp(0, UTC)
        for kind in sorted(self.kinds or {"usage"}):
            self.gaps.append(Gap(provider, kind, after, path))

    def export(self) -> Export:
        return Export(
            tuple(self.usage.values()),
            tuple(self.costs.values()),
            tuple(self.gaps),
            tuple(sorted(self.buckets)),
        )


def _openai(reader: _Reader, data: object) -> Export:
    found = _Collector(reader)
    pages = _pages(reader, data)
    for p, (page_path, page) in enumerate(pages):
        if page.get("object") != "page":
            raise reader.fail(f"{page_path}.object", "expected 'page' (an OpenAI usage/costs page)")
        for b, raw in enumerate(reader.array(page.get("data"), f"{page_path}.data")):
            path = f"{page_path}.data[{b}]"
            bucket = reader.obj(raw, path)
            if bucket.get("object") != "bucket":
                raise reader.fail(f"{path}.object", "expected 'bucket'")
            start, end = reader.bucket_times(bucket, path, openai=True)
            name = "results" if "results" in bucket else "result"
            usage: list[UsageRow] = []
            costs: list[CostRow] = []
            for r, raw_row in enumerate(reader.array(bucket.get(name), f"{path}.{name}")):
                row_path = f"{path}.{name}[{r}]"
                row = reader.obj(raw_row, row_path)
                kind = row.get("object")
                if kind == USAGE_OBJECT:
                    usage.append(_openai_usage(reader, row, row_path, start, end))
                elif kind == COST_OBJECT:
                    costs.append(_openai_cost(reader, row, row_path, start, end))
                else:
                    shown = kind[:60] if isinstance(kind, str) else _kind(kind)
                    raise reader.fail(
                        f"{row_path}.object", f"not a completions usage or costs row: {shown}"
                    )
            if usage or not costs:
                found.bucket("usage", start, end, path, usage)
            if costs:
                found.bucket("cost", start, end, path, costs)
        found.page_end("openai", page, page_path, last=p == len(pages) - 1)
    return found.export()


def _openai_usage(
    reader: _Reader, row: dict[str, Any], path: str, start: datetime, end: datetime
) -> UsageRow:
    input_tokens = reader.count(row, "input_tokens", path)
    cached = reader.count(row, "input_cached_tokens", path, required=False)
    if cached > input_tokens:
        raise reader.fail(f"{path}.input_cached_tokens", "larger than input_tokens")
    for summed in ("user_id", "api_source"):  # read and checked; rows are summed over them
        reader.label(row, summed, path)
    return UsageRow(
        provider="openai",
        bucket_start=start,
        bucket_end=end,
        model=reader.model(row, path, "openai"),
        project_id=reader.label(row, "project_id", path),
        api_key_id=reader.label(row, "api_key_id", path),
        service_tier=reader.label(row, "service_tier", path),
        batch=reader.flag(row, "batch", path),
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


# Anthropic's cost report: the fields that make a cost row's line item when grouped by description.
_ANTHROPIC_COST_PARTS = ("description", "model", "service_tier", "token_type", "context_window")


def _anthropic_cost(
    reader: _Reader, row: dict[str, Any], path: str, start: datetime, end: datetime
) -> CostRow:
    reader.usd(row.get("currency", "USD"), f"{path}.currency")
    raw = row.get("amount")
    if not isinstance(raw, str):  # documented as a decimal string: a JSON number is refused
        raise reader.fail(f"{path}.amount", f"expected a decimal string of cents, got {_kind(raw)}")
    cents = reader.decimal(raw, f"{path}.amount")
    amount = cents / 100
    if abs(amount) > MAX_AMOUNT:
        raise reader.fail(f"{path}.amount", "out of range")
    parts = [reader.label(row, name, path) for name in _ANTHROPIC_COST_PARTS]
    for summed in ("cost_type", "inference_geo", "speed"):
        reader.label(row, summed, path)
    line_item = " | ".join(part for part in parts if part)
    if len(line_item) > LIMITS["line_item"]:
        raise reader.fail(path, f"its line item is longer than {LIMITS['line_item']} characters")
    return CostRow(
        provider="anthropic",
        bucket_start=start,
        bucket_end=end,
        project_id=reader.label(row, "workspace_id", path, LIMITS["project_id"]),
        api_key_id="",
        line_item=line_item,
        model=reader.label(row, "model", path),
        amount=amount,
        amount_micros=micros_half_even(amount),
    )


def _anthropic_usage(
    reader: _Reader, row: dict[str, Any], path: str, start: datetime, end: datetime
) -> UsageRow:
    creation = reader.obj(row.get("cache_creation") or {}, f"{path}.cache_creation")
    where = f"{path}.cache_creation"
    five = reader.count(creation, "ephemeral_5m_input_tokens", where, required=False)
    hour = reader.count(creation, "ephemeral_1h_input_tokens", where, required=False)
    uncached = reader.count(row, "uncached_input_tokens", path)
    reads = reader.count(row, "cache_read_input_tokens", path, required=False)
    for summed in ("context_window", "inference_geo", "speed", "account_id", "service_account_id"):
        reader.label(row, summed, path)
    return UsageRow(
        provider="anthropic",
        bucket_start=start,
        bucket_end=end,
        model=reader.model(row, path, "anthropic"),
        project_id=reader.label(row, "workspace_id", path, LIMITS["project_id"]),
        api_key_id=reader.label(row, "api_key_id", path),
        service_tier=reader.label(row, "service_tier", path),
        batch="",
        requests=None,
        input_tokens=uncached + reads + five + hour,
        cached_tokens=reads,
        cache_write_tokens=five + hour,
        output_tokens=reader.count(row, "output_tokens", path),
        cache_write_1h_tokens=hour,
    )


def _anthropic(reader: _Reader, data: object) -> Export:
    found = _Collector(reader)
    pages = _pages(reader, data)
    for p, (page_path, page) in enumerate(pages):
        for b, raw in enumerate(reader.array(page.get("data"), f"{page_path}.data")):
            path = f"{page_path}.data[{b}]"
            bucket = reader.obj(raw, path)
            start, end = reader.bucket_times(bucket, path, openai=False)
            usage: list[UsageRow] = []
            costs: list[CostRow] = []
            for r, raw_row in enumerate(reader.array(bucket.get("results"), f"{path}.results")):
                row_path = f"{path}.results[{r}]"
                row = reader.obj(raw_row, row_path)
                if "amount" in row:
                    costs.append(_anthropic_cost(reader, row, row_path, start, end))
                else:
                    usage.append(_anthropic_usage(reader, row, row_path, start, end))
            if usage and costs:
                raise reader.fail(path, "holds both usage and cost rows")
            if usage or not costs:
                found.bucket("usage", start, end, path, usage)
            if costs:
                found.bucket("cost", start, end, path, costs)
        found.page_end("anthropic", page, page_path, last=p == len(pages) - 1)
    return found.export()


def read_export(provider: str, raw: bytes, source: str) -> Export:
    """Every usage and cost row of one downloaded file of ``provider``; ``ExportError`` otherwise."""
    reader = _Reader(source)
    if provider not in PROVIDERS:
        raise ExportError(f"unknown provider {provider[:40]}: use {', '.join(PROVIDERS)}")
    head = raw.lstrip()[:1]
    if head and head not in b"[{":
        raise ExportError(
            f"{source}: not a JSON export; a dashboard CSV download is not read (its columns "
            "are not published): use the Usage/Costs API pages (billing upstream pull)"
        )
    try:
        data = json.loads(raw, parse_float=Decimal)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise ExportError(f"{source}: not JSON: {str(exc)[:120]}") from None
    return _openai(reader, data) if provider == "openai" else _anthropic(reader, data)
