"""``billing replay``: reconcile recorded bodies offline and print one JSON result per file."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import orjson

from worker.cli import main
from worker.core.errors import BillingError
from worker.core.prices import PriceBook, load_price_book
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import RequestMeta, parse_request, request_from_dict
from worker.core.result import Result
from worker.core.terminal import printable


def sidecar_request(path: Path) -> Path:
    """Where a body's own metadata lives when ``--request`` is not given: ``NAME.request.json``."""
    return path.with_name(path.name.split(".", 1)[0] + ".request.json")


def expand(paths: tuple[Path, ...]) -> list[Path]:
    """Files as given; a directory stands for its bodies (``*.sse``, ``*.json``, not sidecars)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                sorted(
                    p
                    for p in path.iterdir()
                    if p.suffix in (".sse", ".json") and not p.name.endswith(".request.json")
                )
            )
        else:
            found.append(path)
    return found


def _looks_like_json_body(body: bytes) -> bool:
    return body.lstrip()[:1] == b"{"


def _inferred_meta(path: Path, body: bytes) -> RequestMeta:
    """Metadata for a bare body: the file name as request id, no hold, include_usage on."""
    model = "unknown"
    created: datetime = datetime.now(UTC)
    probe: dict[str, Any] | None = None
    if _looks_like_json_body(body):
        try:
            probe = orjson.loads(body)
        except orjson.JSONDecodeError:
            probe = None
    else:
        for line in body.splitlines():
            if line.startswith(b"data:") and b'"model"' in line:
                try:
                    probe = orjson.loads(line[5:])
                    break
                except orjson.JSONDecodeError:
                    continue
    if isinstance(probe, dict):
        model = probe.get("model") or model
        if isinstance(probe.get("created"), int):
            created = datetime.fromtimestamp(probe["created"], UTC)
    return request_from_dict(
        {
            "request_id": path.name,
            "account_id": "unknown",
            "model": model,
            "stream": not _looks_like_json_body(body),
            "reserved_micros": 0,
            "created_at": created.isoformat(),
        }
    )


def replay_file(path: Path, meta: RequestMeta | None, prices: PriceBook, status: int) -> Result:
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise BillingError(exc.strerror or str(exc)) from None
    if meta is None:
        sidecar = sidecar_request(path)
        meta = (
            parse_request(sidecar.read_bytes()) if sidecar.exists() else _inferred_meta(path, body)
        )
    if meta.stream:
        return reconcile_stream(meta, body, prices)
    return reconcile_response(meta, status, body, prices)


@main.command()
@click.option(
    "--request",
    "request_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Request metadata JSON for every FILE (default: NAME.request.json beside each).",
)
@click.option(
    "--prices",
    "prices_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Price book TOML (default: the bundled one).",
)
@click.option(
    "--status",
    default=200,
    show_default=True,
    type=click.IntRange(100, 599),
    help="HTTP status of a non-streamed response body.",
)
@click.option("--pretty", is_flag=True, help="Indent the JSON.")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
def replay(
    request_path: Path | None,
    prices_path: Path | None,
    status: int,
    pretty: bool,
    files: tuple[Path, ...],
) -> None:
    """Reconcile recorded SSE or JSON bodies and print one JSON result per FILE.

    A FILE may be a directory: its *.sse and *.json bodies are replayed, each with the metadata in
    NAME.request.json beside it.
    """
    try:
        prices = load_price_book(prices_path)
        meta = parse_request(request_path.read_bytes()) if request_path else None
    except OSError as exc:
        click.echo(f"billing replay: {request_path}: {exc.strerror}", err=True)
        sys.exit(2)
    except BillingError as exc:
        source = request_path if request_path and "price" not in type(exc).__name__.lower() else ""
        click.echo(printable(f"billing replay: {source}{': ' if source else ''}{exc}"), err=True)
        sys.exit(2)
    option = orjson.OPT_INDENT_2 if pretty else 0
    failed = False
    for path in expand(files):
        try:
            result = replay_file(path, meta, prices, status)
        except BillingError as exc:
            click.echo(printable(f"billing replay: {path}: {exc}"), err=True)
            failed = True
            continue
        sys.stdout.buffer.write(orjson.dumps(result.to_json(), option=option) + b"\n")
    sys.stdout.flush()
    if failed:
        sys.exit(2)
