"""Learning the calibration factors from the ledger, and reading the current ones back.

``learn`` is the periodic pass (the ``billing.calibrate`` beat task, ``billing calibrate``): it reads
the settled calls with *reported* usage of the last ``window`` (their usage record holds the reported
counts beside the worker's raw estimate of the same call), at most ``max_samples`` of the most recent
per (provider, model), splits them by request id into the fit and the held-out calls
(``worker.core.calibration.held_out``), fits each direction and measures it, and stores the result:

* no stored version, or a factor charged (pooled or a segment's) that differs from the latest
  version's by at least ``reversion_ppm`` (or from 1 to another value, or back, or a segment
  gaining or losing its own factor), or a segment whose ratio moved past its noise: a **new
  version** (version + 1), with its ``cause`` (``worker.core.calibration_drift``, against the
  statistics the latest version was written with, ``segment_stats``):

  - ``first`` — no version before;
  - ``tokenizer`` — a segment's ratio of sums moved past ``max(reversion_ppm, 5 standard
    errors)``: the provider counts that text differently (``drifted``; a drift page);
  - ``too_few_calls`` — an approximate model whose fit holds fewer than ``min_samples`` calls:
    charged uncalibrated (factor 1); written once, reported once, until the model has enough;
  - ``mix`` — every segment steady but the pooled ratio moved: the traffic's mix changed;
  - ``refit`` — a factor moved by the reversion step within the noise, or a segment gained or lost
    its own factor;
* otherwise the latest version's fit, sample and errors are refreshed in place: its factors
  (``*_factor_ppm``, ``segment_factors``), which usage records name by version, and its
  ``segment_stats`` (the baseline; filled once on a version written before they existed) are never
  updated.

Statistics are of every usable call of the window, fitted and held out: detection wants the
largest sample; the factors are fitted on the fitted calls only.

Each call is learnt with its content segment (``usage_records.estimate_segment``): the factors are
ratios of sums, per segment where a segment has enough calls (``worker.core.calibration``).

The completion direction compares the *visible* completion (reported completion minus reasoning
tokens: hidden reasoning is not streamed, the estimate cannot see it) with the estimate, as the
drift figures do (``worker.ledger.findings.settled_drift``); an estimated call is charged for what
the estimate saw, calibrated, never for reasoning it could not see.

``current`` reads the latest version of every (provider, model) into the table the reconciler
charges with (``worker.consumer.pricing.PriceSource`` carries it on the book). Runs inside the
caller's transaction; never commits.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.orm import Session

from models import CalibrationFactor, Reservation, UsageRecord
from worker.core.calibration import (
    DEFAULT_HOLDOUT_PCT,
    DEFAULT_MIN_SAMPLES,
    DIRECTIONS,
    PPM,
    CalibrationTable,
    Direction,
    Factors,
    held_out,
    learn_direction,
)
from worker.core.calibration_drift import MIX, TOKENIZER, Move, Stat, Stats, Verdict, verdict
from worker.core.calibration_drift import direction_stats as stats_of

factors_table = CalibrationFactor.__table__
usage_records = UsageRecord.__table__
reservations = Reservation.__table__

Key = tuple[str, str]  # (provider, '' when none; model)


@dataclass(frozen=True, slots=True)
class CalibrationPolicy:
    """How factors are learnt: from the calls settled in the last ``window``, at most
    ``max_samples`` of the most recent per (provider, model); a fit is used from ``min_samples``
    ratios; ``holdout_pct`` % of calls measure it; a factor moving by less than ``reversion_ppm``
    keeps its version."""

    window: timedelta = timedelta(days=1)
    max_samples: int = 5000
    min_samples: int = DEFAULT_MIN_SAMPLES
    holdout_pct: int = DEFAULT_HOLDOUT_PCT
    reversion_ppm: int = 5_000

    def __post_init__(self) -> None:
        if self.window <= timedelta(0) or self.max_samples < 1 or self.min_samples < 1:
            raise ValueError("calibration: window, max_samples and min_samples must be positive")
        if not 0 < self.holdout_pct < 100 or self.reversion_ppm < 0:
            raise ValueError("calibration: holdout_pct is in 1..99, reversion_ppm not negative")


@dataclass(frozen=True, slots=True)
class Learnt:
    """One (provider, model) after a pass: its directions, the version now current, whether that
    version is new, why (``cause``, of the current version) and whether it drifted (a segment moved
    past its noise: ``moves``)."""

    provider: str
    model: str
    exact: bool
    prompt: Direction
    completion: Direction
    held_out: int
    version: int
    new_version: bool
    drifted: bool
    cause: str = "first"
    moves: tuple[Move, ...] = ()


@dataclass(frozen=True, slots=True)
class _Pair:
    request_id: str
    prompt: tuple[int, int, str]  # (estimated, reported, segment)
    completion: tuple[int, int, str]


def _observations(
    session: Session, since: datetime, until: datetime, max_samples: int
) -> dict[Key, list[_Pair]]:
    u, r = usage_records.c, reservations.c
    rank = (
        func.row_number()
        .over(
            partition_by=(func.coalesce(u.provider, ""), u.model),
            order_by=(u.created_at.desc(), u.id.desc()),
        )
        .label("rank")
    )
    recent = (
        select(
            func.coalesce(u.provider, "").label("provider"),
            u.model,
            r.request_id,
            u.prompt_tokens,
            u.completion_tokens,
            u.reasoning_tokens,
            u.estimate_prompt_tokens,
            u.estimate_completion_tokens,
            u.estimate_segment,
            rank,
        )
        .select_from(usage_records.join(reservations, reservations.c.id == u.reservation_id))
        .where(
            u.usage_source == "reported",
            u.model.is_not(None),
            u.created_at >= since,
            u.created_at < until,
        )
        .subquery("recent")
    )
    found: dict[Key, list[_Pair]] = defaultdict(list)
    for row in session.execute(select(recent).where(recent.c.rank <= max_samples)):
        segment = row.estimate_segment or ""
        found[(row.provider, row.model)].append(
            _Pair(
                row.request_id,
                (row.estimate_prompt_tokens, row.prompt_tokens, segment),
                (
                    row.estimate_completion_tokens,
                    row.completion_tokens - row.reasoning_tokens,
                    segment,
                ),
            )
        )
    return found


def _latest(session: Session | Connection) -> dict[Key, Any]:
    """The latest version's row of every (provider, model)."""
    f = factors_table.c
    newest = (
        select(f.provider, f.model, func.max(f.version).label("version"))
        .group_by(f.provider, f.model)
        .subquery("newest")
    )
    rows = session.execute(
        select(factors_table).join(
            newest,
            (newest.c.provider == f.provider)
            & (newest.c.model == f.model)
            & (newest.c.version == f.version),
        )
    )
    return {(row.provider, row.model): row for row in rows}


def _factor_values(directions: dict[str, Direction]) -> dict[str, Any]:
    """The factors of a new version: written once, never updated."""
    segments = {name: dict(d.segments) for name, d in directions.items() if d.segments}
    return {
        **{f"{name}_factor_ppm": d.factor_ppm for name, d in directions.items()},
        "segment_factors": orjson.dumps(segments, option=orjson.OPT_SORT_KEYS).decode()
        if segments
        else None,
    }


def stored_segments(row: Any) -> dict[str, dict[str, int]]:
    """A version's segment factors by direction (``{}`` when it has none)."""
    text = getattr(row, "segment_factors", None)
    if not text:
        return {}
    data = orjson.loads(text)
    return {name: {str(k): int(v) for k, v in data.get(name, {}).items()} for name in DIRECTIONS}


def _direction_values(name: str, learnt: Direction) -> dict[str, Any]:
    fitted = learnt.fit
    return {
        f"{name}_fit_ppm": None if fitted is None else fitted.factor_ppm,
        f"{name}_low_ppm": None if fitted is None else fitted.low_ppm,
        f"{name}_high_ppm": None if fitted is None else fitted.high_ppm,
        f"{name}_samples": 0 if fitted is None else fitted.samples,
        f"{name}_error_raw_ppm": learnt.error_raw_ppm,
        f"{name}_error_calibrated_ppm": learnt.error_calibrated_ppm,
    }


def _moved_by(before: int, after: int, reversion_ppm: int) -> bool:
    if (before == PPM) != (after == PPM):
        return True
    return abs(after - before) >= max(1, reversion_ppm)


def _changed(previous: Any, name: str, learnt: Direction, reversion_ppm: int) -> bool:
    if _moved_by(getattr(previous, f"{name}_factor_ppm"), learnt.factor_ppm, reversion_ppm):
        return True
    before = stored_segments(previous).get(name, {})
    if set(before) != set(learnt.segments):
        return True
    return any(_moved_by(before[s], learnt.segments[s], reversion_ppm) for s in before)


def stats_json(stats: Stats) -> str:
    """Statistics as stored: ``{direction: {segment: [ratio_ppm, se_ppm, samples]}}``."""
    plain = {
        d: {s: [v.ratio_ppm, v.se_ppm, v.samples] for s, v in by.items()} for d, by in stats.items()
    }
    return orjson.dumps(plain, option=orjson.OPT_SORT_KEYS).decode()


def stored_stats(row: Any) -> dict[str, dict[str, Stat]] | None:
    """A version's baseline statistics; None on a version written before they were kept."""
    text = getattr(row, "segment_stats", None)
    if not text:
        return None
    data = orjson.loads(text)
    return {d: {s: Stat(*map(int, v)) for s, v in by.items()} for d, by in data.items()}


def moves_json(moves: tuple[Move, ...]) -> str | None:
    """What moved, as stored and as the alert's facts carry it."""
    if not moves:
        return None
    return orjson.dumps(
        [
            {
                "direction": m.direction,
                "segment": m.segment,
                "before_ppm": m.before.ratio_ppm,
                "before_se_ppm": m.before.se_ppm,
                "before_samples": m.before.samples,
                "after_ppm": m.after.ratio_ppm,
                "after_se_ppm": m.after.se_ppm,
                "after_samples": m.after.samples,
                "threshold_ppm": m.threshold_ppm,
            }
            for m in moves
        ]
    ).decode()


def _too_few(directions: dict[str, Direction], exact: bool, min_samples: int) -> bool:
    """An approximate model none of whose directions has a fit of ``min_samples`` calls."""
    return not exact and all(
        d.fit is None or d.fit.samples < max(1, min_samples) for d in directions.values()
    )


def _cause(found: Verdict, previous: Any, too_few: bool) -> str:
    if found.cause == TOKENIZER:
        return TOKENIZER
    if too_few:
        return "too_few_calls"
    if previous is None:
        return "first"
    return MIX if found.cause == MIX else "refit"


def learn(session: Session, now: datetime, policy: CalibrationPolicy | None = None) -> list[Learnt]:
    """One learning pass over the calls settled in [now - window, now) (see the module)."""
    policy = policy or CalibrationPolicy()
    observed = _observations(session, now - policy.window, now, policy.max_samples)
    from worker.core.estimate import is_approximate  # tiktoken: learning only, never a read

    latest = _latest(session)
    results: list[Learnt] = []
    for (provider, model), pairs in sorted(observed.items()):
        exact = not is_approximate(model)
        fit_pairs = [p for p in pairs if not held_out(p.request_id, policy.holdout_pct)]
        kept = [p for p in pairs if held_out(p.request_id, policy.holdout_pct)]
        directions = {
            name: learn_direction(
                [getattr(p, name) for p in fit_pairs],
                [getattr(p, name) for p in kept],
                exact=exact,
                min_samples=policy.min_samples,
            )
            for name in ("prompt", "completion")
        }
        values: dict[str, Any] = {
            **_direction_values("prompt", directions["prompt"]),
            **_direction_values("completion", directions["completion"]),
            "held_out": len(kept),
            "learnt_at": now,
        }
        previous = latest.get((provider, model))
        stats = {
            name: stats_of(getattr(p, name) for p in pairs) for name in ("prompt", "completion")
        }
        baseline = None if previous is None else stored_stats(previous)
        found = (
            verdict(baseline, stats, min_samples=policy.min_samples, floor_ppm=policy.reversion_ppm)
            if baseline is not None
            else Verdict("steady")
        )
        drifted = found.cause == TOKENIZER
        changed = (
            previous is None
            or drifted
            or any(
                _changed(previous, name, directions[name], policy.reversion_ppm)
                for name in directions
            )
        )
        cause = _cause(found, previous, _too_few(directions, exact, policy.min_samples))
        moves = found.moves if cause in (TOKENIZER, MIX) else ()
        if changed:
            version = 1 if previous is None else previous.version + 1
            session.execute(
                insert(factors_table).values(
                    provider=provider,
                    model=model,
                    version=version,
                    exact=exact,
                    drifted=drifted,
                    cause=cause,
                    segment_stats=stats_json(stats),
                    moves=moves_json(moves),
                    created_at=now,
                    **_factor_values(directions),
                    **values,
                )
            )
        else:
            version, cause, moves = previous.version, previous.cause or "first", ()
            if baseline is None:  # a version written before its baseline was kept: fill it once
                values["segment_stats"] = stats_json(stats)
            session.execute(
                update(factors_table).where(factors_table.c.id == previous.id).values(**values)
            )
        results.append(
            Learnt(
                provider,
                model,
                exact,
                directions["prompt"],
                directions["completion"],
                len(kept),
                version,
                changed,
                drifted,
                cause,
                moves,
            )
        )
    return results


def current(session: Session) -> CalibrationTable:
    """The latest version of every (provider, model), as the reconciler charges with it."""
    return CalibrationTable(
        {
            key: Factors(
                row.version,
                row.prompt_factor_ppm,
                row.completion_factor_ppm,
                stored_segments(row).get("prompt", {}),
                stored_segments(row).get("completion", {}),
            )
            for key, row in _latest(session).items()
        }
    )


def latest_rows(session: Session | Connection) -> list[Any]:
    """The latest version's row of every (provider, model), by provider then model."""
    return [row for _, row in sorted(_latest(session).items())]
