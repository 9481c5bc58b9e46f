"""``estimate.count_text``: a long text counted piece by piece gives exactly the whole text's count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.estimate import count_text
from worker.vocab import load_encoding

ENCODINGS = ("cl100k_base", "o200k_base")
# Spaces, runs of them, newlines, tabs, letters of both cases and scripts, digits, punctuation,
# apostrophes (contractions), combining marks, and whitespace Python and the regexes may see apart.
ALPHABET = list(" \n\t\r  'sStTdD09aZzé日本ß.,!?-_/\u0301\u00a0\u2028\u3000\u001c\u0085")


@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=400), piece=st.integers(2, 40))
def test_counting_in_pieces_is_exact(name: str, text: str, piece: int) -> None:
    encoding = load_encoding(name)
    assert count_text(encoding, text, piece) == len(encoding.encode_ordinary(text))


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_long_completion_is_counted_in_pieces(name: str) -> None:
    words = "The quick brown fox, 1234 jumps;  over\nthe LAZY dog's back. "
    text = words * 5_000
    encoding = load_encoding(name)
    assert count_text(encoding, text, 1_000) == len(encoding.encode_ordinary(text))
