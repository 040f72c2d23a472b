"""Benchmark of a policy backend: tokens/s and mutations/min, one request alone vs the batch kept in flight.

    .venv/bin/python scripts/bench_backends.py                                  # hf, the embedded default
    .venv-vllm/bin/python scripts/bench_backends.py --set policy.backend=vllm   # vLLM in process
    .venv/bin/python scripts/bench_backends.py --set policy.backend=openai --set policy.url=http://HOST:PORT/v1

Any `--set` of `evolve run` works (policy.answers=3, policy.serve=true, ...). The prompts are the engine's own,
built from the problem's initial program; every completion goes through the real edit step, so "mutations" counts
answers that became a changed, parsing child (not yet evaluated). Each level of concurrency runs `--requests`
requests with distinct seeds, after one warm-up request. Prints one row per level and a JSON line per level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from evolve.cli.common import parse_setting
from evolve.config import load_config
from evolve.engine.offspring import offspring
from evolve.policies.base import Policy
from evolve.policies.factory import open_policy
from evolve.problems.problem import load_problem
from evolve.records import Completion, MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import Prompt, PromptOptions, build_prompt


def mutations(parent: str, prompt: Prompt, completion: Completion, options: PromptOptions) -> int:
    return sum(child.code is not None for child in offspring(parent, prompt.prefill + completion.text, options))


async def level(policy: Policy, prompt: Prompt, concurrency: int, requests: int, seed0: int,
                check: Callable[[Completion], int]) -> dict[str, float]:
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(seed: int) -> Completion:
        async with semaphore:
            started = time.monotonic()
            completion = await policy.generate(prompt, seed)
            latencies.append(time.monotonic() - started)
            return completion

    started = time.monotonic()
    completions = await asyncio.gather(*(one(seed0 + i) for i in range(requests)))
    wall = time.monotonic() - started
    tokens = sum(c.completion_tokens for c in completions)
    made = sum(check(c) for c in completions)
    return {"concurrency": concurrency, "requests": requests, "wall_s": round(wall, 2),
            "tokens_per_s": round(tokens / wall, 1), "requests_per_min": round(60 * requests / wall, 1),
            "mutations_per_min": round(60 * made / wall, 1), "median_latency_s": round(statistics.median(latencies), 2),
            "mean_completion_tokens": round(tokens / requests, 1)}


async def bench(args: argparse.Namespace) -> None:
    overrides: dict[str, object] = {"run.problem": args.problem}
    for item in args.set:
        overrides.update(parse_setting(item))
    config = load_config(args.config, overrides)
    section = config.policy
    problem = load_problem(config.run.problem, Path(config.run.programs_dir))
    parent = Program(id=1, run_id=1, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                     edit="", scores={name: 0.5 for name in problem.objectives}, scalar=0.5, solved=False)
    request = MutationRequest(1, 0, parent, (), problem.description, problem.objectives)
    options = PromptOptions.from_policy(section)
    prompt = build_prompt(request, options, load_template(section.template))

    def check(completion: Completion) -> int:
        return mutations(problem.initial_code, prompt, completion, options)

    levels = [int(x) for x in args.concurrency.split(",")]
    started = time.monotonic()
    with open_policy(section, config.run.seed, max(levels)) as policy:
        ready = time.monotonic() - started
        try:
            await policy.generate(prompt, 999_999)  # warm-up: compilation, caches, first connection
            print(f"backend {section.backend} ({section.name}), problem {problem.name}, m={section.answers}, "
                  f"ready in {ready:.1f} s; {args.requests} requests per level")
            print(f"{'in flight':>9} {'tokens/s':>9} {'requests/min':>13} {'mutations/min':>14} {'median s':>9}")
            for index, concurrency in enumerate(levels):
                row = await level(policy, prompt, concurrency, args.requests, 1000 * (index + 1), check)
                print(f"{concurrency:>9} {row['tokens_per_s']:>9} {row['requests_per_min']:>13} "
                      f"{row['mutations_per_min']:>14} {row['median_latency_s']:>9}")
                print(json.dumps({"backend": section.backend, "answers": section.answers, **row}))
        finally:
            await policy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="TOML config (default: built-in defaults)")
    parser.add_argument("--problem", default="symbolic_regression")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--requests", type=int, default=8, help="requests per level")
    parser.add_argument("--concurrency", default="1,8", help="levels of requests in flight")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
