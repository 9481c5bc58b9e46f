"""``make bench``: the benchmark suite (``python -m benchmarks``), one module per benchmark.

Each ``bench_*`` module measures one thing against a peer in the same run and returns its figures
from ``run(smoke)``; most also run alone with ``python -m benchmarks.bench_<name> [--smoke]``.
``suite`` turns the figures into table rows, ``services`` gives every benchmark its own Redis key
prefix and PostgreSQL database, ``workload`` writes the simulated calls.
"""
