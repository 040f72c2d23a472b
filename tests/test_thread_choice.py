"""Threads chosen from the cores actually free: ThreadChoice fed step timings keeps the count with the least time per
decoded row, gives up a probe at once on a count clearly slower, and ignores steps that hold prompt tokens."""

from __future__ import annotations

import threading

import pytest

from evolve.policies.thread_choice import ThreadChoice, thread_candidates


def run(choice: ThreadChoice, per_row: dict[int, float], steps: int, rows: int = 16,
        decode_only: bool = True) -> list[int]:
    """Feed `steps` steps whose cost per row depends on the thread count; the counts they ran with."""
    used = []
    for _ in range(steps):
        threads = choice.threads()
        used.append(threads)
        choice.record(threads, per_row[threads] * rows, rows, decode_only)
    return used


def test_the_candidates_halve_down_to_one() -> None:
    assert thread_candidates(2) == (2, 1) and thread_candidates(16) == (16, 8, 4, 2, 1) and thread_candidates(1) == (1,)


def test_beside_a_busy_job_one_thread_is_chosen_within_the_first_probe() -> None:
    choice = ThreadChoice((2, 1), probe_steps=4, first_wait=8)
    used = run(choice, {2: 0.010, 1: 0.003}, 40)
    assert used[:8] == [2] * 8  # the first wait, at all the cores
    assert choice.current == 1 and choice.switches == 1
    assert used[-10:] == [1] * 10


def test_on_an_idle_machine_all_cores_stay_and_the_probes_thin_out() -> None:
    choice = ThreadChoice((2, 1), probe_steps=4, first_wait=8, give_up=2.0)
    used = run(choice, {2: 0.002, 1: 0.0028}, 400)
    assert choice.current == 2 and choice.switches == 0
    assert choice.probes >= 3 and used.count(1) == 4 * choice.probes  # each probe: 4 steps at 1 thread
    assert used.count(1) < 0.1 * len(used)  # the waits double: 8, 16, 32, ...


def test_a_probe_ends_after_one_step_of_a_count_far_slower() -> None:
    choice = ThreadChoice((1, 2), probe_steps=4, first_wait=8)
    used = run(choice, {1: 0.003, 2: 0.012}, 30)
    assert used.count(2) == choice.probes == 2 and choice.current == 1


def test_steps_with_prompt_tokens_do_not_count_in_a_probe() -> None:
    choice = ThreadChoice((2, 1), probe_steps=2, first_wait=2)
    run(choice, {2: 0.010, 1: 0.003}, 2)
    run(choice, {2: 0.0001, 1: 1.0}, 20, decode_only=False)  # prefill steps: any cost, no decision
    assert choice.probes == 0 and choice.current == 2
    run(choice, {2: 0.010, 1: 0.003}, 4)
    assert choice.probes == 1 and choice.current == 1


def test_a_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        ThreadChoice((2, 0))


def test_an_engine_chooses_its_threads_unless_they_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from evolve.policies.llama_engine import GenerationRequest, LlamaEngine
    from evolve.policies.model_files import find_embedded_gguf

    monkeypatch.delenv("EVOLVE_THREADS", raising=False)
    chosen = LlamaEngine(find_embedded_gguf(), slots=2, context_per_slot=128)
    given = LlamaEngine(find_embedded_gguf(), slots=2, context_per_slot=128, threads=1)
    monkeypatch.setenv("EVOLVE_THREADS", "1")
    fixed = LlamaEngine(find_embedded_gguf(), slots=2, context_per_slot=128)
    try:
        assert chosen.thread_choice is not None and given.thread_choice is None and fixed.thread_choice is None
        finished = threading.Event()
        chosen.submit(GenerationRequest(tuple(range(1000, 1020)), 40, temperature=0.0), lambda _: finished.set())
        assert finished.wait(120)
        assert chosen.stats().threads in chosen.thread_choice.candidates
    finally:
        for engine in (chosen, given, fixed):
            engine.close()
