"""The hold's pure parts: the short-prompt bound against the tokenizer's estimate, and request ids."""

from __future__ import annotations

import multiprocessing
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.estimate import estimate_prompt
from worker.gateway.metadata import new_request_id
from worker.gateway.reservation import SHORT_PROMPT_BYTES, prompt_tokens, short_prompt_bound

texts = st.text(
    st.characters(blacklist_categories=["Cs"]) | st.sampled_from([" ", "\n", "é", "😀", "的"]),
    max_size=120,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]), "content": texts},
        optional={"name": st.text(max_size=10)},
    ),
    max_size=4,
)


@settings(deadline=None)  # the first call reads the vocabularies
@given(messages, st.sampled_from(["gpt-4o", "gpt-4", "gpt-3.5-turbo", "some-unknown-model"]))
def test_the_short_prompt_bound_is_never_below_the_estimate(
    prompt: list[dict[str, str]], model: str
) -> None:
    bound = short_prompt_bound(prompt, ())
    estimate = estimate_prompt(model, prompt)
    if bound is None:
        assert sum(len(v.encode()) for m in prompt for v in m.values()) > SHORT_PROMPT_BYTES
        assert prompt_tokens(model, prompt, ()) == estimate
    else:
        assert bound >= estimate
        assert prompt_tokens(model, prompt, ()) == bound


def test_other_prompts_are_estimated() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    plain = [{"role": "user", "content": "hi"}]
    assert short_prompt_bound(parts, ()) is None
    assert short_prompt_bound(plain, tools) is None
    assert short_prompt_bound(plain, ()) == 3 + 3 + 1 + len("user") + len("hi")
    assert prompt_tokens("gpt-4o", plain, tools) == estimate_prompt("gpt-4o", plain, tools)


def _ids_of_a_child(queue: multiprocessing.Queue[list[str]]) -> None:
    queue.put([new_request_id() for _ in range(3)])


def test_request_ids_are_unique_and_a_forked_child_draws_its_own() -> None:
    ids = [new_request_id() for _ in range(1000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"req_[0-9a-f]{32}", rid) for rid in ids)
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[list[str]] = context.Queue()
    child = context.Process(target=_ids_of_a_child, args=(queue,))
    child.start()
    theirs = queue.get(timeout=30)
    child.join(30)
    assert not set(theirs) & set(ids)
    assert theirs[0][:24] != ids[0][:24]  # another random part, not only another count
