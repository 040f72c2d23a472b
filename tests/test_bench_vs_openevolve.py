"""scripts/bench_vs_openevolve.py without OpenEvolve: its problem folder loads and scores in evolve's sandbox, and the
fake server's replies, fetched over HTTP by evolve's own OpenAI backend, build children that change the constant."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from evolve.engine.offspring import build_child
from evolve.policies.openai_api import OpenAIPolicy
from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import load_problem
from evolve.search.edits import block_body
from evolve.search.prompts import Prompt

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_vs_openevolve.py"
OPENEVOLVE_DIFF = re.compile(r"<<<<<<< SEARCH\n(.*?)=======\n(.*?)>>>>>>> REPLACE", re.DOTALL)  # OpenEvolve 0.4.0's


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_vs_openevolve", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_replies_set_a_fresh_constant_each_time(bench: ModuleType) -> None:
    constants = [bench.constant_for(number) for number in range(1, 2001)]
    assert len(set(constants)) == len(constants)
    assert all(0 <= constant < 1 for constant in constants)


def test_evolve_reply_over_http_builds_a_child_that_scores_in_the_sandbox(bench: ModuleType, tmp_path: Path) -> None:
    evolve_dir, _ = bench.write_problem(tmp_path, 0.01)
    problem = load_problem(str(evolve_dir), tmp_path)
    server = bench.FakePolicyServer(latency_s=0.05)
    port = server.start()

    async def two_completions() -> list[str]:
        policy = OpenAIPolicy("fake", f"http://127.0.0.1:{port}/evolve/v1", model="fake", retries=0)
        prompt = Prompt([{"role": "user", "content": "rewrite value()"}], "", ("<|im_end|>",), 64)
        try:
            return [completion.text for completion in
                    await asyncio.gather(policy.generate(prompt, 1), policy.generate(prompt, 2))]
        finally:
            await policy.close()

    try:
        started = time.monotonic()
        texts = asyncio.run(two_completions())
        assert time.monotonic() - started >= 0.05  # the latency is served
    finally:
        server.stop()
    assert server.requests == {"evolve": 2}
    children = [build_child(problem.initial_code, text, "rewrite") for text in texts]
    assert [child.failure for child in children] == [None, None]
    constants = sorted(repr(bench.constant_for(number)) for number in (1, 2))
    assert sorted(block_body(child.code).split("return ")[1].strip() for child in children) == constants
    evaluation = asyncio.run(evaluate_program(problem, children[0].code))
    assert evaluation.ok, evaluation
    value = float(constants[0]) if constants[0] in children[0].code else float(constants[1])
    assert evaluation.scores["closeness"] == pytest.approx(1 / (1 + abs(value - bench.TARGET)))


def test_openevolve_reply_is_a_diff_of_the_current_programs_constant(bench: ModuleType) -> None:
    program = bench.CANDIDATE.format(burn=0.1).replace("return 0.5", "return 0.25")
    other = program.replace("return 0.25", "return 0.75")
    prompt = (f"# Program Evolution History\n```python\n{other}\n```\n\n# Current Program\n```python\n{program}\n```\n"
              "\n# Task\nSuggest improvements.")
    reply = bench.openevolve_reply(prompt, 7)
    blocks = OPENEVOLVE_DIFF.findall(reply)
    assert len(blocks) == 1
    search, replace = blocks[0]
    assert program.count(search) == 1
    child = program.replace(search, replace)
    assert f"return {bench.constant_for(7)!r}" in child
    assert child.replace(repr(bench.constant_for(7)), "0.25") == program


def test_openevolve_reply_is_none_without_a_current_program(bench: ModuleType) -> None:
    assert bench.openevolve_reply("# Task\nno program here", 1) is None
