"""Issue 60's calibration, exploratory: would a futility stop (end a cell at iteration T when its best score is still
below a threshold) have cut cracks that came later? Read from the pieces' stores, nothing changes in them.

    .venv/bin/python scripts/study/generated_futility.py experiments/generated/calibration/piece_0[15].db \
        --at 50 --below 0.5

Prints, per store and in all: the cells the stop would have ended (not cracked by T, best score below the threshold
up to T) and those of them that cracked later, with the iteration of the crack and their best score at T.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from calibration_select import query


@dataclass(frozen=True)
class CellPath:
    """One pilot cell as the stop would have seen it: its first solved iteration and its best score up to T."""

    problem: str
    seed: int
    first_crack: int | None
    best_by_stop: float


def cell_paths(store: Path, at: int) -> list[CellPath]:
    """Every cell of `store`: its first solved iteration (None: never) and its best scalar up to iteration `at`."""
    rows = query(store, "SELECT c.problem, c.seed, MIN(CASE WHEN s.solved THEN p.iteration END), "
                        f"MAX(CASE WHEN p.iteration <= {int(at)} THEN s.scalar END) "
                        "FROM experiment_cells c JOIN programs p ON p.run_id = c.run_id "
                        "JOIN scores s ON s.program_id = p.id GROUP BY c.run_id ORDER BY c.problem, c.seed")
    return [CellPath(problem.removeprefix("programs/"), int(seed), crack, float(best or 0.0))
            for problem, seed, crack, best in rows]


def stopped(cells: list[CellPath], at: int, below: float) -> list[CellPath]:
    """The cells the stop ends at iteration `at`: not cracked by then, best score below `below`."""
    return [cell for cell in cells if (cell.first_crack is None or cell.first_crack > at) and cell.best_by_stop < below]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", type=Path)
    parser.add_argument("--at", type=int, default=50, help="the iteration at which the stop would look")
    parser.add_argument("--below", type=float, default=0.5, help="the best score under which it would stop")
    args = parser.parse_args()
    ended_all, lost_all = 0, 0
    for store in args.stores:
        ended = stopped(cell_paths(store, args.at), args.at, args.below)
        lost = [cell for cell in ended if cell.first_crack is not None]
        ended_all, lost_all = ended_all + len(ended), lost_all + len(lost)
        print(f"{store.name}: {len(ended)} cells ended at iteration {args.at}, {len(lost)} of them cracked later")
        for cell in lost:
            print(f"  {cell.problem} seed {cell.seed}: cracked at {cell.first_crack}, best {cell.best_by_stop:.2f} "
                  f"at {args.at}")
    print(f"in all: {ended_all} cells ended, {lost_all} of them cracked later")


if __name__ == "__main__":
    main()
