"""``make demo``'s calibration step: learn the estimates' factors from the run's calls with reported
usage (what the ``billing.calibrate`` beat task does every 10 minutes), then print, for each simulated
model counted by another tokenizer than the estimator's (``worker.simulation.conversation.TrueCounts``),
the estimate's error before and after calibration on the calls held out of the fit."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from sqlalchemy.orm import Session, sessionmaker

from worker.core.calibration import format_factor
from worker.ledger.calibration import Learnt, learn
from worker.reports.model import percent_ppm
from worker.simulation.conversation import MODELS

TARGET_PPM = 20_000  # within 2 % after calibration


def show_calibration(sessions: sessionmaker[Session], console: Console) -> bool:
    """One learning pass; True when every such model's calibrated error on held-out calls is
    within ``TARGET_PPM`` in both directions."""
    foreign = {(m.provider, m.name) for m in MODELS if m.true_counts is not None}
    with sessions() as session, session.begin():
        learnt = learn(session, datetime.now(UTC))
    shown: list[Learnt] = [item for item in learnt if (item.provider, item.model) in foreign]
    console.print(
        "calibration: estimate error on held-out calls (sum estimated vs sum reported),"
        " uncalibrated -> calibrated"
    )
    ok = len(shown) == len(foreign)
    for item in shown:
        parts = []
        for name, direction in (("prompt", item.prompt), ("completion", item.completion)):
            samples = 0 if direction.fit is None else direction.fit.samples
            parts.append(
                f"{name} x{format_factor(direction.factor_ppm)} (fit on {samples}):"
                f" {percent_ppm(direction.error_raw_ppm)} -> {percent_ppm(direction.error_calibrated_ppm)}"
            )
            error = direction.error_calibrated_ppm
            ok = ok and direction.used and error is not None and abs(error) <= TARGET_PPM
        console.print(
            f"  {item.provider}/{item.model} v{item.version}, {item.held_out} held out: "
            + "; ".join(parts),
            highlight=False,
        )
    verdict = "within 2 %" if ok else "NOT within 2 % (or too few calls to learn from)"
    console.print(f"calibrated estimates on held-out calls: {verdict}")
    return ok
