"""The openai backend against a server this project did not write: llama-cpp-python's own OpenAI-compatible server
(`python -m llama_cpp.server`, its [server] extra) serving the default model's GGUF on loopback.

That server ignores vLLM's continue_final_message: a prefilled chat request gets a new assistant turn that writes the
prefilled line again, which no edit parses. The policy sees the restated prefill, asks again through /completions
with the prompt template, and sends every later prefilled prompt there.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evolve.policies.model_files import find_embedded_gguf
from evolve.policies.openai_api import OpenAIPolicy
from evolve.policies.openai_checks import restates_prefill
from evolve.ports import free_port
from evolve.records import Completion
from evolve.search.prompts import Prompt

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
PREFILL = "def f(x: float) -> float:"
FALLBACK_SAID = "does not continue a prefilled answer"


def code_prompt(n: int) -> Prompt:
    user = (f"Write f(x) so that it matches a hidden function of x on [-3, 3]. Current code (score 0.{n}):\n"
            "```python\ndef f(x: float) -> float:\n    return x\n```\nWrite an improved version of `f`. "
            "Reply with only the code.")
    return Prompt([{"role": "system", "content": "You are an expert Python programmer."},
                   {"role": "user", "content": user}], PREFILL, ("```", "<|im_end|>", "\n\n\n"), 48)


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama_cpp.server on 127.0.0.1 with the default GGUF and a small context; its base URL once it answers."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama_cpp_server") / "server.log"  # a file: its model-loading log fills a pipe
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(find_embedded_gguf()), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048"],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "llama_cpp.server did not start: " + log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield url
    finally:
        process.kill()
        process.wait()


def test_llama_cpp_server_answers_a_prefilled_chat_request_with_a_new_turn_that_restates_it(
        llama_cpp_server: str) -> None:
    prompt = code_prompt(1)
    body = {"messages": [*prompt.messages, {"role": "assistant", "content": PREFILL}], "max_tokens": 24,
            "temperature": 0.0, "seed": 1, "continue_final_message": True, "add_generation_prompt": False}
    reply = httpx.post(f"{llama_cpp_server}/chat/completions", json=body, timeout=120).json()
    text = reply["choices"][0]["message"]["content"]
    assert restates_prefill(text, PREFILL), text  # the premise of the fallback: it did not continue the prefill


def test_the_policy_falls_back_to_raw_completions_says_so_once_and_answers_continue_the_prefill(
        llama_cpp_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def three() -> list[Completion]:
        policy = OpenAIPolicy("served", llama_cpp_server, temperature=0.0, timeout_s=120, retries=0)
        try:
            return list(await asyncio.gather(*(policy.generate(code_prompt(n), n) for n in range(3))))
        finally:
            assert policy.prefill_fallback
            await policy.close()

    completions = asyncio.run(three())
    assert [restates_prefill(completion.text, PREFILL) for completion in completions] == [False] * 3, completions
    assert capsys.readouterr().err.count(FALLBACK_SAID) == 1


def test_evolve_run_through_llama_cpp_server_stores_continuations_of_the_prefill(
        tmp_path: Path, llama_cpp_server: str) -> None:
    db = tmp_path / "third_party.db"
    settings = ['policy.backend="openai"', f'policy.url="{llama_cpp_server}"', "policy.max_new_tokens=64",
                "run.concurrency=2", "policy.retries=0"]
    result = subprocess.run(
        [sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--db", str(db), "--config",
         str(ROOT / "evolve.toml"), "--iterations", "4", *[f"--set={setting}" for setting in settings]],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stderr.count(FALLBACK_SAID) == 1, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        answers = [row[0] for row in connection.execute(
            "SELECT completion FROM attempts WHERE kind = 'policy_call' ORDER BY id")]
    assert len(answers) == 4 and not any(restates_prefill(answer, PREFILL) for answer in answers), answers
