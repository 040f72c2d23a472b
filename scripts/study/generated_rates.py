"""Crack rates by difficulty of generated problems (gl_dD_NNNN) from the JSON that `evolve sample --out` writes.

Per difficulty: problems, answers, solved answers (pass@1 over all answers), problems solved by at least one
answer, problems where no answer passed any test (the floor) and the mean best score; printed as a Markdown table.

    .venv/bin/python scripts/study/generated_rates.py experiments/generated/smoke_n10.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

NAME = re.compile(r"gl_(?:s\d+_)?d(\d+)_\d+$")


@dataclass(frozen=True)
class Sampled:
    problem: str
    difficulty: int
    answers: int
    solved: int
    best: float


def read_sampled(path: Path) -> list[Sampled]:
    """The generated problems of one `evolve sample` JSON (other problems are left out)."""
    rows = []
    for problem in json.loads(path.read_text())["problems"]:
        match = NAME.search(problem["problem"])
        if match:
            scalars = problem["scalars"]
            rows.append(Sampled(problem["problem"], int(match.group(1)), problem["n"], problem["c"],
                                max(scalars, default=0.0)))
    return rows


def table(rows: list[Sampled]) -> str:
    by_difficulty: dict[int, list[Sampled]] = defaultdict(list)
    for row in rows:
        by_difficulty[row.difficulty].append(row)
    lines = ["| difficulty | problems | answers | solved answers | problems solved by >= 1 | floor (no test passed) "
             "| mean best score |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for difficulty, group in sorted(by_difficulty.items()):
        answers, solved = sum(row.answers for row in group), sum(row.solved for row in group)
        cracked = sum(1 for row in group if row.solved)
        floor = sum(1 for row in group if row.best == 0.0)
        best = sum(row.best for row in group) / len(group)
        lines.append(f"| {difficulty} | {len(group)} | {answers} | {solved} ({solved / answers:.3f}) | {cracked} "
                     f"| {floor} | {best:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, nargs="+", help="`evolve sample --out` files")
    args = parser.parse_args()
    print(table([row for path in args.json for row in read_sampled(path)]))


if __name__ == "__main__":
    main()
