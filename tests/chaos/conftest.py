"""Chaos tests: SHORT by default (``make test``), FULL with ``--chaos-full`` or ``CHAOS_FULL=1``.

The private Redis and PostgreSQL servers live for the session (one pair per xdist worker); each run
gets its own ledger database and key prefix on them. Every fault test records its figures line; the
lines are printed at the end of the session and appended to ``var/chaos/figures.txt``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.localservers.postgres_server import PrivatePostgres
from devtools.localservers.redis_server import PrivateRedis

from .harness import Figures

REPO = Path(__file__).resolve().parents[2]
FIGURES_FILE = REPO / "var" / "chaos" / "figures.txt"
_recorded: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-full",
        action="store_true",
        default=False,
        help="run the chaos tests at full size (20,000 calls per fault, 100,000 fuzz inputs)",
    )
    parser.addoption(
        "--chaos-busy",
        action="store_true",
        default=False,
        help="busy machine: a CPU hog per core and one more worker process in every fault run",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("chaos_busy", default=False):
        os.environ["CHAOS_BUSY"] = "1"  # read by the harness, here and in xdist workers
    config.addinivalue_line("markers", "chaos: fault injection and hostile input (make chaos)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _recorded:
        terminalreporter.section("chaos figures")
        for line in _recorded:
            terminalreporter.write_line(line)


@dataclass(frozen=True)
class Scale:
    full: bool

    def pick(self, short: int, full: int) -> int:
        return full if self.full else short


@pytest.fixture(scope="session")
def scale(request: pytest.FixtureRequest) -> Scale:
    flag = request.config.getoption("chaos_full", default=False)
    return Scale(bool(flag) or os.environ.get("CHAOS_FULL", "") not in ("", "0"))


@pytest.fixture
def record() -> Iterator[list[Figures]]:
    """Figures appended here are printed at the end of the session and kept in var/chaos/."""
    figures: list[Figures] = []
    yield figures
    FIGURES_FILE.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES_FILE.open("a") as out:
        for item in figures:
            line = item.line()
            _recorded.append(line)
            print(line)
            out.write(line + "\n")


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
