"""``billing export calls``: one row per call for the warehouse, streamed in constant memory.

A call is a reservation created in ``[since, until)`` (the report's window), with its usage record
and its failure when it has them (``COLUMNS``). Rows are read in ``(created_at, id)`` order through
a server-side cursor (``stream_results``; SQLite steps its cursor the same way) in batches of
``BATCH`` rows, and each batch is written before the next is read: a CSV or JSON Lines file grows a
batch at a time, a Parquet file (pyarrow, the ``export`` extra) gets one row group per batch. So
memory stays that of one batch whatever the window holds (``make bench``: the export row).

Values are exact, as a loader wants them: counts and ``*_micros`` integers, prices decimal text (USD
per 1M tokens, per request for web search) as the price book states them, times UTC (RFC 3339 with
``Z`` in CSV and JSON Lines, timestamps in Parquet), an empty cell (null) for what a call does not
have. A file is written under a temporary name and renamed when complete, so a failed export never
leaves a file that looks whole.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, select

from models import Failure, Reservation, UsageRecord
from worker.ledger.queries import OUTCOME_OF_STATUS
from worker.reports.spec import ReportError

reservations = Reservation.__table__
usage_records = UsageRecord.__table__
failures = Failure.__table__

BATCH = 20_000
FORMATS = ("csv", "jsonl", "parquet")
PRICE_KINDS = (
    "input", "cached_input", "cache_write", "cache_write_1h", "audio_input", "image_input",
    "output", "reasoning", "audio_output", "web_search",
)  # fmt: skip
TOKENS = (
    "prompt_tokens", "cached_tokens", "cache_write_tokens", "cache_write_1h_tokens",
    "audio_prompt_tokens", "image_prompt_tokens", "completion_tokens", "reasoning_tokens",
    "audio_completion_tokens", "web_search_requests",
)  # fmt: skip
# (column, kind): kind is text, int, bool, time or price (decimal text).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "text"),
    ("completion_id", "text"),
    ("account_id", "text"),
    ("model", "text"),
    ("provider", "text"),
    ("service_tier", "text"),
    ("stream", "bool"),
    ("status", "text"),
    ("outcome", "text"),
    ("reason", "text"),
    ("resolution", "text"),
    ("usage_source", "text"),
    *((name, "int") for name in TOKENS),
    ("estimate_prompt_tokens", "int"),
    ("estimate_completion_tokens", "int"),
    ("rates", "text"),
    *((f"price_{kind}", "price") for kind in PRICE_KINDS),
    ("hold_micros", "int"),
    ("charge_micros", "int"),
    ("exposure_micros", "int"),
    ("created_at", "time"),
    ("updated_at", "time"),
    ("detected_at", "time"),
    ("resolved_at", "time"),
)
NAMES = tuple(name for name, _ in COLUMNS)
_NO_PRICES: tuple[str | None, ...] = (None,) * (len(PRICE_KINDS) + 1)


def calls_query(since: datetime, until: datetime) -> Any:
    r, u, f = reservations, usage_records, failures
    return (
        select(
            r.c.id,
            r.c.request_id,
            u.c.completion_id,
            r.c.account_id,
            r.c.model,
            u.c.provider,
            u.c.service_tier,
            r.c.stream,
            r.c.status,
            f.c.reason,
            f.c.action,
            u.c.usage_source,
            *(u.c[name] for name in TOKENS),
            u.c.estimate_prompt_tokens,
            f.c.estimate_prompt_tokens,
            u.c.estimate_completion_tokens,
            f.c.estimate_completion_tokens,
            u.c.unit_prices,
            r.c.reserved_micros,
            u.c.charge_micros,
            f.c.exposure_micros,
            r.c.created_at,
            r.c.updated_at,
            f.c.detected_at,
            f.c.resolved_at,
        )
        .select_from(r.outerjoin(u, u.c.reservation_id == r.c.id))
        .outerjoin(f, f.c.reservation_id == r.c.id)
        .where(r.c.created_at >= since, r.c.created_at < until)
        .order_by(r.c.created_at, r.c.id)
    )


class _Prices:
    """``unit_prices`` JSON as (rates, price per kind...), parsed once per distinct text."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str | None, ...]] = {}

    def __call__(self, text: str | None) -> tuple[str | None, ...]:
        if text is None:
            return _NO_PRICES
        found = self.seen.get(text)
        if found is None:
            data = json.loads(text)
            found = (data.get("rates"), *(_text(data.get(kind)) for kind in PRICE_KINDS))
            if len(self.seen) < 10_000:  # distinct rate sets are few; never grow without bound
                self.seen[text] = found
        return found


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _charge(status: str, charge: int | None, exposure: int | None) -> int | None:
    """What the call was charged: its usage's charge; the estimate a resolution charged; 0 for a
    void or released call; None while its hold is open."""
    if charge is not None:
        return int(charge)
    if status == "settled_from_estimate":
        return None if exposure is None else int(exposure)
    if status in ("voided", "released"):
        return 0
    return None


def rows_of(conn: Connection, since: datetime, until: datetime) -> Iterator[list[tuple[Any, ...]]]:
    """The window's calls, a batch at a time, each row in ``NAMES`` order."""
    prices = _Prices()
    # Per statement: ``Connection.execution_options`` would change the connection itself.
    result = conn.execute(
        calls_query(since, until), execution_options={"stream_results": True, "yield_per": BATCH}
    )
    n_tokens = len(TOKENS)
    for batch in result.partitions(BATCH):
        out = []
        for row in batch:
            (_id, request_id, completion_id, account, model, provider, tier, stream, status,
             reason, action, source, *rest) = row  # fmt: skip
            tokens, rest = rest[:n_tokens], rest[n_tokens:]
            (est_p_u, est_p_f, est_c_u, est_c_f, unit_prices, hold, charge, exposure,
             created, updated, detected, resolved) = rest  # fmt: skip
            outcome = OUTCOME_OF_STATUS.get(status)  # type: ignore[call-overload]
            out.append(
                (
                    request_id, completion_id, account, model, provider, tier, bool(stream),
                    status, outcome, reason, action, source, *tokens,
                    est_p_u if est_p_u is not None else est_p_f,
                    est_c_u if est_c_u is not None else est_c_f,
                    *prices(unit_prices), hold, _charge(status, charge, exposure), exposure,
                    created, updated, detected, resolved,
                )
            )  # fmt: skip
        yield out


class Writer(Protocol):
    def write(self, rows: Sequence[tuple[Any, ...]]) -> None: ...
    def close(self) -> None: ...


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


class CsvWriter:
    """RFC 4180 rows; exact values (no spreadsheet formula escaping: a loader's file)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("w", encoding="utf-8", newline="")
        self.out = csv.writer(self.file, lineterminator="\r\n")
        self.out.writerow(NAMES)
        self.times = [i for i, (_, kind) in enumerate(COLUMNS) if kind == "time"]
        self.flags = [i for i, (_, kind) in enumerate(COLUMNS) if kind == "bool"]

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        for row in rows:
            cells = list(row)
            for i in self.times:
                if cells[i] is not None:
                    cells[i] = _iso(cells[i])
            for i in self.flags:
                cells[i] = "true" if cells[i] else "false"
            self.out.writerow(cells)

    def close(self) -> None:
        self.file.close()


class JsonlWriter:
    def __init__(self, path: Path) -> None:
        import orjson

        self.dumps = orjson.dumps
        self.option = orjson.OPT_UTC_Z | orjson.OPT_APPEND_NEWLINE
        self.file = path.open("wb")

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self.file.write(
            b"".join(
                self.dumps(dict(zip(NAMES, row, strict=True)), option=self.option) for row in rows
            )
        )

    def close(self) -> None:
        self.file.close()


class ParquetWriter:
    """One row group per batch (pyarrow's ``ParquetWriter``)."""

    def __init__(self, path: Path) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ReportError(
                "--format parquet needs pyarrow: pip install 'billing-worker[export]'"
            ) from None
        types = {
            "text": pa.string(), "price": pa.string(), "int": pa.int64(), "bool": pa.bool_(),
            "time": pa.timestamp("us", tz="UTC"),
        }  # fmt: skip
        self.pa = pa
        self.schema = pa.schema([(name, types[kind]) for name, kind in COLUMNS])
        self.out = pq.ParquetWriter(str(path), self.schema, compression="zstd")

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        arrays = [
            self.pa.array(column, type=field.type)
            for column, field in zip(columns, self.schema, strict=True)
        ]
        self.out.write_batch(self.pa.record_batch(arrays, schema=self.schema))

    def close(self) -> None:
        self.out.close()


WRITERS: dict[str, Callable[[Path], Writer]] = {
    "csv": CsvWriter,
    "jsonl": JsonlWriter,
    "parquet": ParquetWriter,
}


@dataclass
class Written:
    calls: int = 0
    files: int = 0


class _Target:
    """Where rows go: one file, or one per UTC day of the call's creation (``per_day``); each
    written under a temporary name and renamed when closed."""

    def __init__(self, out: Path, fmt: str, per_day: bool) -> None:
        self.out, self.fmt, self.per_day = out, fmt, per_day
        self.day: date | None = None
        self.writer: Writer | None = None
        self.path: Path | None = None
        self.written = Written()

    def _open(self, path: Path) -> None:
        self.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.writer = WRITERS[self.fmt](path.with_name(f".{path.name}.partial"))
        self.written.files += 1

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        if not self.per_day:
            if self.writer is None:
                self._open(self.out)
            assert self.writer is not None
            self.writer.write(rows)
            self.written.calls += len(rows)
            return
        created = NAMES.index("created_at")
        start = 0
        for i in range(len(rows) + 1):
            day = rows[i][created].date() if i < len(rows) else None
            if i == len(rows) or day != self.day:
                if start < i:
                    assert self.writer is not None
                    self.writer.write(rows[start:i])
                    self.written.calls += i - start
                start = i
                if day is not None and day != self.day:
                    self.day = day
                    self._open(self.out / f"calls-{day.isoformat()}.{self.fmt}")

    def close(self) -> None:
        if self.writer is not None and self.path is not None:
            self.writer.close()
            os.replace(self.path.with_name(f".{self.path.name}.partial"), self.path)
        self.writer = None

    def abandon(self) -> None:
        if self.writer is not None and self.path is not None:
            self.writer.close()
            self.path.with_name(f".{self.path.name}.partial").unlink(missing_ok=True)
        self.writer = None


def export_calls(
    conn: Connection, since: datetime, until: datetime, fmt: str, out: Path, *, per_day: bool
) -> Written:
    """Write the window's calls to ``out`` (a file; a directory with ``per_day``)."""
    if fmt not in FORMATS:
        raise ReportError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")
    if per_day and out.exists() and not out.is_dir():
        raise ReportError(f"--per-day writes one file per day into a directory: {out} is a file")
    if not per_day and out.is_dir():
        raise ReportError(f"--out {out} is a directory: name a file (or use --per-day)")
    target = _Target(out, fmt, per_day)
    try:
        for rows in rows_of(conn, since, until):
            target.write(rows)
        if not per_day and target.writer is None:
            target._open(out)  # an empty window: a file with its header (schema) only
        target.close()
    except BaseException:
        target.abandon()
        raise
    return target.written


def run_export(
    url: str, since: datetime, until: datetime, fmt: str, out: Path, *, per_day: bool
) -> Written:
    """``export_calls`` in one read-only snapshot of the database at ``url``."""
    from worker.ledger.database import make_engine
    from worker.reports import connect_args, snapshot

    engine = make_engine(url, readonly=True, **connect_args(url))
    try:
        with snapshot(engine) as conn:
            return export_calls(conn, since, until, fmt, out, per_day=per_day)
    finally:
        engine.dispose()
