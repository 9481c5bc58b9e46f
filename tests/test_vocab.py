"""The shipped vocabularies: checksums, fidelity to tiktoken's own definitions, no network."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import socket
from importlib import resources
from pathlib import Path

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public

from worker.core import vocab
from worker.core.errors import VocabularyError

NAMES = sorted(n for n in vocab.VOCABULARIES if n in openai_public.ENCODING_CONSTRUCTORS)


@pytest.fixture
def vocab_copy(tmp_path: Path) -> Path:
    """A writable copy of ``worker/vocab`` to tamper with."""
    with resources.as_file(vocab.shipped_directory()) as shipped:
        for item in Path(shipped).iterdir():
            if item.is_file():
                shutil.copy(item, tmp_path / item.name)
    return tmp_path


def _expected_hash(directory: Path, name: str) -> str:
    return vocab.read_checksums(directory)[f"{name}.tiktoken"]


def test_shipped_vocabularies_verify_clean() -> None:
    assert vocab.verify_vocabularies() == []


@pytest.mark.parametrize("name", NAMES)
def test_specs_match_tiktoken_definitions(
    name: str, monkeypatch: pytest.MonkeyPatch, vocab_copy: Path
) -> None:
    # Call tiktoken's own constructor with the download replaced, to compare everything it pins.
    seen: dict[str, str | None] = {}

    def fake_load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen["url"] = url
        seen["hash"] = expected_hash
        return {b"a": 0}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    upstream = openai_public.ENCODING_CONSTRUCTORS[name]()
    spec = vocab.VOCABULARIES[name]
    assert spec.pat_str == upstream["pat_str"]
    assert spec.special_tokens == upstream["special_tokens"]
    assert seen["hash"] == _expected_hash(vocab_copy, name)


def test_the_tekken_spec_is_mistral_commons() -> None:
    # The pattern and the text ranks' count as the installed mistral-common's file states them.
    mistral = pytest.importorskip("mistral_common")
    config = json.loads((resources.files(mistral) / "data" / "tekken_240718.json").read_text())[
        "config"
    ]
    spec = vocab.VOCABULARIES["tekken_240718"]
    assert spec.pat_str == config["pattern"]
    assert spec.rank_count == config["default_vocab_size"] - config["default_num_special_tokens"]


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        # The cookbook's "tiktoken is great!" example (How_to_count_tokens_with_tiktoken.ipynb).
        ("o200k_base", [83, 8251, 2488, 382, 2212, 0]),
        ("cl100k_base", [83, 1609, 5963, 374, 2294, 0]),
    ],
)
def test_loaded_encoding_tokenizes_like_tiktoken(name: str, tokens: list[int]) -> None:
    encoding = vocab.load_encoding(name)
    assert encoding.name == name
    assert encoding.encode_ordinary("tiktoken is great!") == tokens
    assert encoding.encode("<|endoftext|>", allowed_special="all") == [
        vocab.VOCABULARIES[name].special_tokens["<|endoftext|>"]
    ]
    assert len(encoding._mergeable_ranks) == vocab.VOCABULARIES[name].rank_count


def test_load_encoding_is_cached() -> None:
    assert vocab.load_encoding("o200k_base") is vocab.load_encoding("o200k_base")


def test_good_copy_builds(vocab_copy: Path) -> None:
    encoding = vocab.build_encoding("cl100k_base", vocab_copy)
    assert len(encoding.encode_ordinary("hello world")) == 2
    assert vocab.verify_vocabularies(vocab_copy) == []


def test_tampered_vocabulary_is_refused(vocab_copy: Path) -> None:
    path = vocab_copy / "cl100k_base.tiktoken.gz"
    content = gzip.decompress(path.read_bytes())
    tampered = content.replace(b" 100\n", b" 101\n", 1)
    assert tampered != content
    path.write_bytes(gzip.compress(tampered))
    actual = hashlib.sha256(tampered).hexdigest()
    expected = _expected_hash(vocab_copy, "cl100k_base")

    with pytest.raises(VocabularyError) as caught:
        vocab.build_encoding("cl100k_base", vocab_copy)
    message = str(caught.value)
    assert "cl100k_base.tiktoken.gz" in message
    assert actual in message
    assert expected in message

    problems = vocab.verify_vocabularies(vocab_copy)
    assert len(problems) == 1
    assert "cl100k_base.tiktoken.gz" in problems[0]


def test_wrong_checksum_line_is_refused(vocab_copy: Path) -> None:
    sums = vocab_copy / "SHA256SUMS"
    sums.write_text(sums.read_text().replace("446a9538", "00000000"))
    with pytest.raises(VocabularyError, match=r"o200k_base\.tiktoken\.gz.*00000000"):
        vocab.read_verified("o200k_base", vocab_copy)


def test_missing_vocabulary_file(vocab_copy: Path) -> None:
    (vocab_copy / "o200k_base.tiktoken.gz").unlink()
    with pytest.raises(VocabularyError, match=r"o200k_base\.tiktoken\.gz is missing"):
        vocab.read_verified("o200k_base", vocab_copy)
    assert any(
        "o200k_base.tiktoken.gz" in problem for problem in vocab.verify_vocabularies(vocab_copy)
    )


def test_missing_checksum_file(vocab_copy: Path) -> None:
    (vocab_copy / "SHA256SUMS").unlink()
    with pytest.raises(VocabularyError, match="SHA256SUMS"):
        vocab.read_verified("cl100k_base", vocab_copy)
    assert len(vocab.verify_vocabularies(vocab_copy)) == len(vocab.VOCABULARIES)


def test_checksum_file_without_entry(vocab_copy: Path) -> None:
    sums = vocab_copy / "SHA256SUMS"
    lines = [line for line in sums.read_text().splitlines() if "cl100k" not in line]
    sums.write_text("\n".join(lines) + "\n")
    with pytest.raises(VocabularyError, match=r"no line for cl100k_base\.tiktoken"):
        vocab.read_verified("cl100k_base", vocab_copy)


def test_damaged_gzip(vocab_copy: Path) -> None:
    path = vocab_copy / "cl100k_base.tiktoken.gz"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(VocabularyError, match=r"cl100k_base\.tiktoken\.gz is not valid gzip"):
        vocab.read_verified("cl100k_base", vocab_copy)


def test_unknown_vocabulary_name() -> None:
    with pytest.raises(VocabularyError, match="p50k_base"):
        vocab.build_encoding("p50k_base")


def test_no_network_and_no_tiktoken_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network or tiktoken registry used")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(tiktoken, "get_encoding", refuse)
    monkeypatch.setattr(tiktoken.registry, "get_encoding", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file", refuse)

    for name in NAMES:
        encoding = vocab.build_encoding(name)
        assert encoding.encode_ordinary("offline") != []
    assert list(cache.iterdir()) == []
