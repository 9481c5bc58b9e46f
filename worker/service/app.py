"""The Celery application: broker on Redis, beat schedule for draining and sweeping.

Production: ``celery -A worker.service.app worker`` on every host, and exactly one
``celery -A worker.service.app beat``. ``billing worker`` runs both in one process for one host.

Why beat drives the drain: a ``drain`` task reads notification batches for ``BILLING_DRAIN_MS`` and
returns; beat sends one per partition every second, with an expiry so a stopped worker does not come
back to a pile of stale tasks. There is no Celery message per call or per frame: the notification
streams are the queue, the consumer group shares them among processes, and Celery only schedules.
"""

from __future__ import annotations

import sys

from celery import Celery

from worker.config import Settings
from worker.service.logs import quiet_routine

try:
    settings = Settings.from_env()
except ValueError as exc:  # `celery -A worker.service.app …`: one line and 2, as `billing` ends
    print(f"billing: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
quiet_routine()  # no line per routine task: an idle worker is quiet (worker.service.logs)

PARITY_INTERVAL_SECONDS = 60.0
RETIRED_INTERVAL_SECONDS = 1.0
ALERTS_INTERVAL_SECONDS = 30.0
PURGE_INTERVAL_SECONDS = 600.0
CALIBRATE_INTERVAL_SECONDS = 600.0

app = Celery("billing", broker=settings.broker_url, include=["worker.service.tasks"])
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_schedule={
        **{
            f"drain-{partition}": {
                "task": "billing.drain",
                "schedule": 1.0,
                "args": (partition,),
                "options": {"expires": 2.0},
            }
            for partition in range(settings.partitions)
        },
        # Streams a change of BILLING_PARTITIONS left behind: drained, then deleted (partitions.py).
        "drain-retired": {
            "task": "billing.drain_retired",
            "schedule": RETIRED_INTERVAL_SECONDS,
            "options": {"expires": 2 * RETIRED_INTERVAL_SECONDS},
        },
        "sweep": {
            "task": "billing.sweep",
            "schedule": float(settings.sweep_interval_seconds),
            "options": {"expires": float(settings.sweep_interval_seconds)},
        },
        # Parity pairs and alerts: minutes matter, not seconds; each run is idempotent.
        "parity": {
            "task": "billing.parity",
            "schedule": PARITY_INTERVAL_SECONDS,
            "options": {"expires": PARITY_INTERVAL_SECONDS},
        },
        "alerts": {
            "task": "billing.alerts",
            "schedule": ALERTS_INTERVAL_SECONDS,
            "options": {"expires": ALERTS_INTERVAL_SECONDS},
        },
        # Spend control (``worker.service.authorization``); a no-op unless BILLING_AUTHORIZE.
        **(
            {
                "authorization-sync": {
                    "task": "billing.authorization_sync",
                    "schedule": float(settings.auth_sync_seconds),
                    # Not the interval: behind a busy pool's drains a sync would always expire.
                    "options": {"expires": max(2.0 * settings.auth_sync_seconds, 10.0)},
                }
            }
            if settings.authorize
            else {}
        ),
        # Retention (``worker.service.retention``): bounded batches each run, so a backlog takes a few runs.
        "purge": {
            "task": "billing.purge",
            "schedule": PURGE_INTERVAL_SECONDS,
            "options": {"expires": PURGE_INTERVAL_SECONDS},
        },
        # Calibration factors of the estimates (``worker.ledger.calibration``): one pass, idempotent.
        "calibrate": {
            "task": "billing.calibrate",
            "schedule": CALIBRATE_INTERVAL_SECONDS,
            "options": {"expires": CALIBRATE_INTERVAL_SECONDS},
        },
    },
)
