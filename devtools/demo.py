"""``make demo``: the whole pipeline on this machine, start to finish, then the books.

Uses ``REDIS_URL`` if it answers, otherwise starts a private ``redis-server`` on a free loopback port
(or stops with a one-line explanation), migrates a fresh SQLite ledger under ``var/demo/``, starts a
real Celery worker with beat, simulates a few thousand calls with the default fault mix, waits until
every call is reconciled, prints the books (``billing report``'s table, plus dead letters and the
comparison with the simulator), writes the HTML report to ``var/demo/report.html``, stops
everything it started, and ends with the command lines that read its ledger (``DATABASE_URL=…
billing balance …``): the ledger stays in ``var/demo/billing.db``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import sessionmaker

from devtools.demo_calibration import show_calibration
from devtools.demo_funds import DEMO_ACCOUNT, fund_demo_account, print_demo_statement
from devtools.demo_spend import show_spend_control
from devtools.demo_upstream import show_upstream
from devtools.demo_webhook import WebhookReceiver
from devtools.localservers import MissingBinaryError, ServerStartError
from devtools.localservers.redis_server import PrivateRedis
from models import AlertEvent, Anomaly, Failure, Reservation
from worker.alerts.aggregation import window_start
from worker.alerts.config import AlertConfig
from worker.alerts.jobs import run_alerts, run_pairing
from worker.config import Settings, redact_url
from worker.contract.keys import Keys
from worker.core.result import Outcome
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.database import make_engine, upgrade
from worker.reports import snapshot
from worker.reports.query import build_report
from worker.reports.render_html import render_html
from worker.reports.render_table import render_table
from worker.reports.spec import ReportSpec
from worker.simulation.calls import plan
from worker.simulation.driver import play
from worker.simulation.faults import parse_faults

CALLS = int(os.environ.get("DEMO_CALLS", "3000"))
SEED = int(os.environ.get("DEMO_SEED", "7"))
WORKDIR = Path("var/demo")
# The run's own key prefix in Redis (a shared server's database 0 may hold anyone's keys): the demo
# deletes only what it wrote, under this prefix.
PREFIX = f"demo-{uuid.uuid4().hex[:8]}"
ALERT_WINDOW_SECONDS = 10
ALERT_DIGEST_SECONDS = 30
console = Console(stderr=True)


class DemoError(Exception):
    pass


def find_redis(started: list[subprocess.Popen[bytes]]) -> str:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        return url
    except redis.RedisError:
        pass
    server = PrivateRedis(WORKDIR / "redis", appendonly=False)
    try:
        server.start(timeout=5)
    except MissingBinaryError:
        raise DemoError(
            f"Redis does not answer at {redact_url(url)} and redis-server is not installed: "
            "install Redis (apt install redis-server) or set REDIS_URL to a running server."
        ) from None
    except ServerStartError as exc:
        raise DemoError(str(exc)) from None
    finally:
        if server.proc is not None:
            started.append(server.proc)
    console.print(f"started a private redis-server on 127.0.0.1:{server.port}")
    return server.url()


def clear_keys(client: redis.Redis, prefix: str) -> None:
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])


def start_worker(env: dict[str, str], workdir: Path = WORKDIR) -> subprocess.Popen[bytes]:
    log = open(workdir / "worker.log", "wb")  # noqa: SIM115 - closed with the process
    argv = [
        sys.executable, "-m", "celery", "-A", "worker.service.app", "worker", "--beat",
        "--concurrency=2", "--loglevel=INFO", "--without-gossip", "--without-mingle",
        f"--schedule={workdir / 'beat-schedule'}",
    ]  # fmt: skip
    return subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Warm shutdown: SIGTERM to the main process lets running tasks finish; then the group."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def fresh_run(
    client: redis.Redis, redis_url: str, workdir: Path, prefix: str, *, broker_db: int
) -> tuple[str, dict[str, str]]:
    """A new ledger in ``workdir`` at the migrations' head, the broker on database ``broker_db``
    of the same Redis: the ledger's URL and the demo worker's environment (a short sweep and
    drain, so the demo ends quickly), its keys under ``prefix``."""
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in workdir.glob("billing.db*"):
        stale.unlink()
    database_url = f"sqlite:///{(workdir / 'billing.db').resolve()}"
    upgrade(database_url)
    # Nothing in Redis is cleared: ``prefix`` is the run's own (no key has it yet), and the
    # broker's database may be anyone's. A previous run's expired tasks are discarded by Celery.
    broker_url = redis_url.rsplit("/", 1)[0] + f"/{broker_db}"
    env = {
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": broker_url,
        "DATABASE_URL": database_url,
        "BILLING_PREFIX": prefix,
        "BILLING_SWEEP_IDLE_MS": "3000",
        "BILLING_SWEEP_INTERVAL_SECONDS": "1",
        "BILLING_DRAIN_MS": "1000",
    }
    return database_url, env


def run() -> int:
    started: list[subprocess.Popen[bytes]] = []
    webhook = WebhookReceiver()
    try:
        redis_url = find_redis(started)
        client = redis.Redis.from_url(redis_url)
        database_url, env = fresh_run(client, redis_url, WORKDIR, PREFIX, broker_db=15)
        fund_demo_account(database_url)
        env.update(
            {
                "BILLING_RECHECK_SECONDS": "2",
                "BILLING_CLAIM_IDLE_MS": "5000",
                "BILLING_ALERT_WEBHOOK_URL": webhook.url,
                "BILLING_ALERT_WINDOW_SECONDS": str(ALERT_WINDOW_SECONDS),
                "BILLING_ALERT_DIGEST_SECONDS": str(ALERT_DIGEST_SECONDS),
            }
        )
        worker = start_worker(env)
        started.append(worker)
        calls = plan(
            CALLS, SEED, parse_faults("default"), twins=0.05, run_id=f"demo{SEED}",
            start=datetime.now(UTC),
        )  # fmt: skip
        console.print(f"simulating {len(calls)} calls (seed {SEED}, default fault mix)")
        report = play(calls, client, Keys(PREFIX), concurrency=4, progress=True, total=len(calls))
        console.print(f"published in {report.elapsed_seconds:.1f}s")
        engine = make_engine(database_url)
        sessions = sessionmaker(engine)
        wait_until_reconciled(sessions, calls, worker)
        # Beat pairs twins every minute; the demo does one pass itself before reading the books.
        pairs = run_pairing(sessions, Settings.from_env(env))
        console.print(f"parity: {sum(pairs.values())} streamed/non-streamed twins paired {pairs}")
        calibrated = show_calibration(sessions, Console())
        print_books(engine, sessions, client, calls)
        if not calibrated:
            raise DemoError("the calibrated estimates are not within 2 % on held-out calls")
        print_demo_statement(database_url)
        if not show_upstream(sessions, calls, console, WORKDIR, seed=SEED):
            raise DemoError("the upstream reconciliation did not find exactly the injected leakage")
        if not show_spend_control(sessions, client, PREFIX, WORKDIR / "spool", Console()):
            raise DemoError("spend control did not serve, refuse and serve again as it must")
        show_alerts(sessions, env, webhook)
        engine.dispose()
        clear_keys(client, PREFIX)
        print_next_steps(database_url)
        return 0
    except DemoError as exc:
        console.print(f"[red]demo:[/red] {exc}")
        return 1
    finally:
        webhook.close()
        for proc in reversed(started):
            stop(proc) if proc.args[0] == sys.executable else proc.terminate()
        for proc in started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def next_steps(
    database_url: str, month: str, billing: str, account: str = DEMO_ACCOUNT
) -> list[str]:
    """Command lines that read the demo's ledger, which stays in ``var/demo`` (copy and paste)."""
    where = f"DATABASE_URL={shlex.quote(database_url)} {shlex.quote(billing)}"
    return [
        f"{where} balance {shlex.quote(account)}",
        f"{where} statement {shlex.quote(account)} --month {month}",
        f"{where} unsettled list",
        f"{where} report --since {month}-01 --until {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}",
    ]


def print_next_steps(database_url: str) -> None:
    """The demo's last words: where its ledger is and how to look at it."""
    script = Path(sys.executable).parent / "billing"
    billing = os.path.relpath(script) if script.is_relative_to(Path.cwd()) else str(script)
    out = Console()
    out.print("\nthe ledger stays; look at it with `billing` (`--help` on any command):")
    for line in next_steps(database_url, f"{datetime.now(UTC):%Y-%m}", billing):
        out.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


def show_alerts(sessions: sessionmaker, env: dict[str, str], webhook: WebhookReceiver) -> None:
    """Deliver the demo's alerts to the local webhook and show them: a page per alert kind and window
    past a threshold, a resolved notice when it clears, one digest per kind for the rest.

    The worker's beat runs the same job every 30 s; the demo runs it itself once the digest window
    holding the last call, and the alert window after it, have closed, so it need not wait for a tick.
    """
    config = AlertConfig.from_settings(Settings.from_env(env), settle_slack=timedelta(0))
    with sessions() as s:
        found = [s.scalar(select(func.max(t.detected_at))) for t in (AlertEvent, Anomaly)]
    last = max((at for at in found if at is not None), default=datetime.now(UTC))
    until = max(
        window_start(last, config.digest_window) + config.digest_window,
        window_start(last, config.window) + 2 * config.window,
    )
    wait = (until - datetime.now(UTC)).total_seconds() + 0.2
    if wait > 0:
        console.print(f"waiting {wait:.0f} s for the last alert and digest windows to close")
        time.sleep(wait)
    run_alerts(sessions, config)
    bodies = webhook.received()
    out = Console()
    windows = Counter((body.get("window_start"), body.get("window_end")) for body in bodies)
    out.print(
        f"alerts: {len(bodies)} messages sent to the webhook at {webhook.url}"
        f" ({', '.join(f'{n} {kind}' for kind, n in sorted(_severities(bodies).items()))};"
        f" at most {max(windows.values(), default=0)} for one window)"
    )
    for body in bodies:
        out.print(body.get("text", ""), highlight=False, markup=False)
        out.print()


def _severities(bodies: list[dict]) -> Counter[str]:
    return Counter(str(body.get("severity", body.get("reason"))) for body in bodies)


def _decided(sessions: sessionmaker, late_ids: list[str]) -> tuple[int, int]:
    with sessions() as s:
        decided = s.scalar(
            select(func.count()).select_from(Reservation).where(Reservation.status != "held")
        )
        late_settled = 0
        if late_ids:
            late_settled = s.scalar(
                select(func.count())
                .select_from(Reservation)
                .where(Reservation.request_id.in_(late_ids), Reservation.status == "settled")
            )
    return int(decided or 0), int(late_settled or 0)


def wait_until_reconciled(sessions: sessionmaker, calls: list, worker: subprocess.Popen) -> None:
    target = sum(1 for call in calls if call.expected.outcome is not None)
    late_ids = [
        call.request_id
        for call in calls
        if call.expected.late and call.expected.outcome is Outcome.SETTLED
    ]
    columns = (TextColumn("reconciling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + 300
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("calls", total=target)
        while True:
            decided, late_settled = _decided(sessions, late_ids)
            bar.update(task, completed=min(decided, target))
            if decided >= target and late_settled >= len(late_ids):
                return
            if worker.poll() is not None:
                raise DemoError(f"the worker exited; see {WORKDIR / 'worker.log'}")
            if time.monotonic() > deadline:
                raise DemoError(
                    f"not every call was reconciled in time; see {WORKDIR / 'worker.log'}"
                )
            time.sleep(0.5)


def print_books(engine: Engine, sessions: sessionmaker, client: redis.Redis, calls: list) -> Path:
    """The books as ``billing report`` shows them, plus what only the demo knows; returns the HTML.

    The report holds calls by usage source, unsettled reason and void, and the money (held, charged,
    true-ups, released, still held, exposure) with its tie-out; the demo adds dead letters, the
    ledger's balance check and the comparison with the simulator.
    """
    with sessions() as s:
        first, last = s.execute(select(func.min(Reservation.created_at),
                                       func.max(Reservation.created_at))).one()  # fmt: skip
        balanced = ledger_is_balanced(s)
    since = (first or datetime.now(UTC)).replace(hour=0, minute=0, second=0, microsecond=0)
    until = (last or since).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    with snapshot(engine) as conn:
        report = build_report(conn, ReportSpec(since, until, ("day",)))
    dead = client.xlen(Keys(PREFIX).dead)
    expected = Counter(call.expected.label for call in calls)
    matched, checked = compare_with_simulator(sessions, calls)
    out = Console()
    out.print(f"{len(calls)} simulated calls", highlight=False)
    print(render_table(report), end="")
    out.print(f"dead letters: {dead}")
    out.print(f"every ledger transaction sums to zero: {'yes' if balanced else 'NO'}")
    out.print("simulator expected: " + ", ".join(f"{k} {v}" for k, v in sorted(expected.items())))
    out.print(
        f"calls whose ledger outcome matches the simulator's expectation: {matched}/{checked}"
    )
    page = WORKDIR / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    out.print(f"HTML report (open it in a browser): {page.resolve()}")
    return page


STATUS_OF = {Outcome.SETTLED: "settled", Outcome.UNSETTLED: "unsettled", Outcome.VOID: "voided"}


def compare_with_simulator(sessions: sessionmaker, calls: list) -> tuple[int, int]:
    """How many calls reached the status and reason the simulator says they should."""
    wanted = {
        call.request_id: (STATUS_OF[call.expected.outcome], call.expected.reason)
        for call in calls
        if call.expected.outcome is not None
    }
    with sessions() as s:
        rows = s.execute(
            select(Reservation.request_id, Reservation.status, Failure.reason).outerjoin(
                Failure, Failure.reservation_id == Reservation.id
            )
        ).all()
    got = {rid: (status, reason) for rid, status, reason in rows}
    matched = sum(
        1
        for rid, (status, reason) in wanted.items()
        if got.get(rid, (None, None))[0] == status
        and (reason is None or got[rid][1] == str(reason))
    )
    return matched, len(wanted)


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.demo`` (``make demo``); its arguments are only ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m devtools.demo",
        description="Simulate calls through the real worker into a fresh SQLite ledger in var/demo "
        "and show the books. Through a real gateway: python -m devtools.demo_gateway --gateway "
        "asgi|litellm (make demo-gateway).",
    )
    parser.parse_args(argv)
    return run()


if __name__ == "__main__":
    sys.exit(main())
