"""One row of the price book, and the one charge function.

Prices are USD per 1M tokens, which is micro-USD per token: a charge is a sum of integer token counts
times decimal prices, computed exactly (as integers over a power of ten) and rounded half-up once into integer
micro-USD. The charge takes
usage and nothing about streaming, so a streamed and a non-streamed call with the same usage cost the
same by construction.

A row prices every kind of token ``worker.result.Usage`` counts. ``input`` and ``output`` are required;
``cached_input`` is ``input`` when the row gives no cache discount and ``reasoning`` is ``output`` when
reasoning is not priced apart. ``cache_write``, ``audio_input`` and ``audio_output`` have no default: a
call that has such tokens while its row does not price them is unpriced, never charged as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum

from worker.errors import InputError, PriceBookError
from worker.money import Micros
from worker.result import Usage

MAX_PRICE = Decimal(10_000)
"""The highest price a row may hold, in USD per 1M tokens of any kind (the dearest list price is about
a twentieth of it). With counts bounded at 10^8 tokens per choice, no charge can reach 2^63."""

MAX_CHARGE = 2**63 - 1
DEFAULT_TIER = "default"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAME = re.compile(r"[^\x00-\x1f\x7f*]{1,200}")
_TIER = re.compile(r"[a-z0-9_.-]{1,32}")
_PROVIDER = re.compile(r"[a-z0-9_.-]{1,100}")


class Layer(StrEnum):
    """Where a row comes from. An ``override`` row (the project's TOML, negotiated prices) always
    wins over a ``list`` row (the community price list) that prices the same call."""

    OVERRIDE = "override"
    LIST = "list"


KINDS = (
    "input",
    "cached_input",
    "cache_write",
    "output",
    "reasoning",
    "audio_input",
    "audio_output",
)
OPTIONAL_KINDS = ("cache_write", "audio_input", "audio_output")
"""The kinds with no default price: a row that does not state one leaves them unpriced."""


@dataclass(frozen=True, slots=True)
class Price:
    """One effective-dated row: the prices of one model, for one tier and one provider (None: any).

    ``model`` is an exact name; ``aliases`` are other exact names priced by the same rows. With
    ``snapshots``, a dated name of the model (``model-YYYY-MM-DD`` or ``model-MMDD``) is priced by them
    too. The row is in force from ``effective_from`` until ``until`` (exclusive; None: no end).
    ``max_input_tokens`` / ``max_output_tokens`` are the model's context limits, when known, and
    ``prompt_limit`` the longest prompt these prices hold for (longer prompts cost a long-context rate
    the row does not hold: unpriced). ``source`` says where the row came from and ``reason`` why it was
    backdated, if it was.
    """

    model: str
    effective_from: datetime
    input: Decimal
    cached_input: Decimal
    output: Decimal
    cache_write: Decimal | None = None
    reasoning: Decimal | None = None
    audio_input: Decimal | None = None
    audio_output: Decimal | None = None
    tier: str = DEFAULT_TIER
    provider: str | None = None
    layer: Layer = Layer.OVERRIDE
    aliases: tuple[str, ...] = ()
    snapshots: bool = False
    until: datetime | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    prompt_limit: int | None = None
    source: str = field(default="", compare=False)
    reason: str | None = field(default=None, compare=False)
    # The seven prices as integers over 10**_scale, in the order of ``charge``'s counts: exact
    # integer arithmetic, one rounding.
    _scale: int = field(default=0, init=False, repr=False, compare=False)
    _units: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"price of {self.model!r}"
        if not isinstance(self.model, str) or not _NAME.fullmatch(self.model):
            raise PriceBookError(
                f"{where}: model must be an exact name of 1-200 characters without '*' or control "
                "characters (prefix patterns are not supported: list the names, or aliases)"
            )
        for alias in self.aliases:
            if not isinstance(alias, str) or not _NAME.fullmatch(alias):
                raise PriceBookError(f"{where}: alias {alias!r} is not a valid exact name")
        if not isinstance(self.tier, str) or not _TIER.fullmatch(self.tier):
            raise PriceBookError(f"{where}: tier {self.tier!r} must be a lower-case name")
        if self.provider is not None and (
            not isinstance(self.provider, str) or not _PROVIDER.fullmatch(self.provider)
        ):
            raise PriceBookError(f"{where}: provider {self.provider!r} must be a lower-case name")
        for name in KINDS:
            value = getattr(self, name)
            if value is None and name in ("input", "cached_input", "output"):
                raise PriceBookError(f"{where}: {name} is required")
            if value is not None:
                check_price(value, f"{where}: {name}")
        for name in ("effective_from", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise PriceBookError(f"{where}: {name} must be an aware timestamp")
        if self.until is not None and self.until <= self.effective_from:
            raise PriceBookError(f"{where}: until must be later than effective_from")
        for name in ("max_input_tokens", "max_output_tokens", "prompt_limit"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**53
            ):
                raise PriceBookError(f"{where}: {name} must be a positive integer")
        rates = (
            self.input,
            self.cached_input,
            self.cache_write or Decimal(0),
            self.audio_input or Decimal(0),
            self.output,
            self.output if self.reasoning is None else self.reasoning,
            self.audio_output or Decimal(0),
        )
        scale = max(0, *(-int(rate.as_tuple().exponent) for rate in rates))
        object.__setattr__(self, "_scale", scale)
        object.__setattr__(self, "_units", tuple(int(rate.scaleb(scale)) for rate in rates))

    @property
    def key(self) -> tuple[str, str, str | None, str, datetime]:
        """What identifies a row: two rows with one key are the same price (history never changes)."""
        return (self.layer.value, self.model, self.provider, self.tier, self.effective_from)

    def values(self) -> tuple[object, ...]:
        """Everything a row says beyond its key, to tell a repeated import from a changed price."""
        return (
            *(getattr(self, name) for name in KINDS),
            self.aliases,
            self.snapshots,
            self.until,
            self.max_input_tokens,
            self.max_output_tokens,
            self.prompt_limit,
        )

    def in_force(self, at: datetime) -> bool:
        return self.effective_from <= at and (self.until is None or at < self.until)

    @property
    def context_window(self) -> int | None:
        """The most tokens a call can have (prompt + completion), when both limits are known."""
        if self.max_input_tokens is None or self.max_output_tokens is None:
            return None
        return self.max_input_tokens + self.max_output_tokens

    @property
    def unpriced_kinds(self) -> tuple[str, ...]:
        """The kinds of token the row has no price for: a call with any of them is unpriced."""
        return tuple(kind for kind in OPTIONAL_KINDS if getattr(self, kind) is None)

    def kinds_text(self) -> str:
        """What the row charges each kind of token (USD per 1M) and what it leaves unpriced."""
        priced = [
            f"{kind} {getattr(self, kind)}" for kind in KINDS if getattr(self, kind) is not None
        ]
        if self.reasoning is None:
            priced.append(f"reasoning at the output price {self.output}")
        text = "prices " + ", ".join(priced)
        if self.unpriced_kinds:
            text += (
                f"; leaves unpriced {', '.join(self.unpriced_kinds)} (a call with such tokens is "
                "unpriced)"
            )
        if self.prompt_limit is not None:
            text += f"; a prompt over {self.prompt_limit} tokens is unpriced"
        return text

    def unpriced_because(self, usage: Usage) -> str | None:
        """Why this row cannot price ``usage`` (None when it can)."""
        if self.prompt_limit is not None and usage.prompt_tokens > self.prompt_limit:
            return (
                f"a prompt of {usage.prompt_tokens} tokens is past the {self.prompt_limit} tokens "
                "these prices hold for (long-context rates are not in the book)"
            )
        for count, price, kind in (
            (usage.cache_write_tokens, self.cache_write, "cache-write"),
            (usage.audio_prompt_tokens, self.audio_input, "audio input"),
            (usage.audio_completion_tokens, self.audio_output, "audio output"),
        ):
            if count and price is None:
                return f"the call has {count} {kind} tokens and the row has no {kind} price"
        return None

    def charge(self, usage: Usage) -> Micros | None:
        """Integer micro-USD for ``usage``; None when the row does not price a kind it has.

        The parts of ``usage`` must fit in their totals (``worker.result.Usage``: cache reads, cache
        writes and audio inside ``prompt_tokens``; reasoning and audio inside ``completion_tokens``);
        parts that do not, or a charge past 2^63 - 1, raise ``InputError``: never a guessed charge.
        """
        if self.unpriced_because(usage) is not None:
            return None
        text_in = (
            usage.prompt_tokens
            - usage.cached_tokens
            - usage.cache_write_tokens
            - usage.audio_prompt_tokens
        )
        text_out = usage.completion_tokens - usage.reasoning_tokens - usage.audio_completion_tokens
        parts = (
            text_in,
            usage.cached_tokens,
            usage.cache_write_tokens,
            usage.audio_prompt_tokens,
            text_out,
            usage.reasoning_tokens,
            usage.audio_completion_tokens,
        )
        if min(parts) < 0:
            raise InputError(f"usage parts exceed their totals or are negative: {usage}")
        scaled = sum(count * unit for count, unit in zip(parts, self._units, strict=True))
        charged, rest = divmod(scaled, 10**self._scale)
        if 2 * rest >= 10**self._scale:  # half up; never negative here
            charged += 1
        if charged > MAX_CHARGE:
            raise InputError(f"a charge of {charged} micro-USD is past 2^63 - 1: {usage}")
        return Micros(charged)


def check_price(value: object, where: str) -> Decimal:
    """A price as the book keeps it: a finite Decimal in [0, MAX_PRICE], at most 40 characters."""
    if not isinstance(value, Decimal):
        raise PriceBookError(f"{where} must be a Decimal, not {type(value).__name__}")
    if not value.is_finite() or value < 0:
        raise PriceBookError(f"{where} must be a non-negative decimal, got {value}")
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -34:
        raise PriceBookError(f"{where} has more digits than the book keeps: {value}")
    if value > MAX_PRICE:
        raise PriceBookError(
            f"{where} is {value} USD per 1M tokens, above the bound of {MAX_PRICE} "
            "(a typo or a per-token price given per 1M?)"
        )
    if len(format(value, "f")) > 40:
        raise PriceBookError(f"{where} has more digits than the book keeps: {value}")
    return value


def plain(value: Decimal) -> Decimal:
    """``value`` without an exponent (``1E+1`` → ``10``), so the book stores and prints plain text."""
    return Decimal(format(value, "f"))
