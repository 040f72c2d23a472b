"""Benchmark: resume and reports on a 100,000-program store, time and peak memory, each in a fresh process.

Builds a store of N programs (default 100,000) with bulk SQL: code of 0.5-2 KB (1 KB on average), a score vector of
the default problem's objectives drifting upwards with noise, three islands, a parent per program, and for every
iteration the policy call that made it (a ~1 KB prompt, its completion) and its outcome rows. Then, each in its
own process and 3 times (medians printed):

  resume    a resumed run's state rebuild: the Controller's selection state, seen-code set and stats from the store
  show      `evolve show RUN --json`
  lineage   `evolve lineage RUN` (the first solved program's, else the best's ancestry)
  export    `evolve export RUN -o /dev/null`

Peak memory is the process's maximum resident set (wait4's ru_maxrss), so it includes the interpreter and
imports; `import evolve.cli.main, evolve.engine.controller` alone is printed as the floor.

    .venv/bin/python scripts/bench/bench_resume.py [--programs 100000] [--db /tmp/bench_resume.db] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPEATS = 3
ISLANDS = 3


def create_run(db: Path, iterations: int) -> tuple[int, tuple[str, ...], str]:
    """The run row through the store itself (config, problem); returns (run id, objectives, seed code)."""
    from evolve.config import RunConfig
    from evolve.problems.problem import load_problem
    from evolve.store.program_store import ProgramStore

    config = RunConfig.model_validate({"run": {"iterations": iterations, "db": str(db)}})
    problem = load_problem(config.run.problem, ROOT / "programs")
    store = ProgramStore(str(db))
    run_id = store.create_run("bench", problem.name, config.policy.name, 0, config.model_dump_json(), iterations)
    store.close()
    return run_id, problem.objectives, problem.initial_code


def code_of(index: int, seed_code: str, rng: random.Random) -> str:
    """A program of 0.5-2 KB: the seed plus helper functions, distinct per index."""
    lines = [seed_code.rstrip("\n"), ""]
    for helper in range(rng.randint(4, 14)):
        lines += [f"def helper_{helper}_{index}(x):", f"    # step {helper} of candidate {index}",
                  f"    return x * {rng.random():.6f} + {helper} - {index % 97}", ""]
    return "\n".join(lines) + "\n"


def build(db: Path, count: int) -> int:
    """A store holding one run with `count` programs (seed included); returns the run id."""
    run_id, objectives, seed_code = create_run(db, count + 10)
    rng = random.Random(0)
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ")
    connection = sqlite3.connect(db)
    has_key = "code_key" in {row[1] for row in connection.execute("PRAGMA table_info(programs)")}
    if has_key:
        from evolve.records import code_key
    programs, scores, attempts = [], [], []
    attempt_id = 0
    for program_id in range(1, count + 1):
        iteration = program_id - 1
        code = seed_code if iteration == 0 else code_of(program_id, seed_code, rng)
        trend = min(1.0, iteration / count)
        vector = {name: round(min(1.0, max(0.0, trend * 0.9 + rng.gauss(0, 0.15))), 6) for name in objectives}
        scalar = sum(vector.values()) / len(vector)
        parent = None if iteration == 0 else rng.randint(max(1, program_id - 300), program_id - 1)
        call_id = None
        if iteration > 0:
            attempt_id += 1
            call_id = attempt_id
            prompt = f"<system>\nImprove the program.\n<user>\n{code_of(parent or 1, seed_code, rng)}\n"
            completion = f"```python\n{code[-600:]}\n```"
            attempts.append((call_id, run_id, iteration, "policy_call", "stop", "bench", prompt, completion, None,
                             None, None, parent, 0.05, 900, 300, iteration * 0.01, now))
            if iteration % 8 == 0:
                attempt_id += 1
                attempts.append((attempt_id, run_id, iteration, "duplicate", "same code as an earlier program",
                                 "bench", None, None, code, None, call_id, parent, 0.0, 0, 0, iteration * 0.01, now))
        attempt_id += 1
        attempts.append((attempt_id, run_id, iteration, "child", None, "bench" if iteration else "", None,
                         completion if iteration else None, None, program_id, call_id, parent, 0.0, 0, 0,
                         iteration * 0.01, now))
        row = (program_id, run_id, parent, iteration % ISLANDS, iteration, "bench" if iteration else "", code,
               completion if iteration else "", call_id, now)
        programs.append(row + ((code_key(code), len(code)) if has_key else ()))
        scores.append((program_id, run_id, json.dumps(vector), scalar, scalar >= 0.999, "{}"))
    key_column, key_mark = (", code_key, code_length", ", ?, ?") if has_key else ("", "")
    with connection:
        connection.executemany(
            "INSERT INTO attempts (id, run_id, iteration, kind, reason, policy, prompt, completion, child_code, "
            "program_id, call_id, parent_id, latency_s, prompt_tokens, completion_tokens, run_elapsed_s, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", attempts)
        connection.executemany(
            "INSERT INTO programs (id, run_id, parent_id, island, iteration, policy, code, edit, completion_id, "
            f"created_at{key_column}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?{key_mark})", programs)
        connection.executemany("INSERT INTO scores (program_id, run_id, vector_json, scalar, solved, artifacts_json) "
                               "VALUES (?, ?, ?, ?, ?, ?)", scores)
    connection.close()
    return run_id


def rebuild(db: Path, run_id: int) -> None:
    """In this process: a resume's state rebuild, timed; prints its seconds."""
    from evolve.engine.controller import Controller
    from evolve.engine.driving import resumed_config
    from evolve.problems.problem import load_problem
    from evolve.store.program_store import ProgramStore

    started, cpu_started = time.perf_counter(), time.process_time()
    store = ProgramStore(str(db), mode="existing")
    config = resumed_config(store, run_id, str(db))
    problem = load_problem(config.run.problem, ROOT / "programs")
    controller = Controller(config, problem, store, policy=None, run_id=run_id)  # type: ignore[arg-type]
    if hasattr(controller, "restore"):
        controller.restore()
    else:  # the code before resume streamed from the store
        for program in store.programs(run_id):
            controller._admit(program)
    store.completed_iterations(run_id)
    print(json.dumps({"rebuild_s": time.perf_counter() - started, "rebuild_cpu_s": time.process_time() - cpu_started,
                      "island_sizes": controller.selector.island_sizes()}))


def measured(command: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MB, stdout) of one fresh process (spawned here: wait4 gives its rusage)."""
    started = time.perf_counter()
    pid = os.posix_spawn(command[0], command, {**os.environ, "PYTHONPATH": str(ROOT)},
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, "/tmp/bench_resume.out",
                                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    out = Path("/tmp/bench_resume.out").read_text()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(command)} failed with status {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=100_000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/bench_resume.db"))
    parser.add_argument("--keep", action="store_true", help="reuse --db if it exists (built by this code version)")
    parser.add_argument("--rebuild", type=int, metavar="RUN", help=argparse.SUPPRESS)  # the child of 'resume'
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)  # the child that builds the store
    args = parser.parse_args()
    if args.rebuild is not None:
        rebuild(args.db, args.rebuild)
        return
    if args.build:
        build(args.db, args.programs)
        return
    python, cli = sys.executable, [sys.executable, "-m", "evolve.cli.main"]
    if not (args.keep and args.db.exists()):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{args.db}{suffix}").unlink(missing_ok=True)
        # in a child process: a child's peak RSS starts from its parent's (Linux keeps it across exec), so this one
        # stays small
        started = time.perf_counter()
        subprocess.run([python, str(Path(__file__).resolve()), "--build", "--db", str(args.db),
                        "--programs", str(args.programs)], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        print(f"built {args.programs:,} programs in {time.perf_counter() - started:.1f} s "
              f"({args.db.stat().st_size / 2**20:.0f} MB)")
    cases = {
        "import only": [python, "-c", "import evolve.cli.main, evolve.engine.controller"],
        "resume": [python, str(Path(__file__).resolve()), "--db", str(args.db), "--rebuild", "1"],
        "show": [*cli, "show", "1", "--json", "--db", str(args.db)],
        "lineage": [*cli, "lineage", "1", "--db", str(args.db)],
        "export": [*cli, "export", "1", "-o", "/dev/null", "--db", str(args.db)],
    }
    print(f"{'case':<12} {'wall s':>8} {'CPU s':>7} {'rebuild s':>10} {'rebuild CPU s':>14} {'peak RSS MB':>12}"
          f"   (medians of {REPEATS}, fresh processes)")
    for name, command in cases.items():
        runs = [measured(command) for _ in range(REPEATS)]
        inner = [json.loads(out.splitlines()[-1]) for *_, out in runs] if name == "resume" else []
        rebuild_s = f"{statistics.median(r['rebuild_s'] for r in inner):>10.2f}" if inner else f"{'':>10}"
        rebuild_cpu = f"{statistics.median(r['rebuild_cpu_s'] for r in inner):>14.2f}" if inner else f"{'':>14}"
        print(f"{name:<12} {statistics.median(r[0] for r in runs):>8.2f} {statistics.median(r[1] for r in runs):>7.2f} "
              f"{rebuild_s} {rebuild_cpu} {statistics.median(r[2] for r in runs):>12.0f}", flush=True)


if __name__ == "__main__":
    main()
