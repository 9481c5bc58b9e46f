"""``estimate.count_text``: a long text is counted a bounded piece at a time; the count is exact
when the pieces end before spaces between words, and within a few tokens per other cut.

The oracle is tiktoken's own count of the whole text, ``len(encoding.encode_ordinary(text))``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.core.estimate import COUNT_PIECE_CHARS, count_text, text_pieces
from worker.core.vocab import load_encoding

ENCODINGS = ("cl100k_base", "o200k_base")
# Spaces, runs of them, newlines, tabs, letters of both cases and scripts, digits, punctuation,
# apostrophes (contractions), combining marks, and whitespace Python and the regexes may see apart.
ALPHABET = list(" \n\t\r  'sStTdD09aZzé日本ß.,!?-_/\u0301\u00a0\u2028\u3000\u001c\u0085")
# The most tokens one cut inside a pre-tokenizer piece may add or take away. Measured: every cut of
# every run of one character (the printable ASCII and a few others, up to 2,500 long) moved the
# count by -2 to +5 tokens in both encodings; mixed runs by at most 4.
CUT_TOLERANCE = 6


@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.text(alphabet=ALPHABET, max_size=36), max_size=12),
    piece=st.integers(40, 80),
)
def test_counting_in_pieces_is_exact(name: str, chunks: list[str], piece: int) -> None:
    # "a b" holds a space between two non-spaces, whatever surrounds it, and the chunks between
    # them are short enough that every piece can end before one: the count must be exact.
    text = "a b".join(chunks)
    encoding = load_encoding(name)
    assert count_text(encoding, text, piece) == len(encoding.encode_ordinary(text))


@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=400), piece=st.integers(2, 40))
def test_a_cut_said_to_be_exact_is(name: str, text: str, piece: int) -> None:
    encoding = load_encoding(name)
    whole = len(encoding.encode_ordinary(text))
    for _start, end, exact in text_pieces(text, piece):
        if exact and end < len(text):
            left = len(encoding.encode_ordinary(text[:end]))
            assert left + len(encoding.encode_ordinary(text[end:])) == whole


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_long_completion_is_counted_in_pieces(name: str) -> None:
    words = "The quick brown fox, 1234 jumps;  over\nthe LAZY dog's back. "
    text = words * 5_000
    encoding = load_encoding(name)
    assert count_text(encoding, text, 1_000) == len(encoding.encode_ordinary(text))


# ------------------------------------------------------------------ text without spaces

# Runs of what the pre-tokenizer makes one long piece of (letters, CJK, emoji, punctuation,
# whitespace), of what it cuts small (digits, base64), and of what it treats specially (CRLF,
# contractions, combining marks, slashes after a newline).
RUN_UNITS = ["a", "Z", "7", "日", "😀", "!", "%", "/", " ", "\n", "\t", "\r\n", "'s", "é", "\u0301",
             "ab1+/=", "\u00a0", "\u3000", "=-", "\n/", "x ", "  y"]  # fmt: skip
_runs = st.lists(
    st.tuples(st.sampled_from(RUN_UNITS), st.integers(1, 300)), min_size=1, max_size=6
).map(lambda runs: "".join(unit * times for unit, times in runs))


@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_runs, piece=st.integers(2, 64))
def test_cuts_without_spaces_stay_within_tolerance(name: str, text: str, piece: int) -> None:
    encoding = load_encoding(name)
    exact = len(encoding.encode_ordinary(text))
    assert abs(count_text(encoding, text, piece) - exact) <= CUT_TOLERANCE * math.ceil(
        len(text) / piece
    )


@pytest.mark.parametrize(
    "text",
    [
        "abcdefghij" * 20_000,  # one run of letters
        "0123456789" * 20_000,
        "日本語の文章" * 30_000,
        "😀🎉🚀" * 50_000,
        "!?.,;:" * 30_000,
        "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkrLw==" * 4_000,  # base64
        "/" * 200_000,
    ],
    ids=["letters", "digits", "cjk", "emoji", "punctuation", "base64", "slashes"],
)
def test_text_without_spaces_at_full_size_is_within_tolerance(text: str) -> None:
    # Production pieces: at most a few tokens per 4,096 characters, against tiktoken's exact count.
    encoding = load_encoding("o200k_base")
    exact = len(encoding.encode_ordinary(text))
    got = count_text(encoding, text)
    assert abs(got - exact) <= CUT_TOLERANCE * math.ceil(len(text) / COUNT_PIECE_CHARS)


class _Spy:
    """An encoding that remembers the longest text it was handed."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.longest = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.longest = max(self.longest, len(text))
        return self.encoding.encode_ordinary(text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_runs.map(lambda text: text * 50), piece=st.integers(2, 512))
def test_the_encoder_never_sees_more_than_a_piece(text: str, piece: int) -> None:
    spy = _Spy(load_encoding("o200k_base"))
    count_text(spy, text, piece)  # type: ignore[arg-type]
    assert spy.longest <= piece
    covered = list(text_pieces(text, piece))
    assert covered[0][0] == 0 and covered[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


def test_a_run_of_spaces_past_the_regex_stack_is_counted() -> None:
    # One piece of a million spaces overflows the o200k pre-tokenizer's backtracking stack: tiktoken
    # panics (pyo3's PanicException, a BaseException that no ``except Exception`` stops).
    encoding = load_encoding("o200k_base")
    spy = _Spy(encoding)
    assert count_text(spy, " " * 1_100_000) > 0  # type: ignore[arg-type]
    assert spy.longest <= COUNT_PIECE_CHARS
