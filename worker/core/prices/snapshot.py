"""Generate the bundled list prices (``worker/data/litellm_prices.json``) from a LiteLLM price file.

    python -m worker.core.prices.snapshot FILE --version "litellm 1.110.2 (PyPI wheel)" --retrieved 2026-12-02

keeps the entries the book reads (``mode`` chat or responses, with per-token input and output prices)
of the providers in ``PROVIDERS``, and of each entry every key but those that price nothing
(``worker.core.prices.litellm.DESCRIPTIVE``, ``supports_*``, ``supported_*``): a pricing key the book
does not apply is kept, so its rows say so (``Price.unapplied``). Numbers are written back from their exact Decimal value. The provenance (source,
version, SHA-256 of FILE, date, filter) goes in the ``_snapshot`` entry, which the reader skips. The
output is sorted, so the same FILE always gives the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from worker.core.prices.litellm import DESCRIPTIVE, load_json, skip_reason

PROVIDERS = frozenset(
    {
        "openai",
        "azure",
        "anthropic",
        "deepseek",
        "gemini",
        "xai",
        "groq",
        "mistral",
        "together_ai",
        "fireworks_ai",
        "openrouter",
        "ollama",
    }
)
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "data" / "litellm_prices.json"


def _kept(key: str) -> bool:
    return key not in DESCRIPTIVE and not key.startswith(("supports_", "supported_"))


def _dump(value: Any, indent: str = "") -> str:
    """JSON text with each Decimal written as its exact number (``1.5E-7``), never through a float."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = indent + "  "
        items = [f"{inner}{json.dumps(k)}: {_dump(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(v, indent) for v in value) + "]"
    return json.dumps(value)


def build(raw: bytes, version: str, retrieved: str) -> str:
    """The snapshot file's text for the LiteLLM file ``raw``."""
    data = load_json(raw, "litellm file")
    entries = {
        key: {k: v for k, v in sorted(entry.items()) if _kept(k)}
        for key, entry in sorted(data.items())
        if skip_reason(key, entry) is None and entry.get("litellm_provider") in PROVIDERS
    }
    meta = {
        "source": "BerriAI/litellm model_prices_and_context_window.json",
        "version": version,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "retrieved": retrieved,
        "filter": "mode chat or responses, per-token input and output prices, litellm_provider in "
        + ", ".join(sorted(PROVIDERS))
        + "; every key but names, dates, limits and capabilities",
        "generator": "python -m worker.core.prices.snapshot",
        "entries": len(entries),
    }
    return _dump({"_snapshot": meta, **entries}) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path, help="LiteLLM's model_prices_and_context_window.json")
    parser.add_argument("--version", required=True, help="where FILE came from (commit, release)")
    parser.add_argument("--retrieved", required=True, help="the date FILE was taken (YYYY-MM-DD)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    text = build(args.file.read_bytes(), args.version, args.retrieved)
    args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {text.count(chr(10))} lines")


if __name__ == "__main__":
    main()
