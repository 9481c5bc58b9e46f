"""``make bench``: the benchmark suite (``python -m benchmarks``), one module per benchmark.

Each ``bench_*`` module measures one thing against a peer in the same run and returns its figures
from ``run(smoke)``; most also run alone with ``python -m benchmarks.bench_<name> [--smoke]``.
``suite`` runs them in order and turns the figures into table rows; what they all run on (services,
machine facts, the table, workloads, timing, a consumer in a child process) is in ``harness``.
"""
