"""Kill -9 loop: a real `evolve run` against a local fake OpenAI server, SIGKILLed at random instants and resumed.

The run (fizzbuzz, answers from a canned server on loopback) is started, killed with SIGKILL (its whole process
group, evaluators included) once a random 0-4 further iterations are committed plus a random 0-0.3 s (kills keyed to
progress land mid-run however fast the engine is; a run that finishes before all N landed is a failure), resumed
with `evolve run --resume`, killed again, ... N times, then left to finish. The store must then hold: every
iteration of the budget exactly once (one policy call each, one outcome set each), no program row twice, a clean
`PRAGMA integrity_check` and foreign_key_check, every program's parent present, every program scored, status
"finished". A resume refused because the killed holder's lease has not expired yet (EVOLVE_LEASE_S, set short here)
is retried after a pause.

    .venv/bin/python scripts/dev/kill_loop.py --kills 20

Exit status 0 when every check holds, 1 (each failed check on a line) otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' stand-in policy server and canned fizzbuzz rewrites

from scripted_policy_server import Answer, ScriptedPolicyServer  # noqa: E402
from serve_run import FIZZBUZZ  # noqa: E402

RUN_TIMEOUT_S = 300.0  # the last, unkilled resume must finish the budget within this
REFUSED_MARKERS = ("lease", "being driven", "driven by")  # how a resume refused for a live lease reads


# ---------------------------------------------------------------- the fake OpenAI server


def fake_answers(seed: int) -> Answer:
    """Canned completions for ScriptedPolicyServer: mostly distinct valid rewrites of fizzbuzz, some prose with no
    code; each after a random pause, so that kills land mid-request as well as mid-evaluation (the server continues
    a prefill, as a real one does)."""

    def answer(number: int, body: dict[str, Any]) -> str:
        draw = random.Random(seed * 1_000_003 + number)
        if draw.random() < 0.15:
            time.sleep(draw.uniform(0.01, 0.2))
            return "I would rewrite the function to be faster, but here is no code."
        code = FIZZBUZZ.format(number=number, divisor=draw.choice([5, 5, 5, 7, 4]))
        time.sleep(draw.uniform(0.01, 0.3))
        return code

    return answer


# ---------------------------------------------------------------- driving and killing the run


@dataclass(frozen=True)
class Outcome:
    """How one start of `evolve run` ended: killed by us, or exited on its own with this code and output."""

    killed: bool
    returncode: int
    output: str
    iterations_before: int
    iterations_after: int


def write_config(folder: Path, url: str, iterations: int, seed: int) -> Path:
    config = folder / "kill_loop.toml"
    config.write_text(f"""[run]
problem = "fizzbuzz"
iterations = {iterations}
seed = {seed}
db = "{folder / 'kill_loop.db'}"
programs_dir = "{ROOT / 'programs'}"
concurrency = 4
eval_workers = 2

[policy]
name = "fake"
backend = "openai"
url = "{url}"
model = "fake"
edit_format = "rewrite"
answers = 1
""")
    return config


def completed_iterations(db: Path) -> int:
    """Iterations with an outcome in the store, read straight from the SQLite file (0 before it exists)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as connection:
            row = connection.execute("SELECT COUNT(DISTINCT iteration) FROM attempts "
                                     "WHERE kind != 'policy_call' AND iteration > 0").fetchone()
        return int(row[0])
    except sqlite3.Error:
        return 0  # tables not created yet


def has_run(db: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as connection:
            return connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def start_once(command: list[str], folder: Path, environment: dict[str, str], kill: tuple[int, float] | None,
               db: Path) -> Outcome:
    """One `evolve run`, SIGKILLed (with its process group) once the store holds `kill[0]` more committed iterations
    than at its start, plus `kill[1]` seconds (an instant anywhere in the iterations then under way), unless it ends
    first; with `kill` None it is left to finish. Kills keyed to progress, not to the clock, land mid-run however
    fast the machine and the engine are."""
    before = completed_iterations(db)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed = False
    with open(folder / "output.log", "w+") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        while process.poll() is None and time.monotonic() < deadline:
            if kill is not None and completed_iterations(db) >= before + kill[0]:
                time.sleep(kill[1])
                killed = process.poll() is None
                break
            time.sleep(0.02)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            killed = kill is not None
        process.wait()
        log.seek(0)
        output = log.read()
    if not killed and process.returncode < 0:
        raise SystemExit(f"the run did not finish within {RUN_TIMEOUT_S:g} s:\n{output[-2000:]}")
    return Outcome(killed, process.returncode, output, before, completed_iterations(db))


def refused_for_lease(outcome: Outcome) -> bool:
    return not outcome.killed and outcome.returncode != 0 and any(m in outcome.output.lower() for m in REFUSED_MARKERS)


# ---------------------------------------------------------------- the checks


def check_store(db: Path, budget: int) -> tuple[dict[str, int], list[str]]:
    """(final counts, failed checks) of run 1 in the store."""
    failures: list[str] = []
    with sqlite3.connect(db) as connection:
        def one(sql: str) -> int:
            return int(connection.execute(sql).fetchone()[0])

        def rows(sql: str) -> list[tuple[object, ...]]:
            return connection.execute(sql).fetchall()

        integrity = [row[0] for row in rows("PRAGMA integrity_check")]
        if integrity != ["ok"]:
            failures.append(f"integrity_check: {integrity[:5]}")
        broken_keys = rows("PRAGMA foreign_key_check")
        if broken_keys:
            failures.append(f"foreign_key_check: {broken_keys[:5]}")
        status, target = rows("SELECT status, iterations_target FROM runs WHERE id = 1")[0]
        if status != "finished" or target != budget:
            failures.append(f"run 1 is {status!r} with budget {target}, not 'finished' with {budget}")
        calls = dict(rows("SELECT iteration, COUNT(*) FROM attempts WHERE run_id = 1 AND kind = 'policy_call' "
                          "AND iteration > 0 GROUP BY iteration"))
        done = {row[0] for row in rows("SELECT DISTINCT iteration FROM attempts WHERE run_id = 1 "
                                       "AND kind != 'policy_call' AND iteration > 0")}
        if done != set(range(1, budget + 1)):
            failures.append(f"iterations with an outcome: {len(done)}, not exactly 1..{budget} "
                            f"(missing {sorted(set(range(1, budget + 1)) - done)[:10]}, "
                            f"beyond {sorted(done - set(range(1, budget + 1)))[:10]})")
        twice = {iteration: count for iteration, count in calls.items() if count > 1}
        if twice or set(calls) - set(range(1, budget + 1)):
            failures.append(f"iterations stored twice (policy calls per iteration): {dict(list(twice.items())[:10])}")
        duplicated = rows("SELECT COUNT(*) FROM programs WHERE run_id = 1 GROUP BY code HAVING COUNT(*) > 1")
        if duplicated:
            failures.append(f"{len(duplicated)} program codes stored more than once")
        per_iteration = rows("SELECT iteration, COUNT(*) FROM programs WHERE run_id = 1 GROUP BY iteration "
                             "HAVING COUNT(*) > 1")
        if per_iteration:
            failures.append(f"iterations with more than one program (answers = 1): {per_iteration[:10]}")
        orphans = one("SELECT COUNT(*) FROM programs p LEFT JOIN programs q ON q.id = p.parent_id "
                      "WHERE p.parent_id IS NOT NULL AND q.id IS NULL")
        if orphans:
            failures.append(f"{orphans} programs whose parent is not in the store")
        unscored = one("SELECT COUNT(*) FROM programs p LEFT JOIN scores s ON s.program_id = p.id "
                       "WHERE s.program_id IS NULL")
        if unscored:
            failures.append(f"{unscored} programs without a score row")
        counts = {"iterations": len(done), "policy_calls": sum(calls.values()),
                  "programs": one("SELECT COUNT(*) FROM programs WHERE run_id = 1"),
                  "attempts": one("SELECT COUNT(*) FROM attempts WHERE run_id = 1")}
    return counts, failures


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs before the run may finish (N)")
    parser.add_argument("--iterations", type=int, default=0, help="budget (default: 20 + 16 per kill)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill instants, the answers and the run")
    parser.add_argument("--max-iterations-per-kill", type=int, default=4,
                        help="a kill lands once 0..this many more iterations are committed after a (re)start ...")
    parser.add_argument("--max-delay", type=float, default=0.3, help="... plus 0..this many seconds")
    parser.add_argument("--lease-s", type=float, default=2.0, help="EVOLVE_LEASE_S for the run (short: a killed "
                        "holder's lease expires fast)")
    parser.add_argument("--keep", type=Path, default=None, help="folder for the store and logs (default: temporary)")
    args = parser.parse_args(argv)
    if args.kills < 0 or args.iterations < 0 or args.max_iterations_per_kill < 0 or args.max_delay < 0:
        parser.error("--kills, --iterations, --max-iterations-per-kill and --max-delay must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget = args.iterations or 20 + 16 * args.kills
    rng = random.Random(args.seed)
    started = time.monotonic()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="kill-loop-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "kill_loop.db"
    if db.exists():
        raise SystemExit(f"{db} exists: give --keep an empty folder")
    server = ScriptedPolicyServer(fake_answers(args.seed), model="fake", tokens=(100, 60))
    config = write_config(folder, server.url, budget, args.seed)
    environment = {**os.environ, "EVOLVE_LEASE_S": f"{args.lease_s:g}", "PYTHONUNBUFFERED": "1"}
    evolve = [sys.executable, "-m", "evolve.cli.main", "run", "--plain"]
    fresh, resume = [*evolve, "--config", str(config)], [*evolve, "--resume", "1", "--db", str(db)]
    landed = refused = 0
    progress: list[int] = []
    with server:
        while landed < args.kills:
            command = resume if has_run(db) else fresh
            kill = (rng.randint(0, args.max_iterations_per_kill), rng.uniform(0.0, args.max_delay))
            outcome = start_once(command, folder, environment, kill, db)
            if outcome.killed:
                landed += 1
                progress.append(outcome.iterations_after)
                print(f"kill {landed}/{args.kills}: iterations {outcome.iterations_before} -> "
                      f"{outcome.iterations_after}", flush=True)
            elif refused_for_lease(outcome):
                refused += 1
                time.sleep(args.lease_s / 2)
            elif outcome.returncode == 0:
                print(f"the run finished before kill {landed + 1} of {args.kills} landed: raise --iterations",
                      file=sys.stderr)
                return 1
            else:
                print(f"evolve run failed (exit {outcome.returncode}):\n{outcome.output[-3000:]}", file=sys.stderr)
                return 1
        while True:  # the last resume runs to the end
            outcome = start_once(resume if has_run(db) else fresh, folder, environment, None, db)
            if not refused_for_lease(outcome):
                break
            refused += 1
            time.sleep(args.lease_s / 2)
        if outcome.returncode != 0:
            print(f"the final resume failed (exit {outcome.returncode}):\n{outcome.output[-3000:]}", file=sys.stderr)
            return 1
        counts, failures = check_store(db, budget)
    wall_s = time.monotonic() - started
    print(f"kill loop: N = {args.kills}, kills landed {landed}, resumes refused for a live lease {refused}, "
          f"budget {budget}, wall {wall_s:.1f} s, policy requests served {len(server.requests)}")
    print(f"iterations committed at each kill: {progress}")
    print("final: " + ", ".join(f"{name} {value}" for name, value in counts.items()))
    for failure in failures:
        print(f"FAILED: {failure}")
    if not failures:
        print("every check holds: budget exact, no iteration twice, no duplicate program, integrity ok, "
              "every parent present, every program scored")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
