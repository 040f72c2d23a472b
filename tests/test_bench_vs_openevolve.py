"""scripts/bench/bench_vs_openevolve.py and its fake server without OpenEvolve: its problem folder loads and scores in evolve's sandbox, and the
fake server's replies, fetched over HTTP by evolve's own OpenAI backend, build children that change the constant."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from types import ModuleType

import pytest

from evolve.engine.offspring import build_child
from evolve.policies.openai_api import OpenAIPolicy
from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import load_problem
from evolve.program_format import block_body
from evolve.search.prompts import Prompt
from tests.script_modules import load_script

OPENEVOLVE_DIFF = re.compile(r"<<<<<<< SEARCH\n(.*?)=======\n(.*?)>>>>>>> REPLACE", re.DOTALL)  # OpenEvolve 0.4.0's


@pytest.fixture(scope="module")
def port() -> ModuleType:
    return load_script("bench_openevolve_port")


@pytest.fixture(scope="module")
def bench(port: ModuleType) -> ModuleType:
    load_script("bench_processes")  # the bench imports it, and the port, by name
    return load_script("bench_vs_openevolve")


def test_replies_set_a_fresh_constant_each_time(port: ModuleType) -> None:
    constants = [port.constant_for(number) for number in range(1, 2001)]
    assert len(set(constants)) == len(constants)
    assert all(0 <= constant < 1 for constant in constants)


def test_evolve_reply_over_http_builds_a_child_that_scores_in_the_sandbox(port: ModuleType, tmp_path: Path) -> None:
    evolve_dir, _ = port.write_problem(tmp_path, 0.01)
    problem = load_problem(str(evolve_dir), tmp_path)
    server = port.FakePolicyServer(latency_s=0.05)
    server_port = server.start()

    async def two_completions() -> list[str]:
        policy = OpenAIPolicy("fake", f"http://127.0.0.1:{server_port}/evolve/v1", model="fake", retries=0)
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
    constants = sorted(repr(port.constant_for(number)) for number in (1, 2))
    assert sorted(block_body(child.code).split("return ")[1].strip() for child in children) == constants
    evaluation = asyncio.run(evaluate_program(problem, children[0].code))
    assert evaluation.ok, evaluation
    value = float(constants[0]) if constants[0] in children[0].code else float(constants[1])
    assert evaluation.scores["closeness"] == pytest.approx(1 / (1 + abs(value - port.TARGET)))


def test_openevolve_reply_is_a_diff_of_the_current_programs_constant(port: ModuleType) -> None:
    program = port.CANDIDATE.format(burn=0.1).replace("return 0.5", "return 0.25")
    other = program.replace("return 0.25", "return 0.75")
    prompt = (f"# Program Evolution History\n```python\n{other}\n```\n\n# Current Program\n```python\n{program}\n```\n"
              "\n# Task\nSuggest improvements.")
    reply = port.openevolve_reply(prompt, 7)
    blocks = OPENEVOLVE_DIFF.findall(reply)
    assert len(blocks) == 1
    search, replace = blocks[0]
    assert program.count(search) == 1
    child = program.replace(search, replace)
    assert f"return {port.constant_for(7)!r}" in child
    assert child.replace(repr(port.constant_for(7)), "0.25") == program


def test_openevolve_reply_is_none_without_a_current_program(port: ModuleType) -> None:
    assert port.openevolve_reply("# Task\nno program here", 1) is None


def test_bound_is_the_smaller_of_policy_and_cpu_throughput(bench: ModuleType) -> None:
    cores = os.cpu_count() or 1
    cpu_bound = 60 * min(cores, 4) / 0.1
    at_50_ms = bench.Setting(50, 4, 4, 4, 60, 0.1)
    assert at_50_ms.bound_per_min(4, 4) == pytest.approx(min(60 * 4 / 0.05, cpu_bound))
    at_500_ms = bench.Setting(500, 1, 4, 4, 60, 0.1)
    assert at_500_ms.bound_per_min(1, 4) == pytest.approx(min(120.0, cpu_bound))
    assert at_500_ms.bound_per_min(16, 1) == pytest.approx(min(60 * 16 / 0.5, 600.0))  # one worker: 10 per second


def test_openevolve_loop_is_timed_from_its_log(bench: ModuleType, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "openevolve_20261123_172250.log").write_text(
        "2026-11-23 17:22:50,100 - openevolve.process_parallel - INFO - Starting process-based evolution from "
        "iteration 1 for 2 iterations (total: 3)\n"
        "2026-11-23 17:22:51,903 - openevolve.process_parallel - INFO - Iteration 1: Program 2d (parent: 51) "
        "completed in 0.60s\n"
        "2026-11-23 17:22:52,000 - openevolve.process_parallel - WARNING - Iteration 2 error: No valid diffs\n"
        "2026-11-23 17:22:52,600 - openevolve.process_parallel - INFO - Evolution completed - Maximum iterations\n")
    loop_s, children = bench.openevolve_loop(tmp_path)
    assert loop_s == pytest.approx(2.5)
    assert children == 1


def test_an_evolve_run_is_measured_from_its_process_tree_and_store(bench: ModuleType, port: ModuleType,
                                                                    tmp_path: Path) -> None:
    evolve_problem, openevolve_problem = port.write_problem(tmp_path, 0.05)
    source = bench.snapshot_evolve(tmp_path / "src", None)
    assert source.startswith("evolve from the working tree")
    server = port.FakePolicyServer(latency_s=0.01)
    server_port = server.start()
    try:
        setting = bench.Setting(10, 2, 2, 2, 3, 0.05)
        run = bench.Bench(f"http://127.0.0.1:{server_port}", tmp_path / "src", None, evolve_problem, openevolve_problem,
                          120)
        (tmp_path / "run").mkdir()
        measure = bench.run_evolve(setting, run, tmp_path / "run", 0)
    finally:
        server.stop()
    assert server.requests == {"evolve": 3}
    assert measure.children == 3
    assert 0 < measure.loop_s < measure.wall_s
    assert measure.cpu_s > 4 * 0.05  # at least what the seed and the three children burnt
    assert measure.peak_mb > 0 and measure.tree_mb > 0
