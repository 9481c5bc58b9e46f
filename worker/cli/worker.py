"""``billing worker``: a Celery worker with beat embedded, for one host."""

from __future__ import annotations

from pathlib import Path

import click

from worker.cli import main


@main.command("worker")
@click.option("--concurrency", "-c", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--no-beat", is_flag=True, help="Run without the embedded beat (production form).")
def worker_command(concurrency: int, loglevel: str, no_beat: bool) -> None:
    """Consume the gateway's events and settle every call until stopped."""
    from worker.cli.db import fail, settings
    from worker.cli.metrics import prepare_multiprocess_dir

    settings("worker")  # a bad setting is one line here, not a traceback from the app's import
    try:
        prepare_multiprocess_dir()  # before the app imports worker.metrics
    except (ValueError, OSError) as exc:
        fail("worker", str(exc))
    from worker.service.app import app

    state = Path("var")
    state.mkdir(exist_ok=True)
    argv = ["worker", f"--concurrency={concurrency}", f"--loglevel={loglevel}"]
    if not no_beat:
        argv += ["--beat", f"--schedule={state / 'celerybeat-schedule'}"]
    app.worker_main(argv)
