"""Issue 36, price-book dimension 4: long-context bands.

A prompt past a band's threshold prices the whole call at the band's rates; a kind the band does
not price leaves such a call unpriced; a threshold without rates stays a ``prompt_limit``.

Expected charges are worked out by hand (USD per 1M tokens = micro-USD per token; half up, once).
The published prices come from the bundled LiteLLM list, ``worker/data/litellm_prices.json``:
LiteLLM 1.110.2's ``model_prices_and_context_window.json`` (PyPI wheel, retrieved 2026-12-02;
per-token USD, so ``2.5e-06`` is 2.50 per 1M):

* ``gemini/gemini-2.5-pro``: input 1.25e-06, cache read 1.25e-07, output 1e-05; ``_above_200k_tokens``
  input 2.5e-06, cache read 2.5e-07, output 1.5e-05. Priority: 2.25e-06 / 2.25e-07 / 1.8e-05, above
  200k 4.5e-06 / 4.5e-07 / 2.7e-05. Batches: above 200k 1.25e-06 / 2.5e-07 / 7.5e-06. Google's
  Gemini API pricing page (https://ai.google.dev/gemini-api/docs/pricing) gives Gemini 2.5 Pro
  $1.25 input / $10 output "prompts <= 200k tokens" and $2.50 / $15 "prompts > 200k tokens".
* ``gpt-5.4``: input 2.5e-06, cache read 2.5e-07, output 1.5e-05; ``_above_272k_tokens`` 5e-06 /
  5e-07 / 2.25e-05; flex 1.25e-06 / 1.3e-07 / 7.5e-06, above 272k flex 2.5e-06 / 2.5e-07 / 1.125e-05;
  priority 5e-06 / 5e-07 / 3e-05 and no priority band. OpenAI's model page
  (https://developers.openai.com/api/docs/models/gpt-5.4): $2.50 / $0.25 cached / $15, and
  "prompts with >272K input tokens are priced at 2x input and 1.5x output for the full session for
  standard, batch, and flex" (priority is not named: the list has no priority band, the call is
  unpriced).
* ``gpt-5.4-pro``: input 3e-05, output 1.8e-04, no cache-read price; above 272k 6e-05 / 2.7e-04
  (2x and 1.5x, the same page's rule for GPT-5.4 pro).

Claude Sonnet 4.5's long context is not in the list (its entry has no ``_above_`` keys): the TOML
band gives Anthropic's published rates (https://docs.anthropic.com/en/docs/about-claude/pricing,
"Long context pricing": $3 / $15 up to 200K input tokens, $6 / $22.50 above, the prompt-caching
multipliers on top: 5-minute writes 1.25x = 3.75 and 7.50, reads 0.1x = 0.30 and 0.60).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import create_pg_database, drop_pg_database
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.orm import Session

from worker.cli import main
from worker.consumer.pricing import PriceSource, import_prices, stored_prices
from worker.core.errors import PriceBookError
from worker.core.prices import MAX_PRICE, Band, Price, PriceBook, load_price_book, prices_from_toml
from worker.core.prices.litellm import prices_from_litellm
from worker.core.prices.price import bands_from_json, bands_to_json
from worker.core.result import Usage
from worker.ledger.database import downgrade, make_engine, session_factory, upgrade

AT = datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "prices" / "litellm_excerpt.json"


@pytest.fixture(scope="module")
def bundled() -> PriceBook:
    return load_price_book()


def _gemini(prompt: int, tier: str | None = None, book: PriceBook | None = None) -> int | None:
    """A Gemini 2.5 Pro call of ``prompt`` tokens, 50,000 of them cache reads, and 10,000 output
    tokens, 4,000 of them reasoning (thoughts are billed as output: no reasoning price)."""
    usage = Usage(prompt, 10_000, cached_tokens=50_000, reasoning_tokens=4_000)
    return (book or load_price_book()).charge(
        "gemini-2.5-pro", usage, AT, tier=tier, provider="gemini"
    )


# --- the bundled list -----------------------------------------------------------------------


def test_gemini_2_5_pro_prices_the_whole_call_at_the_band_its_prompt_falls_in(
    bundled: PriceBook,
) -> None:
    # 149,999 x 1.25 + 50,000 x 0.125 + 10,000 x 10 = 187,498.75 + 6,250 + 100,000 = 293,748.75
    assert _gemini(199_999, book=bundled) == 293_749
    # 150,000 x 1.25 + 6,250 + 100,000: 200,000 is not over 200k
    assert _gemini(200_000, book=bundled) == 293_750
    # every token at the band: 150,001 x 2.5 + 50,000 x 0.25 + 10,000 x 15
    # = 375,002.5 + 12,500 + 150,000 = 537,502.5, half up
    assert _gemini(200_001, book=bundled) == 537_503
    # priority's own band: 150,001 x 4.5 + 50,000 x 0.45 + 10,000 x 27 = 967,504.5
    assert _gemini(200_001, "priority", bundled) == 967_505
    # batch's: 150,001 x 1.25 + 50,000 x 0.25 + 10,000 x 7.5 = 275,001.25
    assert _gemini(200_001, "batch", bundled) == 275_001


def test_gpt_5_4_over_272k_tokens_and_its_priority_row_without_a_band(bundled: PriceBook) -> None:
    def charge(prompt: int, tier: str | None = None) -> int | None:
        usage = Usage(prompt, 20_000, cached_tokens=100_000, reasoning_tokens=5_000)
        return bundled.charge("gpt-5.4", usage, AT, tier=tier, provider="openai")

    # 172,000 x 2.5 + 100,000 x 0.25 + 20,000 x 15 = 430,000 + 25,000 + 300,000
    assert charge(272_000) == 755_000
    # 200,000 x 5 + 100,000 x 0.5 + 20,000 x 22.5 = 1,000,000 + 50,000 + 450,000 ($1.50)
    assert charge(300_000) == 1_500_000
    # flex: 200,000 x 2.5 + 100,000 x 0.25 + 20,000 x 11.25 = 500,000 + 25,000 + 225,000
    assert charge(300_000, "flex") == 750_000
    # priority: 172,000 x 5 + 100,000 x 0.5 + 20,000 x 30 at 272,000; no priority band above it
    assert charge(272_000, "priority") == 1_510_000
    assert charge(272_001, "priority") is None
    why = bundled.resolve("gpt-5.4", AT, tier="priority").price.unpriced_because(  # type: ignore[union-attr]
        Usage(272_001, 1)
    )
    assert why is not None and "no long-context rates" in why


def test_a_row_without_a_cache_discount_has_none_in_its_band_either(bundled: PriceBook) -> None:
    # gpt-5.4-pro has no cache-read price: cache reads cost input, 30 below and 60 above 272k
    usage = Usage(300_000, 1_000, cached_tokens=100_000)
    # 300,000 x 60 + 1,000 x 270 = 18,000,000 + 270,000
    assert bundled.charge("gpt-5.4-pro", usage, AT) == 18_270_000
    # 272,000 x 30 + 1,000 x 180 = 8,160,000 + 180,000
    assert bundled.charge("gpt-5.4-pro", Usage(272_000, 1_000, cached_tokens=100_000), AT) == (
        8_340_000
    )


# --- a kind the band does not price -----------------------------------------------------------


def _gemini_entry(drop: str = "") -> str:
    """The fixture's ``gemini/gemini-2.5-pro`` entry (byte for byte from LiteLLM 1.110.2), less
    the key ``drop``."""
    entry = json.loads(FIXTURE.read_text())["gemini/gemini-2.5-pro"]
    entry.pop(drop, None)
    return json.dumps({"gemini/gemini-2.5-pro": entry})


def test_a_kind_the_band_does_not_price_leaves_the_call_unpriced() -> None:
    parsed = prices_from_litellm(
        _gemini_entry("cache_read_input_token_cost_above_200k_tokens"), "cut.json", AT
    )
    book = PriceBook(parsed.prices)

    def charge(usage: Usage) -> int | None:
        return book.charge("gemini-2.5-pro", usage, AT, provider="gemini")

    # no cache reads: 250,000 x 2.5 + 1,000 x 15 = 625,000 + 15,000
    assert charge(Usage(250_000, 1_000)) == 640_000
    # one cache read over 200k: unpriced, never charged at the row's own 0.125
    assert charge(Usage(250_000, 1_000, cached_tokens=1)) is None
    # under the threshold the row's own cache-read price applies: 199,999 x 1.25 + 1 x 0.125
    # + 1,000 x 10 = 249,998.75 + 0.125 + 10,000 = 259,998.875
    assert charge(Usage(200_000, 1_000, cached_tokens=1)) == 259_999
    row = book.price_for("gemini-2.5-pro", AT, provider="gemini")
    assert row is not None
    why = row.unpriced_because(Usage(250_000, 1_000, cached_tokens=1))
    assert why is not None and "band over 200000 tokens, which has no cached_input price" in why
    # the batch row kept its own band (its _batches keys): cache reads there are priced
    batch = book.charge(
        "gemini-2.5-pro", Usage(250_000, 0, cached_tokens=1), AT, tier="batch", provider="gemini"
    )
    assert batch == 312_499  # 249,999 x 1.25 + 1 x 0.25 = 312,498.75 + 0.25 = 312,499


def test_reasoning_priced_apart_needs_the_band_s_own_reasoning_price() -> None:
    row = Price(
        "m",
        AT,
        Decimal(1),
        Decimal("0.1"),
        Decimal(4),
        reasoning=Decimal(8),
        cache_write=Decimal("1.25"),
        bands=(
            Band(above=1_000, input=Decimal(2), cached_input=Decimal("0.2"), output=Decimal(6)),
        ),
    )
    # 2,000 x 2 + 10 x 6
    assert row.charge(Usage(2_000, 10)) == 4_060
    # the row has its own reasoning price: its band does not, so reasoning over 1,000 is unpriced
    assert row.charge(Usage(2_000, 10, reasoning_tokens=1)) is None
    assert row.charge(Usage(2_000, 10, cache_write_tokens=1)) is None  # no band cache-write price
    # 1,000 x 1 + 10 x 8 under the threshold
    assert row.charge(Usage(1_000, 10, reasoning_tokens=10)) == 1_080


def test_a_prompt_limit_below_the_band_leaves_the_gap_unpriced() -> None:
    band = Band(above=200_000, input=Decimal(2), output=Decimal(4))
    row = Price("m", AT, Decimal(1), Decimal(1), Decimal(2), prompt_limit=128_000, bands=(band,))
    assert row.charge(Usage(128_000, 0)) == 128_000
    assert row.charge(Usage(150_000, 0)) is None
    assert row.charge(Usage(200_000, 0)) is None
    assert row.charge(Usage(200_001, 1)) == 400_006
    assert row.unpriced_prompts() == (128_000, 200_000)
    assert "a prompt over 128000 tokens (up to 200000) is unpriced" in row.kinds_text()
    with pytest.raises(PriceBookError, match="same number of tokens"):
        Price("m", AT, Decimal(1), Decimal(1), Decimal(2), bands=(band, band))
    with pytest.raises(PriceBookError, match="at least one rate"):
        Band(above=200_000)
    with pytest.raises(PriceBookError, match="above the bound"):
        Band(above=200_000, input=MAX_PRICE + 1)


# --- TOML -----------------------------------------------------------------------------------

SONNET = """
[[price]]
model = "claude-sonnet-4-5"
provider = "anthropic"
effective_from = 2026-12-02T12:05:00Z
input = "3"
cached_input = "0.30"
cache_write = "3.75"
output = "15"

[[price.band]]
above = 200000
input = "6"
cached_input = "0.60"
cache_write = "7.50"
output = "22.50"
"""


def test_a_toml_band_prices_claude_sonnet_long_context() -> None:
    (row,) = prices_from_toml(SONNET, "sonnet.toml")
    assert row.bands == (
        Band(
            above=200_000,
            input=Decimal(6),
            cached_input=Decimal("0.60"),
            cache_write=Decimal("7.50"),
            output=Decimal("22.50"),
        ),
    )
    book = PriceBook([row])

    def charge(prompt: int) -> int | None:
        usage = Usage(prompt, 2_000, cached_tokens=100_000, cache_write_tokens=20_000)
        return book.charge("claude-sonnet-4-5", usage, LATER, provider="anthropic")

    # 80,000 x 3 + 100,000 x 0.30 + 20,000 x 3.75 + 2,000 x 15 = 240,000 + 30,000 + 75,000 + 30,000
    assert charge(200_000) == 375_000
    # all at the band: 130,000 x 6 + 100,000 x 0.60 + 20,000 x 7.50 + 2,000 x 22.50
    # = 780,000 + 60,000 + 150,000 + 45,000
    assert charge(250_000) == 1_035_000


@pytest.mark.parametrize(
    ("band", "message"),
    [
        ('above = 200000\ninputs = "6"', "band #1: unknown key 'inputs'"),
        ('input = "6"', "band #1: above must be an integer"),
        ('above = 0\ninput = "6"', "above must be a positive integer"),
        ("above = 200000", "at least one rate"),
        ('above = 200000\ninput = "six"', "band #1: input is not a decimal"),
    ],
)
def test_a_toml_band_is_checked_like_a_row(band: str, message: str) -> None:
    book = f'[[price]]\nmodel = "m"\ninput = "1"\noutput = "2"\n[[price.band]]\n{band}\n'
    with pytest.raises(PriceBookError, match=message):
        prices_from_toml(book, "b.toml")


# --- the database ---------------------------------------------------------------------------


def test_imported_bands_round_trip_through_the_database(session: Session) -> None:
    rows = [
        *prices_from_litellm(_gemini_entry(), "gemini.json", LATER).prices,
        *prices_from_toml(SONNET, "sonnet.toml"),
    ]
    assert {p.tier: len(p.bands) for p in rows if p.model == "gemini-2.5-pro"} == {
        "default": 1,
        "flex": 1,
        "priority": 1,
        "batch": 1,
    }
    import_prices(session, rows, now=NOW)
    stored = stored_prices(session)
    assert sorted(p.key for p in stored) == sorted(p.key for p in rows)
    by_key = {p.key: p for p in stored}
    for row in rows:  # equal rows, bands and all, and equal values (a repeat import is a no-op)
        assert by_key[row.key] == row and by_key[row.key].values() == row.values()
    assert import_prices(session, rows, now=NOW).present == len(rows)
    # priced from the stored rows alone (the bundled file has the same gemini prices)
    book = PriceBook(stored)
    assert _gemini(200_001, book=book) is None  # the imported rows start at LATER
    usage = Usage(200_001, 10_000, cached_tokens=50_000, reasoning_tokens=4_000)
    assert book.charge("gemini-2.5-pro", usage, LATER, provider="gemini") == 537_503
    source = PriceSource(lambda: nullcontext(session))  # type: ignore[arg-type, return-value]
    sonnet = Usage(250_000, 2_000, cached_tokens=100_000, cache_write_tokens=20_000)
    charged = source.current().charge("claude-sonnet-4-5", sonnet, LATER, provider="anthropic")
    assert charged == 1_035_000
    stored_text = session.execute(
        text("SELECT bands FROM prices WHERE model = 'claude-sonnet-4-5'")
    ).scalar_one()
    assert json.loads(stored_text) == [
        {
            "above": 200000,
            "input": "6",
            "cached_input": "0.60",
            "cache_write": "7.50",
            "output": "22.50",
        }
    ]


def test_stored_band_text_is_read_exactly_or_refused() -> None:
    bands = (Band(above=272_000, input=Decimal("1E-12"), output=Decimal("10000")),)
    assert bands_from_json(bands_to_json(bands)) == bands
    assert bands_to_json(()) == "" and bands_from_json("") == ()
    for bad in ("{", "{}", '[{"above": 1, "input": 2.5}]', '[{"above": 1, "inputs": "1"}]'):
        with pytest.raises(PriceBookError):
            bands_from_json(bad)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path, pg_database_name: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    name = f"{pg_database_name}_prices_0016"
    yield create_pg_database(name)
    drop_pg_database(name)


def test_revision_0016_keeps_rows_without_bands_and_drops_bands_on_downgrade(url: str) -> None:
    upgrade(url, "0015")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO prices (layer, model, tier, effective_from, input, cached_input,"
                    " output, prompt_limit, created_at) VALUES ('list', 'gemini-2.5-pro', 'default',"
                    " '2026-01-01 00:00:00+00:00', '1.25', '0.125', '10', 200000,"
                    " '2026-12-02 00:00:00+00:00')"
                )
            )
        upgrade(url, "head")  # the book's rows are read by the head's model
        with session_factory(engine)() as session:
            (old,) = stored_prices(session)
            assert (old.prompt_limit, old.bands) == (200_000, ())
            assert old.charge(Usage(200_001, 0)) is None  # imported before: still unpriced
            import_prices(session, prices_from_toml(SONNET, "sonnet.toml"), files=[], now=NOW)
            session.commit()
        downgrade(url, "0015")
        with engine.connect() as conn:
            models = conn.execute(text("SELECT model FROM prices ORDER BY model")).scalars().all()
            columns = conn.execute(text("SELECT * FROM prices")).keys()
        assert models == ["claude-sonnet-4-5", "gemini-2.5-pro"] and "bands" not in columns
    finally:
        engine.dispose()


# --- billing prices which --------------------------------------------------------------------


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    return runner


def test_which_shows_the_bands(runner: CliRunner) -> None:
    args = ["prices", "which", "gemini-2.5-pro", "--provider", "gemini"]
    found = json.loads(runner.invoke(main, [*args, "--json"]).output)
    assert found["row"]["bands"] == [
        {"above": 200_000, "input": "2.5", "cached_input": "0.25", "output": "15"}
    ]
    assert found["kinds"]["bands"] == [
        {
            "above": 200_000,
            "priced": {
                "input": "2.5",
                "cached_input": "0.25",
                "output": "15",
                "reasoning": "15",
                "image_input": "2.5",
            },
            "cached_input_at_input_price": False,
            "reasoning_at_output_price": True,
            "unpriced": [
                "cache_write",
                "cache_write_1h",
                "audio_input",
                "audio_output",
                "citation",
                "image_output",
            ],
        }
    ]
    assert found["kinds"]["prompt_limit"] == 200_000 and found["kinds"]["unpriced_prompts"] is None
    shown = runner.invoke(main, args).output
    assert (
        "  prompts over 200000 tokens, the whole call: input 2.5  cached_input 0.25  output 15"
        "  reasoning 15" in shown
    )
    assert "reasoning tokens at the band's output price" in shown
    assert "prompts over 200000 tokens are unpriced" not in shown
    priority = runner.invoke(main, ["prices", "which", "gpt-5.4", "--tier", "priority"]).output
    assert "prompts over 272000 tokens are unpriced (no long-context rates)" in priority
    flex = json.loads(
        runner.invoke(main, ["prices", "which", "gpt-5.4", "--tier", "flex", "--json"]).output
    )
    assert flex["kinds"]["bands"][0]["priced"]["output"] == "11.25"


# --- the property ---------------------------------------------------------------------------

MOST = 10**8 * 128  # the most tokens a call's prompt or completion can count (worker.core.result)
ORDER = (
    "input",
    "cached_input",
    "cache_write",
    "audio_input",
    "output",
    "reasoning",
    "audio_output",
)


@st.composite
def rates(draw: st.DrawFn) -> Decimal:
    places = draw(st.integers(0, 12))
    return Decimal(draw(st.integers(0, int(MAX_PRICE) * 10**places))).scaleb(-places)


def _exact(parts: list[int], prices: list[Decimal]) -> int:
    exact = sum(Fraction(n) * Fraction(str(p)) for n, p in zip(parts, prices, strict=True))
    return int(exact + Fraction(1, 2))  # half up, once: floor(x + 1/2) for x >= 0


def _usage(parts: list[int]) -> Usage:
    text_in, cached, write, audio_in, text_out, reasoning, audio_out = parts
    return Usage(
        prompt_tokens=text_in + cached + write + audio_in,
        completion_tokens=text_out + reasoning + audio_out,
        cached_tokens=cached,
        cache_write_tokens=write,
        audio_prompt_tokens=audio_in,
        reasoning_tokens=reasoning,
        audio_completion_tokens=audio_out,
    )


@settings(max_examples=300, deadline=None)
@given(
    row_rates=st.lists(rates(), min_size=7, max_size=7),
    band_rates=st.lists(rates(), min_size=7, max_size=7),
    parts=st.lists(st.integers(0, MOST // 4), min_size=7, max_size=7),
    above=st.integers(1, MOST),
)
def test_the_charge_is_the_band_s_rates_times_the_counts_rounded_once(
    row_rates: list[Decimal], band_rates: list[Decimal], parts: list[int], above: int
) -> None:
    usage = _usage(parts)
    row_kinds = dict(zip(ORDER, row_rates, strict=True))
    band_kinds = dict(zip(ORDER, band_rates, strict=True))
    # a threshold anywhere: under the prompt (the band prices the call) or at or over it (the row)
    row = Price("m", AT, **row_kinds, bands=(Band(above=above, **band_kinds),))  # type: ignore[arg-type]
    charged = row.charge(usage)
    assert charged == _exact(parts, band_rates if usage.prompt_tokens > above else row_rates)
    assert charged is not None and 0 <= charged < 2**63
    if usage.prompt_tokens > 1:  # and a threshold just under the prompt: the band, always
        band = Band(above=usage.prompt_tokens - 1, **band_kinds)
        just = Price("m", AT, **row_kinds, bands=(band,))  # type: ignore[arg-type]
        assert just.charge(usage) == _exact(parts, band_rates)


@settings(max_examples=300, deadline=None)
@given(
    row_rates=st.lists(rates(), min_size=7, max_size=7),
    band_rates=st.lists(st.none() | rates(), min_size=7, max_size=7),
    parts=st.lists(st.integers(1, MOST // 4), min_size=7, max_size=7),
    use_unpriced=st.booleans(),
    cache_discount=st.booleans(),
)
def test_a_band_prices_a_call_only_with_a_rate_for_every_kind_it_has(
    row_rates: list[Decimal],
    band_rates: list[Decimal | None],
    parts: list[int],
    use_unpriced: bool,
    cache_discount: bool,
) -> None:
    row_kinds = dict(zip(ORDER, row_rates, strict=True))
    if not cache_discount:
        row_kinds["cached_input"] = row_kinds["input"]
    stated = {k: v for k, v in zip(ORDER, band_rates, strict=True) if v is not None}
    band = Band(above=1, **(stated or {"output": row_rates[4]}))
    row = Price("m", AT, **row_kinds, bands=(band,))  # type: ignore[arg-type]
    # the band's rates: its own, cache reads at its input when the row has no cache discount (the
    # row prices reasoning apart here, so reasoning has no default)
    effective: list[Decimal | None] = [getattr(band, kind) for kind in ORDER]
    if effective[1] is None and row_kinds["cached_input"] == row_kinds["input"]:
        effective[1] = band.input
    if not use_unpriced:  # the call has no token of a kind the band leaves unpriced
        parts = [0 if rate is None else n for n, rate in zip(parts, effective, strict=True)]
    usage = _usage(parts)
    assume(usage.prompt_tokens > band.above)
    charged = row.charge(usage)
    if any(n > 0 and rate is None for n, rate in zip(parts, effective, strict=True)):
        assert charged is None
    else:
        assert charged == _exact(parts, [rate or Decimal(0) for rate in effective])
