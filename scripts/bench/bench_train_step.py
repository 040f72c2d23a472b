"""Benchmark: the torch half of one training step (reference log-probs, policy forward and backward, AdamW) by part.

Builds the trainer's own step on the real model: `evolve train`'s prompts for the given HumanEval problems (import
them first: `evolve import humaneval --ids 0-3 --out /tmp/he4`), G completions of --tokens random tokens each (the
cost does not depend on which tokens; 128 of 128 is the capped worst case), advantages drawn at random, then
`trainer.optimise` as a step runs it, timed whole and by part (reference forward, policy forward, backward). Each
--variants entry TREE:DTYPE[:COMPUTE] (TREE a folder whose evolve/ the child imports: `.` for this tree, or a
`git worktree add ../base REV` of another commit; DTYPE the weights', COMPUTE the trainer's compute_dtype where
the tree has it) runs in a fresh process, in turn, --rounds times; medians are printed with every round in brackets.

    .venv/bin/python scripts/bench/bench_train_step.py --programs-dir /tmp/he4 --rounds 3 \
        --variants ../base:float32,../base:bfloat16,.:float32:float32,.:float32:auto,.:bfloat16:auto
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = "--child"


def child(args: argparse.Namespace) -> dict[str, float]:
    import numpy as np
    import torch

    from evolve.policies.cpu import cpu_threads
    from evolve.rl import loss as loss_module
    from evolve.rl.train_config import TrainConfig
    from evolve.rl.trainer import load_model, optimise, reference_scope, training_tasks
    from evolve.search.prompt_templates import load_template
    from evolve.search.prompts import PromptOptions

    compute = {"compute_dtype": args.compute} if args.compute else {}
    config = TrainConfig(algo=args.algo, problems=args.problems.split(","), programs_dir=args.programs_dir,
                         group_size=args.group_size, prompts_per_step=len(args.problems.split(",")),
                         max_new_tokens=args.tokens, dtype=args.dtype, out="/tmp/bench_train_step", **compute)
    torch.set_num_threads(cpu_threads(config.threads))
    torch.manual_seed(0)
    tokenizer, model, _ = load_model(config)
    tasks = asyncio.run(training_tasks(config, tokenizer, PromptOptions.from_policy(config.prompt_policy),
                                       load_template(config.template)))
    generator = torch.Generator().manual_seed(1)
    batches = []
    for task in tasks:
        prompt = torch.tensor(task.prompt_ids, dtype=torch.long)
        completion = torch.randint(0, tokenizer.vocab_size, (config.group_size, args.tokens), generator=generator)
        batches.append((prompt, completion, torch.ones(config.group_size, args.tokens)))
    rng = np.random.default_rng(2)
    advantages = [rng.standard_normal(config.group_size) for _ in batches]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    parts = {"reference": 0.0, "policy_forward": 0.0}
    original = loss_module.completion_logprobs

    def timed(*call_args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        result = original(*call_args, **kwargs)  # type: ignore[arg-type]
        parts["reference" if not torch.is_grad_enabled() else "policy_forward"] += time.perf_counter() - started
        return result

    import evolve.rl.trainer as trainer_module
    trainer_module.completion_logprobs = timed  # type: ignore[assignment]
    started = time.perf_counter()
    optimise(model, reference_scope(model, None), batches, advantages, config, optimizer)
    total = time.perf_counter() - started
    return {"total_s": total, "reference_s": parts["reference"], "policy_forward_s": parts["policy_forward"],
            "backward_and_adamw_s": total - parts["reference"] - parts["policy_forward"],
            "prompt_tokens": float(sum(len(t.prompt_ids) for t in tasks)), "threads": float(torch.get_num_threads())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs-dir", default="/tmp/he4")
    parser.add_argument("--problems", default="he_000,he_001,he_002,he_003")
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--group-size", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--variants", default=".:float32:float32,.:float32:auto")
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--compute", default="", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(CHILD, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    results: dict[str, list[dict[str, float]]] = {}
    for round_index in range(args.rounds):
        for variant in args.variants.split(","):
            tree, dtype, compute = (variant.split(":") + [""])[:3]
            command = [sys.executable, str(Path(__file__).resolve()), CHILD, "--dtype", dtype, "--compute", compute] + [
                f"--{name.replace('_', '-')}={getattr(args, name)}"
                for name in ("programs_dir", "problems", "algo", "group_size", "tokens")]
            environment = os.environ | {"PYTHONPATH": str(Path(tree).resolve())}
            line = subprocess.run(command, check=True, capture_output=True, text=True,
                                  env=environment).stdout.strip().splitlines()[-1]
            results.setdefault(variant, []).append(json.loads(line))
            print(f"round {round_index + 1} {variant}: {line}", flush=True)
    for variant, rows in results.items():
        cells = []
        for key in ("total_s", "reference_s", "policy_forward_s", "backward_and_adamw_s"):
            values = [row[key] for row in rows]
            cells.append(f"{key} {statistics.median(values):.1f} ({' '.join(f'{v:.1f}' for v in values)})")
        print(f"{variant}: " + "  ".join(cells))


if __name__ == "__main__":
    main()
