"""Micro-benchmarks of the pure core; run one with ``python -m benchmarks.<name>``."""
