"""Write Mistral's Tekken ranks in tiktoken's format, as ``worker/core/vocab`` ships them.

    .venv/bin/python -m devtools.tekken_ranks [out.tiktoken.gz]

Reads ``mistral_common/data/tekken_240718.json`` from the installed ``mistral-common`` (the
``mistral`` extra, Apache-2.0) and writes its first ``default_vocab_size -
default_num_special_tokens`` ranks (the ones that are text; the rest are control-token slots) as
``base64-token rank`` lines, gzipped without a timestamp, then prints the sha256 of the content
for ``SHA256SUMS``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from importlib import resources
from pathlib import Path


def ranks_text(name: str = "tekken_240718.json") -> bytes:
    data = json.loads((resources.files("mistral_common") / "data" / name).read_text("utf-8"))
    config = data["config"]
    count = config["default_vocab_size"] - config["default_num_special_tokens"]
    lines = []
    for expected, entry in enumerate(data["vocab"][:count]):
        if entry["rank"] != expected:
            raise SystemExit(f"{name}: rank {entry['rank']} at position {expected}")
        lines.append(f"{entry['token_bytes']} {entry['rank']}\n")
    return "".join(lines).encode("ascii")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tekken_240718.tiktoken.gz")
    content = ranks_text()
    out.write_bytes(gzip.compress(content, compresslevel=9, mtime=0))
    print(f"{hashlib.sha256(content).hexdigest()}  tekken_240718.tiktoken")


if __name__ == "__main__":
    main()
