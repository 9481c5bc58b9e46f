"""The shipped tiktoken vocabularies, loaded without a network.

``tekken_240718`` is Mistral's Tekken vocabulary (``open-mistral-nemo``, ``ministral-8b-2410``,
``mistral-small-2409``, ``pixtral-12b-2409``): the first 130,072 ranks (its 131,072 minus the 1,000
control-token slots) of ``mistral_common/data/tekken_240718.json`` in ``mistral-common`` 1.13.1
(PyPI, Apache-2.0; the file's sha256 is eccd1665…827516), written in tiktoken's rank format by
``devtools/tekken_ranks.py``, with the split pattern of that file's ``config``. Control tokens are
not text: the chat template counts them (``worker.core.mistral_chat``).

tiktoken downloads a vocabulary on first use; the worker must never do that. The rank files ship
gzipped in ``worker/core/vocab/`` with ``SHA256SUMS`` (the hashes of the decompressed content, the same
ones tiktoken pins in ``tiktoken_ext/openai_public.py``). An encoding is built here from a file whose
hash matched, with the split pattern and special tokens copied from that same module, so it counts
exactly as ``tiktoken.get_encoding`` would.
"""

from __future__ import annotations

import base64
import binascii
import functools
import gzip
import hashlib
import zlib
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import tiktoken

from worker.core.errors import VocabularyError

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"

CHECKSUMS = "SHA256SUMS"

_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True, slots=True)
class VocabularySpec:
    """What tiktoken's ``openai_public`` module says about one encoding, minus the download."""

    name: str
    pat_str: str
    special_tokens: dict[str, int]
    rank_count: int

    @property
    def filename(self) -> str:
        return f"{self.name}.tiktoken.gz"

    @property
    def checksum_key(self) -> str:
        return f"{self.name}.tiktoken"


# Tekken's pre-tokenizer (``config.pattern`` of tekken_240718.json): o200k's without the
# contractions, and digits one at a time.
_TEKKEN_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*""",
        r"""\p{N}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

VOCABULARIES: dict[str, VocabularySpec] = {
    "cl100k_base": VocabularySpec(
        name="cl100k_base",
        pat_str=_CL100K_PAT,
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
        rank_count=100256,
    ),
    "o200k_base": VocabularySpec(
        name="o200k_base",
        pat_str=_O200K_PAT,
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
        rank_count=199998,
    ),
    "tekken_240718": VocabularySpec(
        name="tekken_240718",
        pat_str=_TEKKEN_PAT,
        special_tokens={},
        rank_count=130072,
    ),
}

Directory = Path | Traversable


def shipped_directory() -> Traversable:
    """The ``worker/vocab`` folder inside the installed package."""
    return resources.files("worker.core") / "vocab"


def _spec(name: str) -> VocabularySpec:
    try:
        return VOCABULARIES[name]
    except KeyError:
        known = ", ".join(sorted(VOCABULARIES))
        raise VocabularyError(f"no shipped vocabulary named {name!r} (known: {known})") from None


def read_checksums(directory: Directory) -> dict[str, str]:
    """``SHA256SUMS`` as file name → lowercase hex digest (``sha256sum`` format)."""
    path = directory / CHECKSUMS
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VocabularyError(f"cannot read {CHECKSUMS} in {directory}: {exc}") from exc
    sums: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            digest, filename = parts
            sums[filename.lstrip("*")] = digest.lower()
    return sums


def read_verified(name: str, directory: Directory | None = None) -> bytes:
    """The decompressed rank file of ``name``, only if its sha256 matches ``SHA256SUMS``.

    Raises ``VocabularyError`` naming the file (and both hashes on a mismatch) when the file or its
    checksum line is missing, the gzip is damaged, or the content differs.
    """
    spec = _spec(name)
    folder = shipped_directory() if directory is None else directory
    expected = read_checksums(folder).get(spec.checksum_key)
    if expected is None:
        raise VocabularyError(f"{CHECKSUMS} in {folder} has no line for {spec.checksum_key}")
    path = folder / spec.filename
    try:
        compressed = path.read_bytes()
    except OSError as exc:
        raise VocabularyError(f"vocabulary file {spec.filename} is missing: {exc}") from exc
    try:
        content = gzip.decompress(compressed)
    except (OSError, EOFError, zlib.error) as exc:
        raise VocabularyError(f"vocabulary file {spec.filename} is not valid gzip: {exc}") from exc
    actual = hashlib.sha256(content).hexdigest()
    if actual != expected:
        raise VocabularyError(
            f"vocabulary file {spec.filename} fails its checksum: decompressed sha256 is "
            f"{actual}, {CHECKSUMS} expects {expected}"
        )
    return content


def parse_ranks(name: str, content: bytes) -> dict[bytes, int]:
    """Parse tiktoken's rank format (``base64-token rank`` per line)."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(content.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as exc:
            raise VocabularyError(f"vocabulary {name}: line {number} is malformed") from exc
    return ranks


def build_encoding(name: str, directory: Directory | None = None) -> tiktoken.Encoding:
    """Build the encoding ``name`` from a verified rank file (uncached; about a second).

    ``directory`` overrides the shipped folder (tests, or an operator-supplied copy).
    """
    spec = _spec(name)
    ranks = parse_ranks(name, read_verified(name, directory))
    return tiktoken.Encoding(
        name=spec.name,
        pat_str=spec.pat_str,
        mergeable_ranks=ranks,
        special_tokens=dict(spec.special_tokens),
    )


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """The shipped encoding ``name``, built once per process.

    Safe to call from any thread; two threads racing on the first call may both build it, and one
    copy wins. Raises ``VocabularyError`` when the shipped file is missing or damaged.
    """
    return build_encoding(name)


def verify_vocabularies(directory: Directory | None = None) -> list[str]:
    """Check every shipped vocabulary (checksum and rank count); returns problems, empty when sound.

    For ``billing doctor``: reads and hashes the files but does not build encodings or touch the
    per-process cache.
    """
    problems: list[str] = []
    for name, spec in VOCABULARIES.items():
        try:
            ranks = parse_ranks(name, read_verified(name, directory))
        except VocabularyError as exc:
            problems.append(str(exc))
            continue
        if len(ranks) != spec.rank_count:
            problems.append(f"vocabulary {name} has {len(ranks)} ranks, expected {spec.rank_count}")
    return problems
