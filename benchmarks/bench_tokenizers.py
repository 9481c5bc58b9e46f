"""The real tokenizer's cost: Mistral's Tekken estimate against the cl100k estimate, and the two ways
of having Tekken offline.

Row 5's third line: ``estimate_completion`` of the same completion texts (``bench_estimate``'s:
prose, code, JSON, tool arguments, French, German, Japanese, Russian; fixed seed) for
``open-mistral-nemo`` (Tekken, the shipped ranks in tiktoken) and for ``gpt-4`` (cl100k) in the
same process; ratio = cl100k's time over Tekken's (the texts are the same, the token counts are
not). Target: >= 0.9x. The notes compare the shipped ranks with ``mistral-common``'s own
``Tekkenizer`` (the ``mistral`` extra) on the same texts: speed, texts counted differently, and in
a fresh process each the RSS and the time to load.

    .venv/bin/python -m benchmarks.bench_tokenizers [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from benchmarks.bench_estimate import _best_time, completion_texts
from worker.core.estimate import estimate_completion
from worker.core.result import Choice
from worker.core.vocab import load_encoding

TARGET_RATIO = 0.9
TEKKEN_MODEL = "open-mistral-nemo"
PEER_MODEL = "gpt-4"

# Run in a fresh interpreter: RSS (VmRSS, kB) before and after loading one tokenizer, and the time.
_LOAD = """
import json, time, warnings
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
kind = {kind!r}
before = rss(); started = time.perf_counter()
if kind == 'mistral-common':
    warnings.simplefilter('ignore')
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    MistralTokenizer.v3(is_tekken=True).instruct_tokenizer.tokenizer.encode('x', bos=False, eos=False)
else:
    import worker.core.estimate
    from worker.core.vocab import load_encoding
    load_encoding(kind).encode_ordinary('x')
print(json.dumps({{'rss_mb': (rss() - before) / 1024, 'seconds': time.perf_counter() - started}}))
"""


def _load_cost(kind: str) -> dict[str, float] | None:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD.format(kind=kind)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def _mistral_common(texts: list[str], rounds: int) -> dict[str, Any] | None:
    try:
        import warnings

        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = MistralTokenizer.v3(is_tekken=True).instruct_tokenizer.tokenizer
    encoding = load_encoding("tekken_240718")
    differ = sum(
        1
        for text in texts
        if len(tokenizer.encode(text, bos=False, eos=False)) != len(encoding.encode_ordinary(text))
    )
    seconds, tokens = _best_time(
        lambda: sum(len(tokenizer.encode(text, bos=False, eos=False)) for text in texts), rounds
    )
    return {"seconds": seconds, "tokens": tokens, "differ": differ}


def run(smoke: bool = False) -> dict[str, Any]:
    count, rounds = (60, 2) if smoke else (600, 5)
    texts = completion_texts(count)
    choices = [[Choice(index=0, content=text)] for text in texts]
    for model in (TEKKEN_MODEL, PEER_MODEL):
        estimate_completion(model, choices[0])  # load the vocabulary, warm the lookup
    peer_s, peer_tokens = _best_time(
        lambda: sum(estimate_completion(PEER_MODEL, c) for c in choices), rounds
    )
    tekken_s, tekken_tokens = _best_time(
        lambda: sum(estimate_completion(TEKKEN_MODEL, c) for c in choices), rounds
    )
    chars = sum(len(text) for text in texts)
    ratio = peer_s / tekken_s
    started = time.perf_counter()
    common = _mistral_common(texts, rounds)
    return {
        "texts": count,
        "chars": chars,
        "tekken_tokens": tekken_tokens,
        "peer_tokens": peer_tokens,
        "tekken_chars_per_s": chars / tekken_s,
        "peer_chars_per_s": chars / peer_s,
        "tekken_s": tekken_s,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "mistral_common": common,
        "mistral_common_check_s": time.perf_counter() - started,
        "load": {
            kind: _load_cost(kind)
            for kind in ("tekken_240718", "cl100k_base")
            + (("mistral-common",) if common is not None else ())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    print(json.dumps(run(parser.parse_args().smoke), indent=2))


if __name__ == "__main__":
    main()
