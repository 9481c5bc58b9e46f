"""Calibration factors: per (provider, model), versioned, what estimated calls are charged at.

One row per version of a (provider, model)'s factors (``worker.core.calibration``): the fit of each
direction (median ratio of reported to estimated tokens in ppm, its 95 % interval, the sample), the
factor charged (1 000 000 = face value, when the fit is too small or an exact tokenizer's interval
holds 1), and the error without and with it on the held-out calls. A new version is written when a
factor changes (``worker.ledger.calibration``); the latest version's statistics are refreshed in
place, its factors never. ``drifted``: a segment's ratio moved past its noise (``cause``
``tokenizer``, a drift page). ``provider`` is ``''`` for calls that named none.

Revision 0027: the factor charged is the ratio of sums of the fit's calls, and ``segment_factors``
(JSON text, ``{"prompt": {segment: ppm}, "completion": {...}}``, NULL when none) holds the factors
of the content segments fitted on their own; a version's factors, pooled and per segment, are
written once and never updated.

Revision 0030: ``cause`` says why the version was written (``first``; ``tokenizer``: a segment's
ratio moved past its noise, a drift page; ``mix``: the pooled ratio moved with every segment
steady; ``refit``: a factor moved by the reversion step within the noise, or a segment gained or
lost its own factor; ``too_few_calls``: an approximate model under the minimum sample, charged
uncalibrated). ``segment_stats`` (JSON text, ``{direction: {segment or "*": [ratio_ppm, se_ppm,
samples]}}``) is the baseline later fits are compared with (``worker.core.calibration_drift``),
written once; ``moves`` (JSON text) what moved for a ``tokenizer`` or ``mix`` version.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigId, UTCDateTime


class CalibrationFactor(Base):
    __tablename__ = "calibration_factors"
    __table_args__ = (
        UniqueConstraint("provider", "model", "version"),
        CheckConstraint("version >= 1", name="version"),
        CheckConstraint(
            "prompt_factor_ppm > 0 AND completion_factor_ppm > 0", name="factor_positive"
        ),
        CheckConstraint(
            "prompt_samples >= 0 AND completion_samples >= 0 AND held_out >= 0", name="samples"
        ),
        CheckConstraint(
            "(prompt_fit_ppm IS NULL OR prompt_low_ppm <= prompt_fit_ppm"
            " AND prompt_fit_ppm <= prompt_high_ppm)"
            " AND (completion_fit_ppm IS NULL OR completion_low_ppm <= completion_fit_ppm"
            " AND completion_fit_ppm <= completion_high_ppm)",
            name="fit_within_interval",
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(200))
    version: Mapped[int]
    exact: Mapped[
        bool
    ]  # the worker ships the model's tokenizer (factor 1 unless the data refute it)
    prompt_factor_ppm: Mapped[int] = mapped_column(BigInteger)
    prompt_fit_ppm: Mapped[int | None] = mapped_column(BigInteger)
    prompt_low_ppm: Mapped[int | None] = mapped_column(BigInteger)
    prompt_high_ppm: Mapped[int | None] = mapped_column(BigInteger)
    prompt_samples: Mapped[int]
    prompt_error_raw_ppm: Mapped[int | None] = mapped_column(BigInteger)
    prompt_error_calibrated_ppm: Mapped[int | None] = mapped_column(BigInteger)
    completion_factor_ppm: Mapped[int] = mapped_column(BigInteger)
    completion_fit_ppm: Mapped[int | None] = mapped_column(BigInteger)
    completion_low_ppm: Mapped[int | None] = mapped_column(BigInteger)
    completion_high_ppm: Mapped[int | None] = mapped_column(BigInteger)
    completion_samples: Mapped[int]
    completion_error_raw_ppm: Mapped[int | None] = mapped_column(BigInteger)
    completion_error_calibrated_ppm: Mapped[int | None] = mapped_column(BigInteger)
    held_out: Mapped[int]  # held-out calls the errors were measured on
    drifted: Mapped[bool]
    segment_factors: Mapped[str | None] = mapped_column(Text)
    cause: Mapped[str | None] = mapped_column(String(16))
    segment_stats: Mapped[str | None] = mapped_column(Text)
    moves: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())  # this version was learnt
    learnt_at: Mapped[datetime] = mapped_column(UTCDateTime())  # its statistics last refreshed
