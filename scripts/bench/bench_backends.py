"""Benchmark of policy backends side by side: aggregate tokens/s at each level of requests in flight, prefill apart,
and the iterations/min of the default `evolve run` on each.

    .venv/bin/python scripts/bench/bench_backends.py                                  # llamacpp against hf, 1/4/16/32
    .venv/bin/python scripts/bench/bench_backends.py --backends llamacpp --runs 0     # one backend, no evolve runs
    .venv-vllm/bin/python scripts/bench/bench_backends.py --backends vllm --runs 0    # vLLM in process (GPU)
    .venv/bin/python scripts/bench/bench_backends.py --backends openai --set policy.url=http://HOST:PORT/v1 --runs 0

Any `--set` of `evolve run` works (policy.answers=3, ...). The prompts are the engine's own, built from the problem's
initial program, each request's parent made distinct by a comment line at the top of its EVOLVE block (so prompts
share their instructions and differ from the parent's code on, as in a run: a prefix cache helps as much as it
would there, no more); every completion goes through the real edit step, so "mutations" counts answers that became a
changed, parsing child (not yet evaluated). Each level runs `--requests` requests (at least the level) with distinct
seeds, after one warm-up request. tokens/s is generated tokens over the level's wall time (prefill included);
prefill is measured alone first (`--requests` requests of one new token each, one at a time: prompt tokens/s).
`--runs N` then runs the default `evolve run` (evolve.toml, `--iterations`, same problem and seed) N times per
backend, one after the other, and prints iterations/min (median). Prints one table row per measurement and a JSON
line per row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from evolve.cli.common import parse_setting
from evolve.config import load_config
from evolve.engine.offspring import offspring
from evolve.policies.base import Policy
from evolve.policies.factory import open_policy
from evolve.problems.problem import load_problem
from evolve.program_format import EVOLVE_START
from evolve.records import Completion, MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import Prompt, PromptOptions, build_prompt

ROOT = Path(__file__).resolve().parents[2]


def mutations(parent: str, prompt: Prompt, completion: Completion, options: PromptOptions) -> int:
    return sum(child.code is not None for child in offspring(parent, prompt.prefill + completion.text, options))


async def level(policy: Policy, prompts: Callable[[int], Prompt], concurrency: int, requests: int, seed0: int,
                check: Callable[[int, Completion], int]) -> dict[str, float]:
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(seed: int) -> int:
        async with semaphore:
            started = time.monotonic()
            completion = await policy.generate(prompts(seed), seed)
            latencies.append(time.monotonic() - started)
            tokens.append(completion.completion_tokens)
            return check(seed, completion)

    tokens: list[int] = []
    started = time.monotonic()
    made = sum(await asyncio.gather(*(one(seed0 + i) for i in range(requests))))
    wall = time.monotonic() - started
    return {"concurrency": concurrency, "requests": requests, "wall_s": round(wall, 2),
            "tokens_per_s": round(sum(tokens) / wall, 1), "requests_per_min": round(60 * requests / wall, 1),
            "mutations_per_min": round(60 * made / wall, 1), "median_latency_s": round(statistics.median(latencies), 2),
            "mean_completion_tokens": round(sum(tokens) / requests, 1)}


async def prefill(policy: Policy, prompts: Callable[[int], Prompt], requests: int) -> dict[str, float]:
    """Prompt tokens per second: requests of one new token each, one at a time, each on a prompt of its own."""
    started = time.monotonic()
    prompt_tokens = 0
    for seed in range(500_000, 500_000 + requests):
        prompt_tokens += (await policy.generate(replace(prompts(seed), max_new_tokens=1), seed)).prompt_tokens
    wall = time.monotonic() - started
    return {"prompt_tokens": round(prompt_tokens / requests), "prefill_tokens_per_s": round(prompt_tokens / wall, 1)}


async def bench_backend(args: argparse.Namespace, backend: str) -> None:
    overrides: dict[str, object] = {"run.problem": args.problem, "policy.backend": backend}
    for item in args.set:
        overrides.update(parse_setting(item))
    config = load_config(args.config, overrides)
    section = config.policy
    problem = load_problem(config.run.problem, Path(config.run.programs_dir))
    options = PromptOptions.from_policy(section)
    template = load_template(section.template)
    def parent_code(seed: int) -> str:
        return problem.initial_code.replace(EVOLVE_START, f"{EVOLVE_START}\n# variant {seed}", 1)

    def prompts(seed: int) -> Prompt:
        code = parent_code(seed)
        parent = Program(id=1, run_id=1, code=code, parent_id=None, island=0, iteration=0, policy="", edit="",
                         scores={name: 0.5 for name in problem.objectives}, scalar=0.5, solved=False)
        request = MutationRequest(1, 0, parent, (), problem.description, problem.objectives)
        prompt = build_prompt(request, options, template, problem.prompt)
        if args.max_new_tokens:
            prompt = replace(prompt, max_new_tokens=args.max_new_tokens, stop=() if args.no_stop else prompt.stop)
        return prompt

    def check(seed: int, completion: Completion) -> int:
        return mutations(parent_code(seed), prompts(seed), completion, options)

    levels = [int(x) for x in args.concurrency.split(",")]
    started = time.monotonic()
    with open_policy(section, config.run.seed, max(levels)) as policy:
        ready = time.monotonic() - started
        try:
            await policy.generate(prompts(999_999), 999_999)  # warm-up: compilation, caches, first connection
            pre = await prefill(policy, prompts, args.requests)
            print(f"backend {section.backend} ({section.name}), problem {problem.name}, m={section.answers}, "
                  f"ready in {ready:.1f} s; prompt {pre['prompt_tokens']} tokens, prefill "
                  f"{pre['prefill_tokens_per_s']} tokens/s (one at a time); max_new_tokens {prompts(0).max_new_tokens}")
            print(json.dumps({"backend": section.backend, "kind": "prefill", **pre}))
            print(f"{'backend':>9} {'in flight':>9} {'tokens/s':>9} {'requests/min':>13} {'mutations/min':>14} "
                  f"{'median s':>9} {'tokens/req':>10}")
            for index, concurrency in enumerate(levels):
                row = await level(policy, prompts, concurrency, max(args.requests, concurrency),
                                  1000 * (index + 1), check)
                print(f"{section.backend:>9} {concurrency:>9} {row['tokens_per_s']:>9} {row['requests_per_min']:>13} "
                      f"{row['mutations_per_min']:>14} {row['median_latency_s']:>9} "
                      f"{row['mean_completion_tokens']:>10}", flush=True)
                print(json.dumps({"backend": section.backend, "kind": "decode", "answers": section.answers, **row}),
                      flush=True)
        finally:
            await policy.close()


def default_run(backend: str, iterations: int, problem: str) -> dict[str, float | str]:
    """One default `evolve run` (evolve.toml) on `backend` in a fresh store: wall time and iterations/min."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--config", str(ROOT / "evolve.toml"),
                   "--problem", problem, "--iterations", str(iterations), "--db", str(Path(folder) / "bench.db"),
                   "--set", f'policy.backend="{backend}"']
        started = time.monotonic()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ})
        wall = time.monotonic() - started
    if result.returncode != 0:
        return {"backend": backend, "error": (result.stderr or result.stdout).strip().splitlines()[-1:][0]}
    return {"backend": backend, "iterations": iterations, "wall_s": round(wall, 1),
            "iterations_per_min": round(60 * iterations / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="TOML config (default: built-in defaults)")
    parser.add_argument("--problem", default="symbolic_regression")
    parser.add_argument("--backends", default="llamacpp,hf", help="comma-separated backends, measured in order")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--requests", type=int, default=8, help="requests per level (at least the level)")
    parser.add_argument("--concurrency", default="1,4,16,32", help="levels of requests in flight")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="override the prompt's token budget")
    parser.add_argument("--no-stop", action="store_true", help="with --max-new-tokens: no stop strings")
    parser.add_argument("--runs", type=int, default=1, help="default evolve runs per backend (0: none)")
    parser.add_argument("--iterations", type=int, default=40, help="iterations of each default run")
    args = parser.parse_args()
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    for backend in backends:
        asyncio.run(bench_backend(args, backend))
    rates: dict[str, list[float]] = {}
    for _ in range(args.runs):
        for backend in backends:  # interleaved, so load drifts hit every backend alike
            row = default_run(backend, args.iterations, args.problem)
            print(json.dumps({"kind": "evolve_run", **row}), flush=True)
            if "iterations_per_min" in row:
                rates.setdefault(backend, []).append(float(row["iterations_per_min"]))
    if rates:
        medians = {backend: statistics.median(values) for backend, values in rates.items()}
        print("default evolve run, iterations/min (median): "
              + ", ".join(f"{backend} {value:.1f}" for backend, value in medians.items()))
        if len(medians) > 1:
            first, *others = backends
            for other in others:
                if first in medians and other in medians and medians[other]:
                    print(f"ratio {first}/{other}: {medians[first] / medians[other]:.1f}x")


if __name__ == "__main__":
    main()
