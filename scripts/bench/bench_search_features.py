"""Benchmark: the search features (policy ensemble with a bandit, novelty filter, cascade evaluation, prompt
evolution) all on against all off, with the default model, on symbolic_regression and one imported HumanEval task.

Arms (--arms, comma-separated; default all-on,all-off):
  all-off           one SmolLM2 policy (m = 1 answer per call); no novelty filter, no cascade (a problem's stages
                    are dropped), the template's own prompt
  all-on            [[policies]] m1 (1 answer per call) and m3 (3 answers per call), ensemble.choice = "bandit" (UCB1),
                    novelty.enabled, the problem's cascade where it declares one, prompt_evolution.enabled
  ensemble, novelty, cascade, prompt_evolution
                    all-off with that one feature on
Every (problem, arm, seed) is one real run (the real Controller, hf backend, warm evaluators, a SQLite store).
Per run: valid-child share (children / answers), duplicate share (duplicates, novelty rejections included, /
answers), evaluations saved (novelty rejections + children a cascade stopped, / evaluations run + saved), and the
best scalar at equal evaluations: for each (problem, seed), the best scalar each arm had reached when it had spent
as many evaluations as the arm that spent the fewest. Each figure is a mean over seeds with its 95 % interval
(report/stats.mean_interval: distribution-free, at least nominal coverage at any n; shares and scores in [0, 1]).

    .venv/bin/python scripts/bench/bench_search_features.py                # 3 seeds x 60 iterations (idle machine)
    .venv/bin/python scripts/bench/bench_search_features.py --seeds 1 --iterations 10 --humaneval-id 0
    .venv/bin/python scripts/bench/bench_search_features.py --device cuda \
        --arms all-on,all-off,ensemble,novelty,prompt_evolution

Writes every run to --db (default: a temporary folder) and the table, as JSON too, to --json when given. With
--runs FILE each finished run's figures are appended to FILE (JSON lines) as it ends, and a (problem, arm, seed)
already there is not run again: a killed benchmark resumes, and arms run in separate invocations share one table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evolve.config import RunConfig, parse_config  # noqa: E402
from evolve.engine.controller import Controller  # noqa: E402
from evolve.engine.run_driver import new_run  # noqa: E402
from evolve.policies.base import Policy  # noqa: E402
from evolve.policies.factory import open_policies  # noqa: E402
from evolve.problems.humaneval import import_humaneval  # noqa: E402
from evolve.problems.problem import Problem, load_problem  # noqa: E402
from evolve.report.cascade_savings import cascade_savings, novelty_rejections  # noqa: E402
from evolve.report.stats import Interval, clopper_pearson, mean_interval  # noqa: E402
from evolve.store.program_store import ProgramStore  # noqa: E402

FEATURES = ("ensemble", "novelty", "cascade", "prompt_evolution")
ARMS: dict[str, frozenset[str]] = {"all-off": frozenset(), "all-on": frozenset(FEATURES),
                                   **{feature: frozenset({feature}) for feature in FEATURES}}


@dataclass(frozen=True)
class RunFigures:
    problem: str
    arm: str
    seed: int
    answers: int
    children: int
    duplicates: int
    evaluations: int
    saved: int  # novelty rejections + cascade stops
    curve: tuple[tuple[int, float], ...]  # (evaluations so far, best scalar so far) after each committed iteration
    wall_s: float

    def best_at(self, evaluations: int) -> float:
        return max((best for spent, best in self.curve if spent <= evaluations), default=self.curve[0][1])


def policy_sections(device: str, max_new_tokens: int) -> dict[str, dict[str, Any]]:
    common = {"backend": "hf", "device": device, "max_new_tokens": max_new_tokens}
    return {"m1": {**common, "name": "smollm2-m1", "answers": 1},
            "m3": {**common, "name": "smollm2-m3", "answers": 3}}


def arm_config(arm: str, problem: str, programs_dir: Path, seed: int, args: argparse.Namespace) -> RunConfig:
    features = ARMS[arm]
    sections = policy_sections(args.device, args.max_new_tokens)
    data: dict[str, Any] = {
        "run": {"problem": problem, "programs_dir": str(programs_dir), "iterations": args.iterations, "seed": seed,
                "db": args.db, "concurrency": args.concurrency, "eval_workers": 2,
                "name": f"{problem}-{arm}-s{seed}"},
        "novelty": {"enabled": "novelty" in features},
        "prompt_evolution": {"enabled": "prompt_evolution" in features},
    }
    if "ensemble" in features:
        data["policies"] = [sections["m1"], sections["m3"]]
        data["ensemble"] = {"choice": "bandit", "bandit": "ucb1"}
    else:
        data["policy"] = sections["m1"]
    return parse_config(data, f"<arm {arm}>")


def figures(store: ProgramStore, run_id: int, problem: str, arm: str, seed: int, wall_s: float) -> RunFigures:
    totals = store.attempt_totals(run_id)
    outcomes = totals.outcomes
    answers = sum(count for kind, count in outcomes.items() if kind != "policy_error")
    spent_by_iteration = {cost.iteration: cost.evaluations for cost in store.iteration_costs(run_id)}
    seed_program = min(store.programs(run_id), key=lambda program: program.id)
    best, spent = seed_program.scalar, 0
    curve = [(0, best)]
    for choice in store.iteration_choices(run_id):  # commit order
        spent += spent_by_iteration.get(choice.iteration, 0)
        if choice.best_scalar is not None:
            best = max(best, choice.best_scalar)
        curve.append((spent, best))
    cascade = cascade_savings(store, run_id)
    saved = novelty_rejections(store.failure_counts(run_id)) + (cascade.stopped if cascade is not None else 0)
    return RunFigures(problem, arm, seed, answers, outcomes.get("child", 0), outcomes.get("duplicate", 0), spent,
                      saved, tuple(curve), wall_s)


async def run_one(config: RunConfig, problem: Problem, store: ProgramStore, backends: Mapping[str, Policy]) -> int:
    run_id = new_run(store, config)
    with store.driving(run_id):
        await Controller(config, problem, store, backends, run_id).run()
    store.set_run_status(run_id, "finished")
    return run_id


def load_runs(path: str) -> list[RunFigures]:
    if not path or not Path(path).exists():
        return []
    runs = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            fields = json.loads(line)
            fields["curve"] = tuple(tuple(point) for point in fields["curve"])
            runs.append(RunFigures(**fields))
    return runs


def append_run(path: str, run: RunFigures) -> None:
    if path:
        with open(path, "a") as runs_file:
            runs_file.write(json.dumps(dataclasses.asdict(run)) + "\n")


async def bench(args: argparse.Namespace, problems: dict[str, Path]) -> list[RunFigures]:
    sections = policy_sections(args.device, args.max_new_tokens)
    store = ProgramStore(args.db)
    results = load_runs(args.runs)
    done = {(r.problem, r.arm, r.seed) for r in results}
    base = parse_config({"policies": [sections["m1"], sections["m3"]]})
    with open_policies(base.ensemble_policies()) as backends:  # each model loaded once, shared by every run
        try:
            for name, programs_dir in problems.items():
                loaded = load_problem(name, programs_dir)
                for seed in range(args.seeds):
                    for arm in args.arms:
                        if (name, arm, seed) in done:
                            continue
                        config = arm_config(arm, name, programs_dir, seed, args)
                        problem = loaded if "cascade" in ARMS[arm] else dataclasses.replace(loaded, cascade=())
                        started = time.monotonic()
                        run_id = await run_one(config, problem, store, backends)
                        found = figures(store, run_id, name, arm, seed, time.monotonic() - started)
                        results.append(found)
                        append_run(args.runs, found)
                        print(f"  {name} {arm} seed {seed}: {found.children}/{found.answers} valid, "
                              f"{found.duplicates} duplicates, {found.evaluations} evaluations, {found.saved} saved, "
                              f"best {found.curve[-1][1]:.4f} ({found.wall_s:.0f} s)", flush=True)
        finally:
            for backend in backends.values():
                await backend.close()
    return results


def best_vs_off(mine: list[RunFigures], runs: list[RunFigures], equal: dict[int, int]) -> Interval | None:
    """The paired difference, over seeds, of this arm's best at equal evaluations minus all-off's (scores in [0, 1],
    so differences in [-1, 1]); None for all-off itself or when no seed has both."""
    off = {r.seed: r for r in runs if r.arm == "all-off"}
    differences = [r.best_at(equal[r.seed]) - off[r.seed].best_at(equal[r.seed]) for r in mine
                   if r.arm != "all-off" and r.seed in off]
    return mean_interval(np.array(differences), value_range=(-1.0, 1.0)) if differences else None


def pooled(part: int, whole: int) -> Interval:
    """part / whole over every answer of the arm, with its Clopper-Pearson interval: tighter than the per-seed
    interval, but it treats the answers as independent, which answers of one run are not."""
    low, high = clopper_pearson(part, whole) if whole else (0.0, 1.0)
    return Interval(share(part, whole), low, high, whole, 0)


def share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def table(results: list[RunFigures], arms: list[str]) -> list[dict[str, Any]]:
    """One row per (problem, arm): each figure's mean over seeds with its interval."""
    rows = []
    for problem in dict.fromkeys(r.problem for r in results):
        runs = [r for r in results if r.problem == problem]
        seeds = sorted({r.seed for r in runs})
        equal = {seed: min(r.evaluations for r in runs if r.seed == seed) for seed in seeds}
        for arm in arms:
            mine = [r for r in runs if r.arm == arm]
            if not mine:
                continue
            rows.append({
                "problem": problem, "arm": arm, "seeds": len(mine),
                "valid_share": mean_interval(np.array([share(r.children, r.answers) for r in mine])),
                "duplicate_share": mean_interval(np.array([share(r.duplicates, r.answers) for r in mine])),
                "valid_pooled": pooled(sum(r.children for r in mine), sum(r.answers for r in mine)),
                "duplicate_pooled": pooled(sum(r.duplicates for r in mine), sum(r.answers for r in mine)),
                "saved_share": mean_interval(np.array([share(r.saved, r.evaluations + r.saved) for r in mine])),
                "evaluations": float(np.mean([r.evaluations for r in mine])),
                "equal_evaluations": float(np.mean([equal[r.seed] for r in mine])),
                "best_at_equal": mean_interval(np.array([r.best_at(equal[r.seed]) for r in mine])),
                "best_vs_off": best_vs_off(mine, runs, equal),
                "best_final": float(np.mean([r.curve[-1][1] for r in mine])),
                "wall_s": float(np.mean([r.wall_s for r in mine])),
            })
    return rows


def shown(interval: Interval, digits: int = 2, percent: bool = False) -> str:
    scale, unit = (100, " %") if percent else (1, "")
    flag = " (!)" if interval.out_of_range else ""
    return (f"{interval.estimate * scale:.{digits}f}{unit} [{interval.low * scale:.{digits}f}, "
            f"{interval.high * scale:.{digits}f}]{flag}")


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| problem | arm | seeds | valid-child share | pooled over answers | duplicates | pooled over answers "
             "| evaluations saved | evaluations (equal) "
             "| best at equal evaluations | minus all-off's | best at the end |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['problem']} | {row['arm']} | {row['seeds']} | {shown(row['valid_share'], 0, True)} | "
                     f"{shown(row['valid_pooled'], 0, True)} | {shown(row['duplicate_share'], 0, True)} | "
                     f"{shown(row['duplicate_pooled'], 0, True)} | {shown(row['saved_share'], 0, True)} | "
                     f"{row['evaluations']:.0f} ({row['equal_evaluations']:.0f}) | "
                     f"{shown(row['best_at_equal'], 4)} | "
                     f"{shown(row['best_vs_off'], 4) if row['best_vs_off'] is not None else '-'} | "
                     f"{row['best_final']:.4f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--arms", default="all-on,all-off", help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--humaneval-id", type=int, default=0, help="the HumanEval task imported (-1: none)")
    parser.add_argument("--no-symbolic-regression", action="store_true")
    parser.add_argument("--device", default="cpu", help="hf device: cpu or cuda")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--db", default="", help="SQLite file for the runs (default: in a temporary folder)")
    parser.add_argument("--json", default="", help="also write the table and every run's figures here")
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs in --runs; run nothing")
    parser.add_argument("--runs", default="", help="JSON lines: each run's figures appended as it ends; runs already "
                                                   "there are skipped (resume, or arms in separate invocations)")
    args = parser.parse_args(argv)
    args.arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    unknown = [arm for arm in args.arms if arm not in ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    return args


def write_table(args: argparse.Namespace, results: list[RunFigures]) -> None:
    rows = table(results, [arm for arm in ARMS if arm in args.arms or any(r.arm == arm for r in results)])
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [{key: dataclasses.asdict(value) if isinstance(
            value, Interval) else value for key, value in row.items()} for row in rows],
            "runs": [dataclasses.asdict(r) for r in results]}, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table_only:
        if not args.runs or not Path(args.runs).exists():
            print("--table-only needs --runs FILE with the runs' figures", file=sys.stderr)
            return 2
        write_table(args, load_runs(args.runs))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-search-") as scratch:
        args.db = args.db or str(Path(scratch) / "bench.db")
        problems: dict[str, Path] = {}
        if not args.no_symbolic_regression:
            problems["symbolic_regression"] = ROOT / "programs"
        if args.humaneval_id >= 0:
            (imported,) = import_humaneval(Path(scratch) / "humaneval", ids=[args.humaneval_id])
            problems[imported.name] = imported.folder.parent
        print(f"{len(problems)} problems x {len(args.arms)} arms x {args.seeds} seeds x {args.iterations} "
              f"iterations, device {args.device}", flush=True)
        write_table(args, asyncio.run(bench(args, problems)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
