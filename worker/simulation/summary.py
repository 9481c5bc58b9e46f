"""Counts of a simulated run: calls by kind, feature and fault, and the fates they should meet.

Counts only; never prompt or completion text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from worker.simulation.calls import SimCall
from worker.simulation.wire import Close, Deferred, Frames, Notify, Open, Response


@dataclass(slots=True)
class Summary:
    calls: int = 0
    stream_entries: int = 0  # request, frame and response entries of the per-call streams
    notifications: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)
    by_feature: Counter[str] = field(default_factory=Counter)
    by_fault: Counter[str] = field(default_factory=Counter)
    expected: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    late: int = 0
    swept: int = 0
    true_ups: int = 0
    charge_micros: int = 0  # the expected charges of settled calls with reported usage
    reserved_micros: int = 0

    def add(self, call: SimCall) -> None:
        self.calls += 1
        self.by_kind[call.kind] += 1
        if call.meta is not None:
            self.by_model[call.meta["model"]] += 1
        self.by_feature.update(call.features)
        self.by_fault[call.fault or "none"] += 1
        fate = call.expected
        self.expected[fate.label] += 1
        if fate.dead_letter:
            self.dead_letters[fate.dead_letter] += 1
        self.late += fate.late
        self.swept += fate.swept
        self.true_ups += fate.true_up
        self.charge_micros += int(fate.charge_micros or 0)
        if fate.outcome is not None:
            self.reserved_micros += int(fate.reserved_micros)
        for op in call.ops:
            if isinstance(op, Open):
                self.stream_entries += 1
                self.notifications += 1
            elif isinstance(op, Frames):
                self.stream_entries += len(op.entries)
            elif isinstance(op, Deferred):
                self.stream_entries += len(op.frames.entries)
            elif isinstance(op, Response):
                self.stream_entries += 1
            elif isinstance(op, Close | Notify):
                self.notifications += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "stream_entries": self.stream_entries,
            "notifications": self.notifications,
            "by_kind": dict(sorted(self.by_kind.items())),
            "by_model": dict(self.by_model.most_common()),
            "by_feature": dict(self.by_feature.most_common()),
            "by_fault": dict(self.by_fault.most_common()),
            "expected": dict(self.expected.most_common()),
            "dead_letters": dict(self.dead_letters.most_common()),
            "late": self.late,
            "swept": self.swept,
            "true_ups": self.true_ups,
            "expected_charge_micros": self.charge_micros,
            "reserved_micros": self.reserved_micros,
        }
