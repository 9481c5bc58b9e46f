"""What every benchmark runs on, apart from the benchmarks themselves (``benchmarks/bench_*.py``).

``services`` gives each benchmark its own Redis key prefix and PostgreSQL database; ``machine``
describes the machine and the servers for the table's header; ``table`` holds a row and writes the
table; ``workload`` (with ``streams``) writes the simulated calls; ``history`` seeds a ledger with
settled calls; ``cpu`` reads CPU time and scheduler waits; ``consumer`` builds and warms a consumer
as a worker does, and ``consumer_process`` runs one in a child process.
"""
