"""Replay the novelty filter offline over stored runs: how many answers it would have rejected before evaluation.

    .venv/bin/python scripts/bench/replay_novelty.py STORE.db [--run ID ...] [--threshold 0.95 0.9 0.8]

For each run, the answers that built a child (stored programs, failed evaluations and exact duplicates, each with
its code) are taken in write order; an answer is a rejection when the index of the programs stored before it
holds its structure or a near-duplicate at the threshold, and each stored program then joins the index, as the
live filter does at commit. The run's trajectory would have differed with the filter on (rejected answers are not
evaluated, so they would not have become parents); this counts what the filter says about the answers the run
actually produced. Printed per threshold: answers, exact duplicates already caught (same code), and the filter's
extra rejections among valid children and failed evaluations.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evolve.records import code_key  # noqa: E402
from evolve.search.novelty import NoveltyIndex, NoveltySettings  # noqa: E402
from evolve.store.program_store import ProgramStore  # noqa: E402


@dataclass(frozen=True)
class Replay:
    answers: int  # answers that built code (children, failed evaluations, exact duplicates)
    exact: int  # exact duplicates the run caught already (same code)
    rejected: Counter[str]  # the filter's extra rejections by the answer's stored outcome (child, eval_failed)
    same_structure: int  # of those, exact-structure ones


def replay(store: ProgramStore, run_id: int, threshold: float) -> Replay:
    index = NoveltyIndex(NoveltySettings(threshold=threshold))
    programs = {program.id: program for program in store.programs(run_id)}
    seen: set[str] = set()
    answers = exact = same = 0
    rejected: Counter[str] = Counter()
    for attempt in sorted(store.attempts(run_id), key=lambda a: (a.iteration, a.id)):
        program = programs.get(attempt.program_id) if attempt.program_id is not None else None
        code = program.code if program is not None else attempt.child_code
        if attempt.kind not in ("child", "eval_failed", "duplicate") or not code:
            continue
        if attempt.iteration == 0 and program is not None:  # the seed
            index.add(program.id, code)
            seen.add(code_key(code))
            continue
        answers += 1
        if attempt.kind == "duplicate" or code_key(code) in seen:
            exact += 1
            continue
        near = index.near_duplicate(code)
        if near is not None:
            rejected[attempt.kind] += 1
            same += near.same_structure
        if program is not None:
            index.add(program.id, code)
            seen.add(code_key(code))
    return Replay(answers, exact, rejected, same)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store")
    parser.add_argument("--run", type=int, nargs="*", default=None, help="run ids (default: every run)")
    parser.add_argument("--threshold", type=float, nargs="*", default=[0.95, 0.9, 0.8])
    args = parser.parse_args(argv)
    store = ProgramStore(args.store, mode="read")
    runs = args.run or [run.id for run in store.list_runs()]
    print(f"{args.store}: {len(runs)} runs")
    print("threshold  answers  exact dup  rejected (valid children / failed evals)  same structure")
    for threshold in args.threshold:
        total = [replay(store, run_id, threshold) for run_id in runs]
        answers = sum(r.answers for r in total)
        exact = sum(r.exact for r in total)
        valid = sum(r.rejected["child"] for r in total)
        failed = sum(r.rejected["eval_failed"] for r in total)
        same = sum(r.same_structure for r in total)
        print(f"{threshold:9.2f}  {answers:7d}  {exact:9d}  {valid + failed:8d} ({valid} / {failed})"
              f"{'':22s}{same:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
