"""One row of the price book, and the one charge function.

Prices are USD per 1M tokens, which is micro-USD per token: a charge is a sum of integer token counts
times decimal prices, computed exactly (as integers over a power of ten) and rounded half-up once into integer
micro-USD. The charge takes
usage and nothing about streaming, so a streamed and a non-streamed call with the same usage cost the
same by construction.

A row prices every kind of token ``worker.core.result.Usage`` counts. ``input`` and ``output`` are required;
``cached_input`` is ``input`` when the row gives no cache discount and ``reasoning`` is ``output`` when
reasoning is not priced apart. ``cache_write``, ``audio_input`` and ``audio_output`` have no default: a
call that has such tokens while its row does not price them is unpriced, never charged as text.

A row may carry long-context *bands* (``Band``): from a prompt of more than ``above`` tokens on, the
whole call is priced at the band's rates (``Price.rates_for`` says which rates price a call).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from worker.core.errors import InputError, PriceBookError
from worker.core.money import Micros
from worker.core.prices.off_peak import OffPeak, off_peak_from_json
from worker.core.result import Usage

MAX_PRICE = Decimal(10_000)
"""The highest price a row may hold, in USD per 1M tokens of any kind (the dearest list price is about
a twentieth of it). With counts bounded at 10^8 tokens per choice, no charge can reach 2^63."""

MAX_FEE = Decimal(1_000)
"""The highest per-request fee a row may hold, in USD (the dearest search fee is about 1/30,000 of
it): with at most 10^8 requests per call, no fee reaches 2^63 micro-USD."""
SEARCH_SIZES = ("any", "high", "low", "medium")
"""Web search context sizes a fee may be stated for (``any``: one price for every size)."""
DIMENSION_KEYS = (
    "cache_write_1h",
    "citation",
    "image_input",
    "image_output",
    "inference_geo",
    "off_peak",
    "per_image",
    "unapplied",
    "web_search",
)
_IMAGE_KEY = re.compile(r"[1-9][0-9]{1,4}x[1-9][0-9]{1,4}/[a-z0-9_-]{1,16}")
"""A ``per_image`` key: the image's size and its quality, ``1024x1792/hd``."""
MAX_MULTIPLIER = Decimal(10)
"""The highest inference-geography multiplier a row may hold (the dearest published one is 1.1)."""
DEFAULT_GEO = "global"
"""The geography a call ran in when its usage names none: priced at 1x unless the row says."""
_GEO = re.compile(r"[a-z0-9_-]{1,16}")
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
    "cache_write_1h",
    "output",
    "reasoning",
    "audio_input",
    "audio_output",
    "image_input",
    "citation",
    "image_output",
)
OPTIONAL_KINDS = (
    "cache_write", "cache_write_1h", "audio_input", "audio_output", "citation", "image_output",
)  # fmt: skip
"""The kinds with no default price: a row that does not state one leaves them unpriced."""
_CHARGE_ORDER = (
    "input",
    "cached_input",
    "cache_write",
    "cache_write_1h",
    "audio_input",
    "image_input",
    "citation",
    "output",
    "reasoning",
    "audio_output",
    "image_output",
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
    that follow the row's own defaults: cache reads (and image input) are charged at the band's
    ``input`` when the row charges them at its own input rate (``cached_input == input``: no cache
    discount; ``image_input`` None), and reasoning at the band's ``output`` when the row prices
    reasoning at its output rate (``reasoning`` None).
    """

    above: int
    input: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    cache_write_1h: Decimal | None = None
    output: Decimal | None = None
    reasoning: Decimal | None = None
    audio_input: Decimal | None = None
    audio_output: Decimal | None = None
    image_input: Decimal | None = None
    citation: Decimal | None = None
    image_output: Decimal | None = None

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

    The dimensions beyond token kinds:

    * ``cache_write_1h``: 1-hour cache writes (a part of the cache writes; Anthropic bills them
      above 5-minute ones); no default: a call with them is unpriced without it;
    * ``image_input``: image tokens of the prompt; None: at the ``input`` price;
    * ``citation``: USD per 1M citation tokens (Perplexity: search results read, a part of the
      prompt); no default: a call with them is unpriced without it;
    * ``image_output``: USD per 1M image output tokens (GPT Image models: the generated image, a
      part of the completion, priced apart from text output); no default: a call with them is
      unpriced without it;
    * ``per_image``: USD per generated image by ``SIZE/QUALITY`` (``1024x1024/standard``: DALL·E
      bills per image, no tokens); a call with images billed per image is unpriced without it,
      or when its size or quality is not known and the prices it could be differ
      (``image_fee``);
    * ``inference_geo``: multipliers of every token rate by the geography the usage says
      inference ran in (Anthropic's ``inference_geo``: ``us`` 1.1); a call in no geography, or in
      ``global`` when the row states none for it, is priced at 1x; in any other geography the row
      does not state, it is unpriced (never at 1x). Fees are not multiplied;
    * ``web_search``: USD per web search request, by search context size (``low``, ``medium``,
      ``high``; one size ``any`` when the price does not depend on it); a call with searches is
      unpriced without it, or when its size is not known and the sizes' prices differ;
    * ``off_peak``: the rates that replace the row's when the call was created in its hours
      (``worker.core.prices.off_peak``);
    * ``unapplied``: the keys of the row's source the book does not apply (kept, and shown by
      ``billing prices which``; a call whose usage uses one is unpriced by the usage reader, whose
      field for it is unknown).
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
    cache_write_1h: Decimal | None = None
    image_input: Decimal | None = None
    citation: Decimal | None = None
    inference_geo: tuple[tuple[str, Decimal], ...] = ()
    web_search: tuple[tuple[str, Decimal], ...] = ()
    image_output: Decimal | None = None
    per_image: tuple[tuple[str, Decimal], ...] = ()
    off_peak: OffPeak | None = None
    unapplied: tuple[str, ...] = ()
    source: str = field(default="", compare=False)
    reason: str | None = field(default=None, compare=False)
    # The prices as integers over 10**_scale, in the order of ``charge``'s counts: exact integer
    # arithmetic, one rounding.
    _scale: int = field(default=0, init=False, repr=False, compare=False)
    _units: tuple[int | None, ...] = field(default=(), init=False, repr=False, compare=False)
    # Each band's rates as (scale, units), the units in the same order, None for a kind the band
    # leaves unpriced (after the two defaults ``Band`` describes).
    _band_units: tuple[tuple[int, tuple[int | None, ...]], ...] = field(
        default=(), init=False, repr=False, compare=False
    )
    _off_peak_units: tuple[int, tuple[int | None, ...]] | None = field(
        default=None, init=False, repr=False, compare=False
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
        self._check_dimensions(where)
        scale, units = _rate_units(self._rates())
        object.__setattr__(self, "_scale", scale)
        object.__setattr__(self, "_units", units)
        object.__setattr__(
            self, "_band_units", tuple(_rate_units(self._band_rates(band)) for band in bands)
        )
        if self.off_peak is not None:
            object.__setattr__(self, "_off_peak_units", _rate_units(self._off_peak_rates()))

    def _check_dimensions(self, where: str) -> None:
        sizes = dict(self.web_search)
        if len(sizes) != len(self.web_search) or not set(sizes) <= set(SEARCH_SIZES):
            raise PriceBookError(
                f"{where}: web_search is one price per search context size "
                f"({', '.join(SEARCH_SIZES)})"
            )
        if "any" in sizes and len(sizes) > 1:
            raise PriceBookError(f"{where}: web_search 'any' is the only size when given")
        for size, value in self.web_search:
            check_fee(value, f"{where}: web_search {size}")
        object.__setattr__(self, "web_search", tuple(sorted(self.web_search)))
        images = dict(self.per_image)
        if len(images) != len(self.per_image) or not all(
            isinstance(key, str) and _IMAGE_KEY.fullmatch(key) for key in images
        ):
            raise PriceBookError(
                f"{where}: per_image is one price per SIZE/QUALITY (1024x1024/standard)"
            )
        for key, value in self.per_image:
            check_fee(value, f"{where}: per_image {key}")
        object.__setattr__(self, "per_image", tuple(sorted(self.per_image)))
        geos = dict(self.inference_geo)
        if len(geos) != len(self.inference_geo) or not all(
            isinstance(name, str) and _GEO.fullmatch(name) for name in geos
        ):
            raise PriceBookError(
                f"{where}: inference_geo is one multiplier per lower-case geography name"
            )
        for name, value in self.inference_geo:
            if not isinstance(value, Decimal) or not value.is_finite() or value <= 0:
                raise PriceBookError(f"{where}: inference_geo {name} must be a positive decimal")
            if value > MAX_MULTIPLIER or len(format(value, "f")) > 20:
                raise PriceBookError(
                    f"{where}: inference_geo {name} is {value}, past the bound of {MAX_MULTIPLIER}"
                )
        object.__setattr__(self, "inference_geo", tuple(sorted(self.inference_geo)))
        if self.off_peak is not None:
            if not isinstance(self.off_peak, OffPeak):
                raise PriceBookError(f"{where}: off_peak must be an OffPeak")
            for kind, value in self.off_peak.stated().items():
                check_price(Decimal(value), f"{where}: off_peak {kind}")
        if not isinstance(self.unapplied, tuple) or not all(
            isinstance(key, str) and 0 < len(key) <= 200 for key in self.unapplied
        ):
            raise PriceBookError(f"{where}: unapplied must be source keys")
        object.__setattr__(self, "unapplied", tuple(sorted(set(self.unapplied))))

    def _rates(self) -> tuple[Decimal | None, ...]:
        """The row's own rates in ``charge``'s order, the defaults applied; None: unpriced."""
        return (
            self.input,
            self.cached_input,
            self.cache_write,
            self.cache_write_1h,
            self.audio_input,
            self.input if self.image_input is None else self.image_input,
            self.citation,
            self.output,
            self.output if self.reasoning is None else self.reasoning,
            self.audio_output,
            self.image_output,
        )

    def _band_rates(self, band: Band) -> tuple[Decimal | None, ...]:
        """A band's rates in ``charge``'s order: the band's own, and None where it states none,
        except the defaults that follow the row's (``Band``)."""
        cached = band.cached_input
        if cached is None and self.cached_input == self.input:
            cached = band.input  # the row gives no cache discount: neither does its band
        image = band.image_input
        if image is None and self.image_input is None:
            image = band.input  # the row prices images as input: so does its band
        reasoning = band.reasoning
        if reasoning is None and self.reasoning is None:
            reasoning = band.output  # the row prices reasoning as output: so does its band
        return (
            band.input,
            cached,
            band.cache_write,
            band.cache_write_1h,
            band.audio_input,
            image,
            band.citation,
            band.output,
            reasoning,
            band.audio_output,
            band.image_output,
        )

    def _off_peak_rates(self) -> tuple[Decimal | None, ...]:
        """The rates off-peak: each kind the block states replaces the row's; a kind it leaves
        out keeps the row's rate, except those that follow another kind by the row's defaults
        (cache reads at input when the row has no cache discount, images at input, reasoning at
        output when the row has no reasoning price): they follow the off-peak rate."""
        block = self.off_peak
        assert block is not None  # only called when the row has one
        inp = self.input if block.input is None else block.input
        out = self.output if block.output is None else block.output
        cached = block.cached_input
        if cached is None:
            cached = inp if self.cached_input == self.input else self.cached_input
        reasoning = block.reasoning
        if reasoning is None:
            reasoning = out if self.reasoning is None else self.reasoning
        return (
            inp,
            cached,
            self.cache_write if block.cache_write is None else block.cache_write,
            self.cache_write_1h,
            self.audio_input,
            inp if self.image_input is None else self.image_input,
            self.citation,
            out,
            reasoning,
            self.audio_output,
            self.image_output,
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
            self.web_search,
            self.off_peak,
            self.unapplied,
            self.inference_geo,
            self.per_image,
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

    def off_peak_at(self, at: datetime | None) -> bool:
        """Whether a call created at ``at`` is priced at the off-peak rates (None: never; a hold
        is priced at the peak rates, the most a call can cost)."""
        return self.off_peak is not None and at is not None and self.off_peak.holds_at(at)

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
        if self.image_input is None:
            priced.append(f"image_input at the input price {self.input}")
        text = "prices " + ", ".join(priced)
        if self.unpriced_kinds:
            text += (
                f"; leaves unpriced {', '.join(self.unpriced_kinds)} (a call with such tokens is "
                "unsettled unpriced_component)"
            )
        for band in self.bands:
            view = self.band_view(band)
            derived = {
                "cached_input": "cached_input at the band's input price",
                "reasoning": "reasoning at the band's output price",
                "image_input": "image_input at the band's input price",
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

    def dimensions_path(self, at: datetime) -> tuple[tuple[str, str], ...]:
        """The dimensions beyond the token kinds, as ``billing prices which`` shows them for a call
        created at ``at``: ``time_of_day`` (with off-peak hours: which rates hold at ``at``),
        ``fees`` (web search), ``unapplied`` (source keys the book does not apply)."""
        path = []
        if self.off_peak is not None:
            rates = ", ".join(f"{k} {v}" for k, v in self.off_peak.stated().items())
            now = "off-peak" if self.off_peak_at(at) else "peak"
            path.append(
                (
                    "time_of_day",
                    f"{now} at {at.isoformat()}: off-peak ({self.off_peak.text()}) prices the "
                    f"whole call at {rates}, the other kinds at the row's rates",
                )
            )
        if self.inference_geo:
            geos = ", ".join(f"{name} x{value}" for name, value in self.inference_geo)
            path.append(
                (
                    "inference_geo",
                    f"token rates times {geos} by the geography the usage names ({DEFAULT_GEO} or "
                    "none: x1; any other: unsettled unpriced_component)",
                )
            )
        if self.web_search:
            fees = ", ".join(f"{size} {value}" for size, value in self.web_search)
            path.append(("fees", f"web search, USD per request by context size: {fees}"))
        else:
            path.append(
                (
                    "fees",
                    "no web search price (a call with searches is unsettled unpriced_component)",
                )
            )
        if self.per_image:
            fees = ", ".join(f"{key} {value}" for key, value in self.per_image)
            path.append(("per_image", f"USD per generated image by size/quality: {fees}"))
        if self.unapplied:
            path.append(
                (
                    "unapplied",
                    f"source keys the book does not apply: {', '.join(self.unapplied)} (a call "
                    "whose usage reports such a dimension is unsettled unpriced_component)",
                )
            )
        return tuple(path)

    @staticmethod
    def _parts(usage: Usage) -> tuple[int, ...]:
        """The counts of each kind of token, in ``_CHARGE_ORDER`` (negative when parts exceed
        their totals: ``charge`` refuses those)."""
        prompt_parts = (
            usage.cached_tokens
            + usage.cache_write_tokens
            + usage.audio_prompt_tokens
            + usage.image_prompt_tokens
            + usage.citation_tokens
        )
        completion_parts = (
            usage.reasoning_tokens + usage.audio_completion_tokens + usage.image_completion_tokens
        )
        return (
            usage.prompt_tokens - prompt_parts,
            usage.cached_tokens,
            usage.cache_write_tokens - usage.cache_write_1h_tokens,
            usage.cache_write_1h_tokens,
            usage.audio_prompt_tokens,
            usage.image_prompt_tokens,
            usage.citation_tokens,
            usage.completion_tokens - completion_parts,
            usage.reasoning_tokens,
            usage.audio_completion_tokens,
            usage.image_completion_tokens,
        )

    def search_fee(self, usage: Usage) -> tuple[Decimal | None, str | None]:
        """(USD per search request for ``usage``, why none) for a call with searches."""
        sizes = dict(self.web_search)
        if not sizes:
            return None, (
                f"the call has {usage.web_search_requests} web search requests and the row has "
                "no web search price"
            )
        if len(set(sizes.values())) == 1 and (
            "any" in sizes or usage.search_context_size in (None, *sizes)
        ):
            return next(iter(sizes.values())), None
        size = usage.search_context_size
        if size is None:
            return None, (
                f"the call has {usage.web_search_requests} web search requests, does not say "
                "its search context size, and the row's prices differ by size"
            )
        if size not in sizes:
            return None, (
                f"the call's search context size {size!r} has no web search price in the row"
            )
        return sizes[size], None

    def image_fee(self, usage: Usage) -> tuple[Decimal | None, str | None]:
        """(USD per image for ``usage``'s images, why none): the ``per_image`` price of the
        image's size and quality; a size or quality the call does not state matches every price
        the row has for it, and prices the call only when those prices are one."""
        if not self.per_image:
            return None, (
                f"the call has {usage.images} images billed per image and the row has no "
                "per-image price"
            )
        found = {
            value
            for key, value in self.per_image
            if _image_matches(key, usage.image_size, usage.image_quality)
        }
        what = f"size {usage.image_size or 'not stated'}, quality {usage.image_quality or 'not stated'}"
        if not found:
            return None, f"the row has no per-image price for an image of {what}"
        if len(found) > 1:
            return None, (
                f"an image of {what}: the row's per-image prices for it differ, so the call "
                "cannot be priced without them"
            )
        return next(iter(found)), None

    def dearest_image(self, size: str | None, quality: str | None) -> tuple[str, str] | None:
        """The (size, quality) of the dearest per-image price an image of ``size`` and
        ``quality`` (None: any) can have, for a hold; None when the row prices none of them."""
        found = [
            (value, key) for key, value in self.per_image if _image_matches(key, size, quality)
        ]
        if not found:
            return None
        key = max(found)[1]
        dimensions, quality_of = key.split("/")
        return dimensions, quality_of

    def geo_multiplier(self, usage: Usage) -> tuple[Decimal | None, str | None]:
        """(the multiplier of every token rate for where ``usage`` says inference ran, why none)."""
        geo = usage.inference_geo
        geos = dict(self.inference_geo)
        if geo is None or (geo == DEFAULT_GEO and geo not in geos):
            return Decimal(1), None
        if geo in geos:
            return geos[geo], None
        return None, (
            f"the call ran in inference geography {geo!r} and the row has no multiplier for it"
            + (f" (it has {', '.join(geos)})" if geos else "")
        )

    def _chosen(self, usage: Usage, at: datetime | None) -> tuple[str | None, int | None]:
        """(why the call is unpriced, None: it is priced; the band index that prices it)."""
        threshold, index = self._where(usage.prompt_tokens)
        if threshold is not None and index is None:
            return (
                f"a prompt of {usage.prompt_tokens} tokens is past the {threshold} tokens these "
                "prices hold for, and the row has no long-context rates for it"
            ), None
        if usage.web_search_requests:
            _, why = self.search_fee(usage)
            if why is not None:
                return why, index
        if usage.images:
            _, why = self.image_fee(usage)
            if why is not None:
                return why, index
        why = self.geo_multiplier(usage)[1]
        if why is not None:
            return why, index
        if index is not None:
            if self.off_peak_at(at):
                return (
                    f"a prompt of {usage.prompt_tokens} tokens falls in the band over {threshold} "
                    "tokens and the call is off-peak; the source does not say which rates "
                    "price a long prompt off-peak"
                ), index
            units = self._band_units[index][1]
            for count, unit, kind in zip(self._parts(usage), units, _CHARGE_ORDER, strict=True):
                if count > 0 and unit is None:
                    return (
                        f"a prompt of {usage.prompt_tokens} tokens is priced by the band over "
                        f"{threshold} tokens, which has no {kind} price, and the call has {count} "
                        f"{kind} tokens (never charged at the row's own {kind} rate)"
                    ), index
            return None, index
        for count, price, kind in (
            (
                usage.cache_write_tokens - usage.cache_write_1h_tokens,
                self.cache_write,
                "cache-write",
            ),
            (usage.cache_write_1h_tokens, self.cache_write_1h, "1-hour cache-write"),
            (usage.citation_tokens, self.citation, "citation"),
            (usage.audio_prompt_tokens, self.audio_input, "audio input"),
            (usage.audio_completion_tokens, self.audio_output, "audio output"),
            (usage.image_completion_tokens, self.image_output, "image output"),
        ):
            if count and price is None:
                return f"the call has {count} {kind} tokens and the row has no {kind} price", None
        return None, None

    def unpriced_components(
        self, usage: Usage, at: datetime | None = None
    ) -> tuple[tuple[tuple[str, str], ...], Usage]:
        """The components of ``usage`` the row has no price for, as (usage field, count) pairs in
        the usage reader's naming (``worker.core.usage.describe_unpriced``), and ``usage`` without them
        (what the row can price: a lower bound of the call's cost). ((), usage) when the row prices
        the call, or cannot for another reason than a component (a prompt past its limit)."""
        missing: list[tuple[str, str]] = []
        rest = usage
        if self._chosen(usage, at)[0] is None:
            return (), usage
        if usage.web_search_requests and self.search_fee(usage)[1] is not None:
            missing.append(("web_search_requests", str(usage.web_search_requests)))
            rest = replace(rest, web_search_requests=0)
        if usage.images and self.image_fee(usage)[1] is not None:
            missing.append(("images", str(usage.images)))
            rest = replace(rest, images=0)
        if self.geo_multiplier(usage)[1] is not None:
            # the tokens priced at 1x: a lower bound (every published multiplier is above 1)
            missing.append(("inference_geo", str(usage.inference_geo)))
            rest = replace(rest, inference_geo=None)
        threshold, index = self._where(usage.prompt_tokens)
        if threshold is not None and index is None:
            return (), usage
        if index is not None:
            units = self._band_units[index][1]
        elif self._off_peak_units is not None and self.off_peak_at(at):
            units = self._off_peak_units[1]
        else:
            units = self._units
        counts = dict(zip(_CHARGE_ORDER, self._parts(usage), strict=True))
        for kind, unit in zip(_CHARGE_ORDER, units, strict=True):
            count = counts[kind]
            if unit is not None or count <= 0:
                continue
            missing.append((_COMPONENT_FIELDS[kind], str(count)))
            rest = _without(rest, kind, count)
        if not missing or self._chosen(rest, at)[0] is not None:
            return (), usage
        return tuple(missing), rest

    def unpriced_because(self, usage: Usage, at: datetime | None = None) -> str | None:
        """Why this row cannot price ``usage`` of a call created at ``at`` (None when it can)."""
        return self._chosen(usage, at)[0]

    def unit_prices(self, usage: Usage, at: datetime | None = None) -> dict[str, object]:
        """The rates ``charge`` prices ``usage`` at (USD per 1M tokens by kind, the web search fee
        per request), and which rates they are: ``rates`` is ``row``, ``band over N`` or
        ``off-peak``. Raises ``InputError`` when the row does not price the call."""
        why, index = self._chosen(usage, at)
        if why is not None:
            raise InputError(why)
        if index is not None:
            rates, which = (
                self._band_rates(self.bands[index]),
                f"band over {self.bands[index].above}",
            )
        elif self.off_peak_at(at):
            rates, which = self._off_peak_rates(), "off-peak"
        else:
            rates, which = self._rates(), "row"
        multiplier = self.geo_multiplier(usage)[0]
        if multiplier is not None and multiplier != 1:
            rates = tuple(None if rate is None else plain(rate * multiplier) for rate in rates)
            which = f"{which} x{multiplier} ({usage.inference_geo})"
        view: dict[str, object] = {
            "rates": which,
            **{
                kind: str(rate)
                for kind, rate, count in zip(_CHARGE_ORDER, rates, self._parts(usage), strict=True)
                if rate is not None and (count or kind in ("input", "output"))
            },
        }
        if usage.web_search_requests:
            view["web_search"] = str(self.search_fee(usage)[0])
        if usage.images:
            view["per_image"] = str(self.image_fee(usage)[0])
        return view

    def charge(self, usage: Usage, at: datetime | None = None) -> Micros | None:
        """Integer micro-USD for ``usage`` of a call created at ``at``; None when the row does not
        price a kind it has.

        A prompt past a band's threshold is charged, whole, at that band's rates (``rates_for``);
        a call created in the row's off-peak hours at its off-peak rates (``at`` None: the peak
        rates, for a hold). Web search requests add their fee each. The parts of ``usage`` must
        fit in their totals (``worker.core.result.Usage``: cache reads, cache writes, audio and images
        inside ``prompt_tokens``, 1-hour writes inside the cache writes; reasoning and audio inside
        ``completion_tokens``); parts that do not, or a charge past 2^63 - 1, raise
        ``InputError``: never a guessed charge.
        """
        why, index = self._chosen(usage, at)
        if why is not None:
            return None
        parts = self._parts(usage)
        if min(parts) < 0 or usage.web_search_requests < 0 or usage.images < 0:
            raise InputError(f"usage parts exceed their totals or are negative: {usage}")
        if index is not None:
            scale, units = self._band_units[index]
        elif self._off_peak_units is not None and self.off_peak_at(at):
            scale, units = self._off_peak_units
        else:
            scale, units = self._scale, self._units
        # a kind the rates leave unpriced (None) has no tokens here: _chosen said so
        scaled = sum(count * (unit or 0) for count, unit in zip(parts, units, strict=True))
        multiplier = self.geo_multiplier(usage)[0]
        assert multiplier is not None  # _chosen said so
        if multiplier != 1:  # every token rate times the multiplier, exactly
            digits = max(0, -int(multiplier.as_tuple().exponent))
            scaled *= int(multiplier.scaleb(digits))
            scale += digits
        for count, fee in (
            (usage.web_search_requests, self.search_fee(usage)[0]),
            (usage.images, self.image_fee(usage)[0]),
        ):
            if not count:
                continue
            assert fee is not None  # _chosen said so
            micros = fee.scaleb(6)  # USD per request (or image) -> micro-USD
            exponent = -int(micros.as_tuple().exponent)
            if exponent > scale:
                scaled *= 10 ** (exponent - scale)
                scale = exponent
            scaled += count * int(micros.scaleb(scale))
        charged, rest = divmod(scaled, 10**scale)
        if 2 * rest >= 10**scale:  # half up, once; never negative here
            charged += 1
        if charged > MAX_CHARGE:
            raise InputError(f"a charge of {charged} micro-USD is past 2^63 - 1: {usage}")
        return Micros(charged)


_COMPONENT_FIELDS = {
    "input": "prompt_tokens",
    "cached_input": "cached_tokens",
    "cache_write": "cache_write_tokens",
    "cache_write_1h": "cache_write_1h_tokens",
    "audio_input": "audio_prompt_tokens",
    "image_input": "image_prompt_tokens",
    "citation": "citation_tokens",
    "output": "completion_tokens",
    "reasoning": "reasoning_tokens",
    "audio_output": "audio_completion_tokens",
    "image_output": "image_completion_tokens",
}
"""The ``Usage`` field that counts each kind (the name a missing price is reported under)."""


def _image_matches(key: str, size: str | None, quality: str | None) -> bool:
    """Whether a ``per_image`` key prices an image of ``size`` and ``quality`` (None: any)."""
    key_size, key_quality = key.split("/")
    return size in (None, key_size) and quality in (None, key_quality)


def _without(usage: Usage, kind: str, count: int) -> Usage:
    """``usage`` without ``count`` tokens of ``kind`` (the part and its total both lose them)."""
    prompt, completion = usage.prompt_tokens, usage.completion_tokens
    if kind in (
        "input",
        "cached_input",
        "cache_write",
        "cache_write_1h",
        "audio_input",
        "image_input",
        "citation",
    ):
        prompt -= count
    else:
        completion -= count
    changes: dict[str, int] = {"prompt_tokens": prompt, "completion_tokens": completion}
    field_name = _COMPONENT_FIELDS[kind]
    if field_name not in changes:
        changes[field_name] = getattr(usage, field_name) - count
    if kind == "cache_write_1h":
        changes["cache_write_tokens"] = usage.cache_write_tokens - count
    return replace(usage, **changes)


def check_fee(value: object, where: str) -> Decimal:
    """A per-request fee as the book keeps it: a finite Decimal in USD in [0, MAX_FEE]."""
    if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
        raise PriceBookError(f"{where} must be a non-negative decimal (USD per request)")
    if value > MAX_FEE:
        raise PriceBookError(f"{where} is {value} USD per request, above the bound of {MAX_FEE}")
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -20:
        raise PriceBookError(f"{where} has more digits than the book keeps: {value}")
    return value


def dimensions_to_json(price: Price) -> str:
    """The text the ``prices`` table keeps for a row's dimensions beyond the seven token columns
    ('' for none): ``cache_write_1h``, ``image_input``, ``citation``, ``image_output`` (decimal
    text), ``inference_geo`` (geography → decimal text), ``web_search`` (size → decimal text),
    ``per_image`` (SIZE/QUALITY → decimal text), ``off_peak`` (``OffPeak.to_json``), ``unapplied`` (source keys)."""
    data: dict[str, object] = {}
    for kind in ("cache_write_1h", "image_input", "citation", "image_output"):
        if getattr(price, kind) is not None:
            data[kind] = str(getattr(price, kind))
    if price.inference_geo:
        data["inference_geo"] = {name: str(value) for name, value in price.inference_geo}
    if price.web_search:
        data["web_search"] = {size: str(value) for size, value in price.web_search}
    if price.per_image:
        data["per_image"] = {key: str(value) for key, value in price.per_image}
    if price.off_peak is not None:
        data["off_peak"] = price.off_peak.to_json()
    if price.unapplied:
        data["unapplied"] = list(price.unapplied)
    return json.dumps(data, separators=(",", ":"), sort_keys=True) if data else ""


def dimensions_from_json(text: str | None, where: str) -> dict[str, Any]:
    """The ``Price`` keyword arguments ``dimensions_to_json`` wrote; ``PriceBookError`` on anything
    else."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        raise PriceBookError(f"{where}: not JSON") from None
    if not isinstance(data, dict) or set(data) - {*DIMENSION_KEYS}:
        raise PriceBookError(f"{where}: expected an object of {', '.join(DIMENSION_KEYS)}")
    found: dict[str, Any] = {}
    try:
        for kind in ("cache_write_1h", "image_input", "citation", "image_output"):
            if kind in data:
                found[kind] = Decimal(str(data[kind]))
        if "inference_geo" in data:
            found["inference_geo"] = tuple(
                (str(name), Decimal(str(value)))
                for name, value in dict(data["inference_geo"]).items()
            )
        if "web_search" in data:
            found["web_search"] = tuple(
                (str(size), Decimal(str(value))) for size, value in dict(data["web_search"]).items()
            )
        if "per_image" in data:
            found["per_image"] = tuple(
                (str(key), Decimal(str(value))) for key, value in dict(data["per_image"]).items()
            )
    except (ArithmeticError, TypeError, ValueError):
        raise PriceBookError(f"{where}: a rate is not decimal text") from None
    if "off_peak" in data:
        found["off_peak"] = off_peak_from_json(data["off_peak"], where)
    if "unapplied" in data:
        if not isinstance(data["unapplied"], list):
            raise PriceBookError(f"{where}: unapplied must be a list of keys")
        found["unapplied"] = tuple(str(key) for key in data["unapplied"])
    return found


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
