"""Issue 28's calibration, step 1: screen HumanEval tasks by the base model's plain sampling for the evolution pilot.

Reads the store of `evolve sample` (experiments/calibration/base_n20.db: the base, n = 20 answers per task) and
applies the screening rule pre-registered in docs/study_cpu.md, using the base only:
- finished tasks only (a task sampled to fewer than 20 answers, or not yet, is listed as pending);
- too easy, left out: 3 or more of 20 answers solve it (p >= 0.15: 300 answers of evolution crack it surely);
- floor, left out: no answer solves it and no answer passes any test (best score 0);
- pilot candidates: the rest, ordered by solved answers then best score, both descending.
Writes the candidates, one problem path per line, and prints the counts.

    .venv/bin/python scripts/calibration_select.py [--db experiments/calibration/base_n20.db]
        [--out experiments/calibration/pilot_candidates.txt]
"""

from __future__ import annotations

import argparse
import sqlite3
from dataclasses import dataclass
from pathlib import Path

ANSWERS = 20
TOO_EASY = 3


@dataclass(frozen=True)
class TaskSample:
    problem: str
    answers: int
    solved: int
    best: float
    finished: bool


def read_samples(db: Path) -> list[TaskSample]:
    """Each sampled task's answers, solved answers and best scalar, read-only."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "select r.problem, r.status, count(p.id), coalesce(sum(s.solved), 0), coalesce(max(s.scalar), 0) "
            "from runs r left join programs p on p.run_id = r.id and p.iteration > 0 "
            "left join scores s on s.program_id = p.id group by r.id order by r.problem").fetchall()
    finally:
        connection.close()
    return [TaskSample(problem, answers, int(solved), float(best), status == "finished")
            for problem, status, answers, solved, best in rows]


def screen(samples: list[TaskSample]) -> dict[str, list[TaskSample]]:
    """The rule of docs/study_cpu.md: pending, too easy, floor, candidates (ordered)."""
    groups: dict[str, list[TaskSample]] = {"pending": [], "too_easy": [], "floor": [], "candidates": []}
    for sample in samples:
        if not sample.finished:
            groups["pending"].append(sample)
        elif sample.solved >= TOO_EASY:
            groups["too_easy"].append(sample)
        elif sample.solved == 0 and sample.best <= 0.0:
            groups["floor"].append(sample)
        else:
            groups["candidates"].append(sample)
    groups["candidates"].sort(key=lambda sample: (-sample.solved, -sample.best, sample.problem))
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=Path("experiments/calibration/base_n20.db"))
    parser.add_argument("--out", type=Path, default=Path("experiments/calibration/pilot_candidates.txt"))
    parser.add_argument("--tasks", type=Path, default=Path("experiments/calibration/humaneval_all.txt"),
                        help="every task to be sampled, one problem path per line")
    args = parser.parse_args()
    if not args.db.is_file():
        raise SystemExit(f"no store {args.db}: xz -dk {args.db}.xz (see experiments/calibration/README.md)")
    samples = read_samples(args.db)
    groups = screen(samples)
    sampled = {sample.problem for sample in samples}
    listed = [line.strip().removeprefix("programs/") for line in args.tasks.read_text().splitlines()
              if line.strip()] if args.tasks.is_file() else []
    groups["pending"] += [TaskSample(task, 0, 0, 0.0, False) for task in listed if task not in sampled]
    for name, members in groups.items():
        print(f"{name}: {len(members)}")
    args.out.write_text("".join(f"programs/{sample.problem}\n" for sample in groups["candidates"]))
    print(f"wrote {len(groups['candidates'])} candidates to {args.out}")


if __name__ == "__main__":
    main()
