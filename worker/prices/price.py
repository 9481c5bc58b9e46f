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

A row may carry long-context *bands* (``Band``): from a prompt of more than ``above`` tokens on, the
whole call is priced at the band's rates (``Price.rates_for`` says which rates price a call).
"""

from __future__ import annotations

import json
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
_CHARGE_ORDER = (
    "input",
    "cached_input",
    "cache_write",
    "audio_input",
    "output",
    "reasoning",
    "audio_output",
)
"""The kinds in the order ``charge`` multiplies them (text input, then the parts of the prompt,
text output, then the parts of the completion)."""
_LIMIT = 2**53  # thresholds and limits: positive integers below this (exact in JSON everywhere)


def _rate_units(rates: tuple[Decimal | None, ...]) -> tuple[int, tuple[int | None, ...]]:
    """Rates (in ``charge``'s order) as integers over ``10**scale``; None stays None (unpriced)."""
    scale = max(0, *(-int(rate.as_tuple().exponent) for rate in rates if rate is not None))
    return scale, tuple(None if rate is None else int(rate.scaleb(scale)) for rate in rates)


@dataclass(frozen=True, slots=True)
class Band:
    """The rates of a row for prompts of more than ``above`` tokens (a long-context band).

    Every kind is optional: a kind the band does not state is unpriced in the band (a call in the
    band with such tokens is unpriced, never charged at the row's own rate), with two exceptions
    that follow the row's own defaults: cache reads are charged at the band's ``input`` when the row
    charges them at its own input rate (``cached_input == input``: no cache discount), and reasoning
    at the band's ``output`` when the row prices reasoning at its output rate (``reasoning`` None).
    """

    above: int
    input: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    output: Decimal | None = None
    reasoning: Decimal | None = None
    audio_input: Decimal | None = None
    audio_output: Decimal | None = None

    def __post_init__(self) -> None:
        where = f"band above {self.above!r} tokens"
        if (
            not isinstance(self.above, int)
            or isinstance(self.above, bool)
            or not 0 < self.above < _LIMIT
        ):
            raise PriceBookError(f"{where}: above must be a positive integer (prompt tokens)")
        if all(getattr(self, kind) is None for kind in KINDS):
            raise PriceBookError(
                f"{where}: a band states at least one rate (a threshold with no rates is a "
                "prompt_limit)"
            )
        for kind in KINDS:
            value = getattr(self, kind)
            if value is not None:
                check_price(value, f"{where}: {kind}")

    def stated(self) -> dict[str, str]:
        """The rates the band states, by kind, as exact decimal text."""
        return {kind: str(getattr(self, kind)) for kind in KINDS if getattr(self, kind) is not None}


def bands_to_json(bands: tuple[Band, ...]) -> str:
    """The text the ``prices`` table keeps for a row's bands: '' for none, else a JSON array of
    ``{"above": N, KIND: "decimal text", ...}``, the rates as strings (exact, never floats)."""
    if not bands:
        return ""
    return json.dumps(
        [{"above": band.above, **band.stated()} for band in bands], separators=(",", ":")
    )


def bands_from_json(text: str | None, where: str = "bands") -> tuple[Band, ...]:
    """The bands ``bands_to_json`` wrote; raises ``PriceBookError`` on anything else."""
    if not text:
        return ()
    try:
        data = json.loads(text)
    except ValueError:
        raise PriceBookError(f"{where}: not JSON") from None
    if not isinstance(data, list):
        raise PriceBookError(f"{where}: expected a JSON array of bands")
    bands = []
    for item in data:
        if not isinstance(item, dict) or set(item) - {"above", *KINDS}:
            raise PriceBookError(f"{where}: a band is an object of above and the kinds' rates")
        rates = {}
        for kind in KINDS:
            value = item.get(kind)
            if value is not None:
                if not isinstance(value, str):
                    raise PriceBookError(f"{where}: {kind} must be decimal text")
                try:
                    rates[kind] = Decimal(value)
                except ArithmeticError:
                    raise PriceBookError(f"{where}: {kind} is not a decimal: {value!r}") from None
        try:
            bands.append(Band(above=item.get("above"), **rates))  # type: ignore[arg-type]
        except PriceBookError as exc:
            raise PriceBookError(f"{where}: {exc}") from None
    return tuple(bands)


@dataclass(frozen=True, slots=True)
class Price:
    """One effective-dated row: the prices of one model, for one tier and one provider (None: any).

    ``model`` is an exact name; ``aliases`` are other exact names priced by the same rows. With
    ``snapshots``, a dated name of the model (``model-YYYY-MM-DD`` or ``model-MMDD``) is priced by them
    too. The row is in force from ``effective_from`` until ``until`` (exclusive; None: no end).
    ``max_input_tokens`` / ``max_output_tokens`` are the model's context limits, when known.
    ``bands`` are the long-context rates, by threshold (``Band``), and ``prompt_limit`` the lowest
    threshold the source names: a longer prompt is priced by the band it falls in, or is unpriced
    when the row has no band there (``rates_for``). ``source`` says where the row came from and
    ``reason`` why it was backdated, if it was.
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
    bands: tuple[Band, ...] = ()
    source: str = field(default="", compare=False)
    reason: str | None = field(default=None, compare=False)
    # The seven prices as integers over 10**_scale, in the order of ``charge``'s counts: exact
    # integer arithmetic, one rounding.
    _scale: int = field(default=0, init=False, repr=False, compare=False)
    _units: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)
    # Each band's rates as (scale, units), the units in the same order, None for a kind the band
    # leaves unpriced (after the two defaults ``Band`` describes).
    _band_units: tuple[tuple[int, tuple[int | None, ...]], ...] = field(
        default=(), init=False, repr=False, compare=False
    )

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
                not isinstance(value, int) or isinstance(value, bool) or not 0 < value < _LIMIT
            ):
                raise PriceBookError(f"{where}: {name} must be a positive integer")
        if not isinstance(self.bands, tuple) or not all(isinstance(b, Band) for b in self.bands):
            raise PriceBookError(f"{where}: bands must be a tuple of Band")
        bands = tuple(sorted(self.bands, key=lambda band: band.above))
        if len({band.above for band in bands}) != len(bands):
            raise PriceBookError(f"{where}: two bands start above the same number of tokens")
        object.__setattr__(self, "bands", bands)
        rates = (
            self.input,
            self.cached_input,
            self.cache_write or Decimal(0),
            self.audio_input or Decimal(0),
            self.output,
            self.output if self.reasoning is None else self.reasoning,
            self.audio_output or Decimal(0),
        )
        scale, units = _rate_units(rates)
        object.__setattr__(self, "_scale", scale)
        object.__setattr__(self, "_units", units)
        object.__setattr__(
            self, "_band_units", tuple(_rate_units(self._band_rates(band)) for band in bands)
        )

    def _band_rates(self, band: Band) -> tuple[Decimal | None, ...]:
        """A band's rates in ``charge``'s order: the band's own, and None where it states none,
        except the two defaults that follow the row's (``Band``)."""
        cached = band.cached_input
        if cached is None and self.cached_input == self.input:
            cached = band.input  # the row gives no cache discount: neither does its band
        reasoning = band.reasoning
        if reasoning is None and self.reasoning is None:
            reasoning = band.output  # the row prices reasoning as output: so does its band
        return (
            band.input,
            cached,
            band.cache_write,
            band.audio_input,
            band.output,
            reasoning,
            band.audio_output,
        )

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
            self.bands,
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

    def _where(self, prompt_tokens: int) -> tuple[int | None, int | None]:
        """(threshold, band index) for a prompt of ``prompt_tokens`` tokens: (None, None) for the
        row's own rates, (T, i) for the band above T, (T, None) past a threshold T that no band
        prices (``prompt_limit`` with no band there)."""
        index = None
        for number, band in enumerate(self.bands):  # sorted by threshold
            if prompt_tokens > band.above:
                index = number
        limit = self.prompt_limit
        if (
            limit is not None
            and prompt_tokens > limit
            and (index is None or self.bands[index].above < limit)
        ):
            return limit, None
        return (None, None) if index is None else (self.bands[index].above, index)

    def rates_for(self, prompt_tokens: int) -> tuple[int | None, Band | None]:
        """Which rates price a call whose prompt has ``prompt_tokens`` tokens: (None, None) the
        row's own; (T, band) the band above T; (T, None) none (past threshold T, no band there).

        The band is chosen by the prompt alone, and then prices the whole call, every kind of
        token, as each provider bills it: Google's Gemini API pricing page gives each rate of
        Gemini 2.5 Pro (input, output, context caching) "prompts <= 200k tokens" and "prompts >
        200k tokens" (https://ai.google.dev/gemini-api/docs/pricing); OpenAI: "prompts with >272K
        input tokens are priced at 2x input and 1.5x output for the full session for standard,
        batch, and flex" (https://developers.openai.com/api/docs/models/gpt-5.4); Anthropic: a
        request over 200K input tokens has all its tokens charged at the long-context rates, the
        200K counting input, cache writes and cache reads, with the caching multipliers on top
        (https://docs.anthropic.com/en/docs/about-claude/pricing, "Long context pricing"). So the
        count is ``prompt_tokens``: every input token, cache reads and writes and audio included.
        """
        threshold, index = self._where(prompt_tokens)
        return threshold, None if index is None else self.bands[index]

    def band_view(self, band: Band) -> dict[str, object]:
        """What ``band`` (one of the row's) charges: ``priced`` by kind (USD per 1M, in ``KINDS``
        order, the two defaults applied), ``unpriced`` kinds, and which defaults applied."""
        rates = dict(zip(_CHARGE_ORDER, self._band_rates(band), strict=True))
        return {
            "above": band.above,
            "priced": {kind: str(rates[kind]) for kind in KINDS if rates[kind] is not None},
            "cached_input_at_input_price": band.cached_input is None
            and rates["cached_input"] is not None,
            "reasoning_at_output_price": band.reasoning is None and rates["reasoning"] is not None,
            "unpriced": [kind for kind in KINDS if rates[kind] is None],
        }

    def unpriced_prompts(self) -> tuple[int, int | None] | None:
        """The prompt lengths no rates price, as (over, up to; None: no end), when a ``prompt_limit``
        has no band at it; None when every prompt length has rates."""
        limit = self.prompt_limit
        if limit is None or any(band.above == limit for band in self.bands):
            return None
        return limit, min((band.above for band in self.bands if band.above > limit), default=None)

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
        for band in self.bands:
            view = self.band_view(band)
            derived = {
                "cached_input": "cached_input at the band's input price",
                "reasoning": "reasoning at the band's output price",
            }
            rates = ", ".join(
                f"{derived[k]} {v}" if k in derived and getattr(band, k) is None else f"{k} {v}"
                for k, v in view["priced"].items()  # type: ignore[attr-defined]
            )
            text += f"; a prompt over {band.above} tokens prices the whole call at {rates}"
            if view["unpriced"]:
                text += f" and leaves unpriced {', '.join(view['unpriced'])}"  # type: ignore[arg-type]
        gap = self.unpriced_prompts()
        if gap is not None:
            over, upto = gap
            text += f"; a prompt over {over} tokens" + (
                f" (up to {upto})" if upto is not None else ""
            )
            text += " is unpriced (the row has no rates for it)"
        return text

    @staticmethod
    def _parts(usage: Usage) -> tuple[int, ...]:
        """The counts of each kind of token, in ``_CHARGE_ORDER`` (negative when parts exceed
        their totals: ``charge`` refuses those)."""
        prompt_parts = usage.cached_tokens + usage.cache_write_tokens + usage.audio_prompt_tokens
        completion_parts = usage.reasoning_tokens + usage.audio_completion_tokens
        return (
            usage.prompt_tokens - prompt_parts,
            usage.cached_tokens,
            usage.cache_write_tokens,
            usage.audio_prompt_tokens,
            usage.completion_tokens - completion_parts,
            usage.reasoning_tokens,
            usage.audio_completion_tokens,
        )

    def unpriced_because(self, usage: Usage) -> str | None:
        """Why this row cannot price ``usage`` (None when it can)."""
        threshold, index = self._where(usage.prompt_tokens)
        if threshold is not None and index is None:
            return (
                f"a prompt of {usage.prompt_tokens} tokens is past the {threshold} tokens these "
                "prices hold for, and the row has no long-context rates for it"
            )
        if index is not None:
            units = self._band_units[index][1]
            for count, unit, kind in zip(self._parts(usage), units, _CHARGE_ORDER, strict=True):
                if count > 0 and unit is None:
                    return (
                        f"a prompt of {usage.prompt_tokens} tokens is priced by the band over "
                        f"{threshold} tokens, which has no {kind} price, and the call has {count} "
                        f"{kind} tokens (never charged at the row's own {kind} rate)"
                    )
            return None
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

        A prompt past a band's threshold is charged, whole, at that band's rates (``rates_for``).
        The parts of ``usage`` must fit in their totals (``worker.result.Usage``: cache reads, cache
        writes and audio inside ``prompt_tokens``; reasoning and audio inside ``completion_tokens``);
        parts that do not, or a charge past 2^63 - 1, raise ``InputError``: never a guessed charge.
        """
        if self.unpriced_because(usage) is not None:
            return None
        parts = self._parts(usage)
        if min(parts) < 0:
            raise InputError(f"usage parts exceed their totals or are negative: {usage}")
        _, index = self._where(usage.prompt_tokens)
        scale, units = (self._scale, self._units) if index is None else self._band_units[index]
        # a kind the rates leave unpriced (None) has no tokens here: unpriced_because said so
        scaled = sum(count * (unit or 0) for count, unit in zip(parts, units, strict=True))
        charged, rest = divmod(scaled, 10**scale)
        if 2 * rest >= 10**scale:  # half up, once; never negative here
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
