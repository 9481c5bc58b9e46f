"""``billing upstream pull`` against a local server replaying the documented pages (started in
this process; there is no network here): pagination followed to the end, a failed page asked
again, the key sent only as the header, a second pull changing nothing. Pages are shaped as the
fixtures say (openai_usage_completions.source.txt, openai_costs.source.txt)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from models import UpstreamCost, UpstreamUsage
from worker.cli import main
from worker.ledger.database import make_engine, session_factory, upgrade
from worker.upstream import pull

KEY = "sk-admin-test-not-a-secret"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"
USAGE = json.loads((FIXTURES / "openai_usage_completions.json").read_text())
COSTS = json.loads((FIXTURES / "openai_costs.json").read_text())
# The usage fixture's two buckets, served as two pages: the first says has_more.
PAGES = {
    ("/v1/organization/usage/completions", None): {**USAGE, "data": USAGE["data"][:1], "has_more": True, "next_page": "page_2"},
    ("/v1/organization/usage/completions", "page_2"): {**USAGE, "data": USAGE["data"][1:]},
    ("/v1/organization/costs", None): COSTS,
}  # fmt: skip


class Replay(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None, str]] = []
    fail_once: set[tuple[str, str | None]] = set()

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        page = urllib.parse.parse_qs(url.query).get("page", [None])[0]
        self.seen.append((url.path, page, self.headers.get("Authorization", "")))
        if (url.path, page) in self.fail_once:
            self.fail_once.discard((url.path, page))
            self._send(503, {"error": {"message": "try again"}})
        elif self.headers.get("Authorization") != f"Bearer {KEY}":
            self._send(401, {"error": {"message": "Invalid admin key"}})
        else:
            self._send(200, PAGES[(url.path, page)])

    def _send(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_pull_follows_pages_retries_and_imports_once(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("BILLING_UPSTREAM_OPENAI_URL", server)
    monkeypatch.setenv("OPENAI_ADMIN_KEY", KEY)
    monkeypatch.setattr(pull, "BACKOFF_SECONDS", 0.01)
    Replay.seen.clear()
    Replay.fail_once = {("/v1/organization/usage/completions", "page_2")}
    args = [
        "upstream",
        "pull",
        "--provider",
        "openai",
        "--since",
        "2025-07-01",
        "--until",
        "2025-07-03",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "5 added, 0 unchanged" in result.output and "INCOMPLETE" not in result.output
    usage_pages = [(p, page) for p, page, _ in Replay.seen if p.endswith("/completions")]
    done = "/v1/organization/usage/completions"
    assert usage_pages == [(done, None), (done, "page_2"), (done, "page_2")]  # 503, then again
    assert {auth for _, _, auth in Replay.seen} == {f"Bearer {KEY}"}
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "0 added, 5 unchanged" in again.output
    engine = make_engine(url)
    with session_factory(engine)() as session:
        assert session.scalar(select(func.count()).select_from(UpstreamUsage)) == 2
        assert session.scalar(select(func.sum(UpstreamCost.amount_micros))) == 78_346
    engine.dispose()


def test_a_refused_key_is_one_line_without_the_key(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'none.db'}")
    monkeypatch.setenv("BILLING_UPSTREAM_OPENAI_URL", server)
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-wrong-key")
    args = [
        "upstream",
        "pull",
        "--provider",
        "openai",
        "--since",
        "2025-07-01",
        "--until",
        "2025-07-02",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.output.strip() == (
        "billing upstream pull: /v1/organization/usage/completions: HTTP 401: Invalid admin key"
    )
    assert "sk-wrong-key" not in result.output
