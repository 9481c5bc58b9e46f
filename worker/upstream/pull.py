"""Pulling the providers' usage and cost exports from their admin APIs, page after page.

``pull`` asks one endpoint for ``[since, until)`` in daily buckets, grouped as the reconciliation
reads them, and follows ``next_page`` while a page says ``has_more``; it returns the raw pages,
which ``worker.upstream.exports.read_export`` reads as it reads a downloaded file. The admin key is
read from the environment by the caller and sent only in the request header (never logged, never
in an error). A page that fails with 429, a 5xx or a network error is asked again (``RETRIES``
times, ``BACKOFF_SECONDS`` apart, doubling); any other failure is a ``PullError`` naming the URL
path, the status and the provider's one-line message. Endpoints (docs/reports.md):

* OpenAI ``GET /v1/organization/usage/completions`` (``group_by`` project_id, api_key_id, model,
  batch, service_tier) and ``GET /v1/organization/costs`` (``group_by`` line_item, project_id),
  ``Authorization: Bearer`` the admin key;
* Anthropic ``GET /v1/organizations/usage_report/messages`` (``group_by[]`` api_key_id,
  workspace_id, model, service_tier) and ``GET /v1/organizations/cost_report`` (``group_by[]``
  workspace_id, description), ``x-api-key`` and ``anthropic-version: 2023-06-01``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime

from worker.core.errors import InputError

KEY_ENV = {"openai": "OPENAI_ADMIN_KEY", "anthropic": "ANTHROPIC_ADMIN_KEY"}
BASE_ENV = {"openai": "BILLING_UPSTREAM_OPENAI_URL", "anthropic": "BILLING_UPSTREAM_ANTHROPIC_URL"}
DEFAULT_BASE = {"openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com"}
PATHS = {
    ("openai", "usage"): "/v1/organization/usage/completions",
    ("openai", "cost"): "/v1/organization/costs",
    ("anthropic", "usage"): "/v1/organizations/usage_report/messages",
    ("anthropic", "cost"): "/v1/organizations/cost_report",
}
GROUP_BY = {
    ("openai", "usage"): ("project_id", "api_key_id", "model", "batch", "service_tier"),
    ("openai", "cost"): ("line_item", "project_id"),
    ("anthropic", "usage"): ("api_key_id", "workspace_id", "model", "service_tier"),
    ("anthropic", "cost"): ("workspace_id", "description"),
}
LIMIT = 31  # daily buckets per page: the most both providers' usage endpoints allow
MAX_PAGES = 10_000
RETRIES = 3
BACKOFF_SECONDS = 1.0
TIMEOUT_SECONDS = 60.0


class PullError(InputError):
    """A page that could not be fetched or is not a page; one line, no secret."""


Fetch = Callable[[str, dict[str, str]], bytes]


def page_url(
    provider: str, kind: str, base: str, since: datetime, until: datetime, page: str | None
) -> str:
    """The URL of one page (pure)."""
    if provider == "openai":
        params: list[tuple[str, str]] = [
            ("start_time", str(int(since.timestamp()))),
            ("end_time", str(int(until.timestamp()))),
            ("bucket_width", "1d"),
            ("limit", str(LIMIT)),
            *(("group_by", name) for name in GROUP_BY[(provider, kind)]),
        ]
    else:
        params = [
            ("starting_at", since.strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("ending_at", until.strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("bucket_width", "1d"),
            ("limit", str(LIMIT)),
            *(("group_by[]", name) for name in GROUP_BY[(provider, kind)]),
        ]
    if page is not None:
        params.append(("page", page))
    return base.rstrip("/") + PATHS[(provider, kind)] + "?" + urllib.parse.urlencode(params)


def headers(provider: str, key: str) -> dict[str, str]:
    if provider == "openai":
        return {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    return {"x-api-key": key, "anthropic-version": "2023-06-01", "Accept": "application/json"}


class _Retry(Exception):
    def __init__(self, why: str) -> None:
        self.why = why


def _message(body: bytes) -> str:
    """The provider's error message (``{"error": {"message"}}``), one line, short."""
    try:
        error = json.loads(body).get("error")
        text = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        text = None
    return " ".join(str(text or "").split())[:200]


def http_fetch(url: str, sent: dict[str, str]) -> bytes:
    """GET ``url``; a retryable failure raises ``_Retry``, another one ``PullError``."""
    request = urllib.request.Request(url, headers=sent, method="GET")
    path = urllib.parse.urlsplit(url).path
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        said = _message(exc.read())
        why = f"{path}: HTTP {exc.code}" + (f": {said}" if said else "")
        if exc.code == 429 or exc.code >= 500:
            raise _Retry(why) from None
        raise PullError(why) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Retry(f"{path}: {' '.join(str(reason).split())[:120]}") from None


def pull(
    provider: str,
    kind: str,
    since: datetime,
    until: datetime,
    key: str,
    base: str,
    fetch: Fetch = http_fetch,
    sleep: Callable[[float], None] = time.sleep,
) -> list[bytes]:
    """Every page of one endpoint over ``[since, until)``, raw, in order."""
    pages: list[bytes] = []
    seen: set[str] = set()
    token: str | None = None
    while True:
        url = page_url(provider, kind, base, since, until, token)
        body = _with_retries(url, headers(provider, key), fetch, sleep)
        try:
            data = json.loads(body)
        except ValueError:
            raise PullError(
                f"{PATHS[(provider, kind)]}: page {len(pages) + 1} is not JSON"
            ) from None
        if not isinstance(data, dict):
            raise PullError(f"{PATHS[(provider, kind)]}: page {len(pages) + 1} is not an object")
        pages.append(body)
        token = data.get("next_page")
        if not data.get("has_more"):
            return pages
        if not isinstance(token, str) or not token or token in seen or len(pages) >= MAX_PAGES:
            raise PullError(
                f"{PATHS[(provider, kind)]}: page {len(pages)} says has_more without a new "
                "next_page token"
            )
        seen.add(token)


def _with_retries(
    url: str, sent: dict[str, str], fetch: Fetch, sleep: Callable[[float], None]
) -> bytes:
    wait = BACKOFF_SECONDS
    for attempt in range(RETRIES + 1):
        try:
            return fetch(url, sent)
        except _Retry as exc:
            if attempt == RETRIES:
                raise PullError(f"{exc.why} (after {RETRIES + 1} attempts)") from None
            sleep(wait)
            wait *= 2
    raise AssertionError("unreachable")  # the loop returns or raises
