"""Issue 60's calibration of the generated pool, run and read: its steps on the plan of generated_pool.py.

- `plan` writes experiments/generated/calibration/pool.txt (every problem the pilot evolves, in the order it runs)
  and one experiment file per piece (piece_01.toml ...), each a few hours of this machine with its own store, so a
  piece is committed once, packed, when it ends. The same command writes the same files (generated_pool.py: the
  pool, the pieces, their order, the growth).
- `order` prints the pieces' files in the order they run; `next` the first not finished (every problem's two cells
  ended), skipping those named by `--skip`, or exits 3 when none is left or `--target` problems are in band (the
  registered stop: no piece starts after that); `grow [--after PIECE]` applies the registered growth rule (after
  each finished 2ee piece from the third, once: if the projection is under the target, the pool grows by as many
  2ee pieces as the shortfall needs at 2ee's share so far, plus one; growth_checks.txt records every check);
  `count` the 2ee problems the pool needs imported (400, and 24 more per grown piece).
- `select` applies calibration_select.py's rule to every finished piece's store with the thresholds registered in
  experiments/generated/calibration/README.md and writes the lists there (`--study TEMPLATE OUT`: also a study
  file with the lists); it unpacks every packed store that holds more answers than the local one, and refuses
  before `--target` (200) problems are in band (the stop), below 200 (the lists would be topped up from outside
  the band) and while a begun piece has cells that have not ended; `table`
  prints the crack rates by level of the problems whose two cells have finished, as docs/generated_problems.md
  shows them; `enough` exits 0 once 200 are in band; `forecast` the hours of running left until then, from each
  level's answers per problem and in-band share so far and the pace; `spread` the share of train problems whose
  answers to the seed prompt differ in reward (issue 60's figure for training groups).

    .venv/bin/python scripts/study/generated_calibration.py plan
    .venv/bin/python scripts/study/generated_calibration.py select
    .venv/bin/python scripts/study/generated_calibration.py table
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from math import comb
from pathlib import Path

import store_pack
from calibration_select import Band, PilotCell, cells_by_task, in_band, read_pilot
from generated_pool import (
    FOLDER,
    GROWN_LEVEL,
    LEVELS,
    PIECE_SIZE,
    all_pieces,
    grow,
    growths,
    level_sizes,
    ordered_pieces,
    plan,
)

from evolve.records import code_key

BAND = ("0.1", "0.9")
LATE_CRACK = "43.9"  # 1 - (1 - h)^100 = 0.9 at h = 1/43.93: a mean first crack later than that is a rate under 0.9
NEAR_MISS = "0.8"  # the HumanEval study's: 10 of 12 tests passed in both cells
TEST_SIZE, TRAIN_SIZE = 150, 50  # README's changes: the stop at 200 in band, a test list of 150
GROUP = 8  # the paper's group size: the spread figure is for groups of this many answers
RULE = Band(float(BAND[0]), float(BAND[1]), float(LATE_CRACK), float(NEAR_MISS))
CHECKS = "growth_checks.txt"  # one line per growth check made: the piece after which, what it found

def finished_stores() -> list[Path]:
    """The stores of the pieces, in order, that exist unpacked here."""
    return [path.with_suffix(".db") for path in sorted(FOLDER.glob("piece_*.toml")) if path.with_suffix(".db").exists()]


def unfinished_begun_pieces(verdicts: dict[str, bool]) -> list[str]:
    """The pieces begun here (a store, or a packed one) with a problem whose two cells have not both ended: the
    lists wait for them (README: drawn once every begun piece has ended), since one more verdict moves the train
    list's spacing over the band."""
    done = finished_pieces(verdicts)
    return [piece_path(number).name for number in ordered_pieces() if number not in done
            and (piece_path(number).with_suffix(".db").exists() or piece_path(number).with_suffix(".db.xz").exists())]


def select(study: tuple[str, str] | None = None, target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """The registered rule on the finished pieces: the lists and selection.tsv; with `study` (template, out) also the
    study file from that template with the lists filled (issue 63's draft: experiments/generated/). Every packed
    store is first unpacked where it holds more answers than the local one (store_pack.unpack), so the lists rest on
    every piece as committed; refused below TEST_SIZE + TRAIN_SIZE in band (the lists would be topped up from outside
    the band) and while a begun piece has cells that have not ended."""
    if target < TEST_SIZE + TRAIN_SIZE:
        raise SystemExit(f"--target {target}: the lists need {TEST_SIZE + TRAIN_SIZE} problems in band ({TEST_SIZE} "
                         f"test, {TRAIN_SIZE} train); fewer would top them up from outside the band")
    for toml in sorted(FOLDER.glob("piece_*.toml")):
        if toml.with_suffix(".db.xz").exists():
            store_pack.unpack(toml.with_suffix(".db.xz"), toml.with_suffix(".db"))
    stores = finished_stores()
    if not stores:
        raise SystemExit(f"no piece store in {FOLDER}: bash scripts/study/generated_calibration.sh start")
    verdicts = judged()
    found = sum(verdicts.values())
    if found < target:  # before the stop the rule would top the lists up from outside the band
        raise SystemExit(f"{found} problems in band, fewer than the {target} the lists need: they "
                         "are drawn at the stop (generated_calibration.sh runs this step itself); `table`, `enough` "
                         "and `forecast` look at the pieces so far and write nothing")
    unfinished = unfinished_begun_pieces(verdicts)
    if unfinished:
        raise SystemExit(f"{', '.join(unfinished)}: begun, with cells that have not ended; the lists are drawn once "
                         "every begun piece has ended (bash scripts/study/generated_calibration.sh start finishes "
                         "them)")
    writes = ["--study-template", study[0], "--study", study[1]] if study else ["--no-study"]
    command = [sys.executable, "scripts/study/calibration_select.py", "--pilot-only", "--pilot", *map(str, stores),
               "--out", str(FOLDER / "in_band.txt"), "--band", *BAND, "--late-crack", LATE_CRACK,
               "--near-miss", NEAR_MISS, "--test-size", str(TEST_SIZE), "--train-size", str(TRAIN_SIZE),
               "--train-spans-band", *writes]
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


def projection(verdicts: dict[str, bool], pool_sizes: dict[str, int]) -> tuple[Fraction, str]:
    """The README's projection of the pool's problems in band: those in band so far plus, per level, its in-band
    share so far times its problems without a verdict (a level with none yet adds nothing); and a line per level.
    Exact (a Fraction), so that the growth rule's arithmetic has no float noise."""
    total, lines = Fraction(0), []
    for level, size in pool_sizes.items():
        done = [verdict for problem, verdict in verdicts.items() if level_of(problem) == level]
        share = Fraction(sum(done), len(done)) if done else Fraction(0)
        total += sum(done) + share * (size - len(done))
        lines.append(f"level {level}: {sum(done)} of {len(done)} in band ({float(share):.0%}), "
                     f"{size - len(done)} to run")
    return total, "; ".join(lines)


def judged() -> dict[str, bool]:
    """Each problem of the pieces' stores here whose cells have all finished: whether the rule puts it in band."""
    by_task = cells_by_task([cell for store in finished_stores() for cell in read_pilot(store)])
    return {task: bool(verdict) for task, group in by_task.items() if (verdict := in_band(group, RULE)) is not None}


def enough(target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """Exit 0 once the pieces run so far hold `target` problems in band (the registered stopping rule: the lists'
    200, README's changes), else 1. Prints the README's projection beside."""
    verdicts = judged()
    count = sum(verdicts.values())
    projected, lines = projection(verdicts, level_sizes())
    print(f"{count} problems in band so far; the pilot stops at {target}; the whole pool projects to "
          f"{float(projected):.0f} ({lines})")
    raise SystemExit(0 if count >= target else 1)


def piece_path(number: int) -> Path:
    return FOLDER / f"piece_{number:02d}.toml"


def order() -> None:
    """Print the pieces' experiment files in the order they run (grown pieces last)."""
    for number in ordered_pieces():
        print(piece_path(number))


def finished_pieces(verdicts: dict[str, bool]) -> set[int]:
    """The pieces every problem of which has a verdict (its two cells ended)."""
    return {number for number, problems in enumerate(all_pieces(), start=1)
            if all(problem.removeprefix("programs/") in verdicts for problem in problems)}


STOP = 3  # `next`'s exit status when no piece is left to start (any other failure is an error)


def next_piece(skip: set[str], target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """Print the first piece in run order that has not finished and is not in `skip`; exit STOP when none is left.
    Once `target` problems are in band (the registered stop: no piece starts after that) only a begun piece (one
    with a store: pieces run at once, and one may be under way, or stopped by a save, at the stop) is named."""
    verdicts = judged()
    stopped = sum(verdicts.values()) >= target
    done = finished_pieces(verdicts)
    for number in ordered_pieces():
        path = piece_path(number)
        if number not in done and str(path) not in skip and (not stopped or path.with_suffix(".db").exists()):
            print(path)
            return
    raise SystemExit(STOP)


def growth_pieces(projected: Fraction, share: Fraction, target: int) -> int:
    """The registered growth: as many pieces as the shortfall needs at 2ee's in-band share so far, plus one."""
    return int(-(-(target - projected) // (share * PIECE_SIZE[GROWN_LEVEL]))) + 1


def growth_check(number: int, verdicts: dict[str, bool], target: int) -> str:
    """The rule's check once piece `number` (a finished 2ee piece, the third or later) has ended: grows the pool when
    the projection is short; what it found, as a line."""
    projected, lines = projection(verdicts, level_sizes())
    if projected >= target:
        return f"the pool projects to {float(projected):.0f} in band ({lines}): no growth"
    judged_2ee = [v for problem, v in verdicts.items() if level_of(problem) == GROWN_LEVEL]
    share = Fraction(sum(judged_2ee), len(judged_2ee))
    if share == 0:
        return (f"the pool projects to {float(projected):.0f} and no 2ee problem is in band: growing 2ee cannot "
                "reach the target; a session must decide (README)")
    added = growth_pieces(projected, share, target)
    grow(added)
    return (f"the pool projected to {float(projected):.0f} in band ({lines}); grown by {added} pieces of "
            f"{PIECE_SIZE[GROWN_LEVEL]} 2ee problems (growth.txt)")


def checked_target(line: str) -> int:
    """The target a line of growth_checks.txt was checked against (150, the target then, for a line without one):
    a piece checked against a smaller target than today's is checked again."""
    found = re.search(r"\[target (\d+)\]$", line)
    return int(found.group(1)) if found else 150


def grow_step(after: Path | None, target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """The growth rule: checked after each finished 2ee piece from the third, once per piece (growth_checks.txt
    records each check and its target). With `after`, that piece only; without, every such piece not checked yet
    against `target` (a check missed by a stop between a piece's end and its check, or made against a smaller
    target), each against the state now."""
    pieces = all_pieces()
    verdicts = judged()
    finished = finished_pieces(verdicts)  # once: it builds the pool
    finished_2ee = [n for n in ordered_pieces() if n in finished and level_of(pieces[n - 1][0]) == GROWN_LEVEL]
    record = FOLDER / CHECKS
    lines = record.read_text().splitlines() if record.exists() else []
    checked = {line.split(":", 1)[0] for line in lines if checked_target(line) >= target}
    due = [n for n in finished_2ee[2:] if piece_path(n).name not in checked]
    if after is not None:
        due = [n for n in due if piece_path(n).name == after.name]
    if not due:
        print(f"{after.name if after else 'now'}: no growth check due (the rule checks after each finished 2ee "
              f"piece from the third, once; {len(finished_2ee)} finished, {len(checked)} checked)")
        return
    for number in due:
        line = f"{piece_path(number).name}: {growth_check(number, judged(), target)} [target {target}]"
        with record.open("a") as out:
            out.write(line + "\n")
        print(f"after {line}")


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
    parser.add_argument("step", choices=("plan", "order", "next", "grow", "count", "select", "table", "enough",
                                         "forecast", "spread"))
    parser.add_argument("--target", type=int, default=TEST_SIZE + TRAIN_SIZE,
                        help="the problems in band at which the pilot stops (default 200)")
    parser.add_argument("--study", nargs=2, metavar=("TEMPLATE", "OUT"),
                        help="select: also write the study file OUT from TEMPLATE with the lists filled")
    parser.add_argument("--skip", default="", help="next: pieces' files (space-separated) not to name again")
    parser.add_argument("--after", type=Path, help="grow: the piece that has just ended (default: every finished 2ee "
                        "piece not checked yet)")
    args = parser.parse_args()
    if args.step == "next":
        next_piece(set(args.skip.split()), args.target)
        return
    if args.step == "count":  # the 2ee problems to import: the registered 400 and every growth's
        print(dict(LEVELS)[GROWN_LEVEL] + PIECE_SIZE[GROWN_LEVEL] * sum(growths()))
        return
    if args.step == "grow":
        grow_step(args.after, args.target)
        return
    if args.step == "select":
        select(tuple(args.study) if args.study else None, args.target)
    if args.step == "enough":
        enough(args.target)
    if args.step == "forecast":
        from generated_forecast import forecast_step  # it reads this module's verdicts: imported once both exist

        forecast_step(args.target)
        return
    {"plan": plan, "order": order, "table": table, "spread": spread}[args.step]()


if __name__ == "__main__":
    main()
