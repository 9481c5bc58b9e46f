"""What a worker writes to its log: what is wrong, once a minute per cause; nothing when idle.

* ``quiet_routine``: Celery logs every task received and succeeded, and beat every task it sends, at
  INFO. Beat sends a drain per partition and a look for retired streams every second, so an idle
  worker wrote about 390 lines a minute (issue 39). Those three records are dropped for the billing
  tasks (``billing.*``): the metrics count drains (``billing_last_drain_timestamp_seconds``,
  ``billing_task_interruptions_total``), and a task that fails still logs as Celery logs it. A
  billing task that expired before a process was free for it (a busy machine; the next tick sends
  another) is routine too: not logged, counted (``billing_tasks_expired_total``). Work that falls
  behind shows as the backlog's lag (``billing doctor``, the lag alert), not as these lines. Other
  tasks' records, and every record at WARNING and above, pass.
* ``Limiter``: the first occurrence of a cause is logged at once, the next ones within a minute are
  counted and reported with the next line of that cause. Per process: a pool of N processes that all
  meet the same broken database logs it at most N times a minute.
* ``cause``: one line that says what is wrong (``OperationalError: connection refused at host:port``),
  with any URL in it redacted (a password never reaches a log line).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from worker.config import redact_url

# Celery's loggers of the routine lines, and the format strings of those lines.
ROUTINE_LOGGERS = (
    "celery.app.trace",
    "celery.worker.strategy",
    "celery.beat",
    "celery.worker.request",
)
_SENDING = "Scheduler: Sending due task %s (%s)"
_EXPIRED = "Discarding revoked task: %s[%s]"
TASK_PREFIX = "billing."
CAUSE_LENGTH = 300
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


@dataclass
class Limiter:
    """At most one line per key every ``seconds``; the ones held back are counted."""

    seconds: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _last: dict[str, float] = field(default_factory=dict)
    _held: dict[str, int] = field(default_factory=dict)

    def admit(self, key: str) -> int | None:
        """None: hold this one back (counted). Otherwise log it now, with the returned number of
        lines held back since the last one logged."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.seconds:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._held.pop(key, 0)


class RoutineFilter(logging.Filter):
    """Drops the INFO records of a billing task received, succeeded, sent by beat or expired
    unstarted (counted: ``billing_tasks_expired_total``)."""

    def __init__(self) -> None:
        super().__init__()
        from celery.app import trace

        self.task_lines = (trace.LOG_RECEIVED, trace.LOG_SUCCESS)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg == _SENDING:
            return not (len(args) == 2 and str(args[1]).startswith(TASK_PREFIX))
        if record.msg == _EXPIRED and len(args) == 2 and str(args[0]).startswith(TASK_PREFIX):
            from worker.metrics import EXPIRED_TASKS

            EXPIRED_TASKS.labels(task=str(args[0]).removeprefix(TASK_PREFIX)).inc()
            return False
        if record.msg in self.task_lines:
            data = getattr(record, "data", None) or {}
            return not str(data.get("name", "")).startswith(TASK_PREFIX)
        return True


def quiet_routine() -> None:
    """Install ``RoutineFilter`` on Celery's routine loggers (once; idempotent)."""
    for name in ROUTINE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RoutineFilter) for f in logger.filters):
            logger.addFilter(RoutineFilter())


def cause(exc: BaseException) -> str:
    """``Type: first line of the message`` of the error (the driver's own, under SQLAlchemy's
    wrapper), URLs redacted, at most ``CAUSE_LENGTH`` characters."""
    inner = getattr(exc, "orig", None) or exc
    lines = str(inner).strip().splitlines()
    text = _URL.sub(lambda m: redact_url(m.group(0)), lines[0].strip()) if lines else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:CAUSE_LENGTH]
