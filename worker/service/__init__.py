"""The worker as a running service: the Celery app, its tasks and each process's runtime.

The one place that wires the packages together: the consumer and the sweeper (``pipeline``), the
alert jobs (``alerts``), retention, and the metrics they report to (``metrics``). Nothing below
imports it.
"""
