"""A deterministic gateway simulator: realistic calls, injected faults, and the fate each should meet.

``plan`` generates a run's calls with their ``Expected`` fates without IO; ``play`` publishes them
through the gateway contract (``worker.contract.publisher``). ``billing simulate`` is the CLI shell.
"""

from worker.simulation.calls import DEFAULT_START, SimCall, iter_calls, plan
from worker.simulation.driver import PlayReport, play
from worker.simulation.expected import Expected
from worker.simulation.faults import FAULTS, FaultRates, FaultSpecError, parse_faults
from worker.simulation.summary import Summary

__all__ = [
    "DEFAULT_START",
    "FAULTS",
    "Expected",
    "FaultRates",
    "FaultSpecError",
    "PlayReport",
    "SimCall",
    "Summary",
    "iter_calls",
    "parse_faults",
    "plan",
    "play",
]
