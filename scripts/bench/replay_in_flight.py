"""Estimate offline what `novelty.in_flight` adds over the commit-time novelty filter, per stored run.

    .venv/bin/python scripts/bench/replay_in_flight.py STORE.db [--window 5] [--threshold 0.95]

Programs are taken in commit (store) order. A child counts as `earlier` when it copies (same structure, or MinHash
Jaccard at or above the threshold) a program committed before the `window` iterations committed just before its own
(what the commit-time filter would already have held in its index), and as `in flight` when it copies only a child
of those `window` iterations (which may have been generated or evaluated with it: a run keeps run.concurrency +
run.eval_workers iterations in flight, so window = that sum less one is the widest overlap). Stored programs are
valid children only (failed evaluations and exact duplicates are not programs), so this counts what in_flight would
have saved among the evaluations that produced a child, on the trajectory the run actually took.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evolve.records import Program  # noqa: E402
from evolve.search.novelty import ChildrenInFlight, NoveltyIndex, NoveltySettings  # noqa: E402
from evolve.store.program_store import ProgramStore  # noqa: E402


def replay(store: ProgramStore, run_id: int, window: int, threshold: float) -> tuple[int, int, int]:
    """(children, earlier, in flight) for one run."""
    by_iteration: dict[int, list[Program]] = defaultdict(list)
    order: list[int] = []  # iterations in commit order
    for program in store.programs(run_id):
        if program.iteration not in by_iteration:
            order.append(program.iteration)
        by_iteration[program.iteration].append(program)
    committed = NoveltyIndex(NoveltySettings(threshold=threshold))  # programs before the window
    children = earlier = in_flight = 0
    for position, iteration in enumerate(order):
        if position > window:
            for program in by_iteration[order[position - window - 1]]:
                committed.add(program.id, program.code)
        held = ChildrenInFlight(threshold)
        for recent in order[max(0, position - window):position]:
            for program in by_iteration[recent]:
                held.hold(recent, *committed.fingerprint(program.code))
        for program in by_iteration[iteration] if iteration >= 1 else ():
            children += 1
            fingerprint = committed.fingerprint(program.code)
            if committed.near_duplicate_of(*fingerprint) is not None:
                earlier += 1
            elif held.near_duplicate_of(*fingerprint) is not None:
                in_flight += 1
    return children, earlier, in_flight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--run", type=int, action="append", help="a run id (default: every run of the store)")
    parser.add_argument("--window", type=int, default=5, help="iterations committed just before that count as "
                        "in flight together (default 5: concurrency 4 + eval_workers 2, less one)")
    parser.add_argument("--threshold", type=float, default=0.95)
    args = parser.parse_args()
    store = ProgramStore(args.db, mode="read")
    totals = [0, 0, 0]
    for run in store.list_runs():
        if args.run and run.id not in args.run:
            continue
        counts = replay(store, run.id, args.window, args.threshold)
        totals = [total + count for total, count in zip(totals, counts, strict=True)]
        print(f"run {run.id} {run.name}: {counts[0]} children, {counts[1]} copy an earlier program, "
              f"{counts[2]} copy only a child in flight with them")
    print(f"all: {totals[0]} children, {totals[1]} earlier, {totals[2]} in flight")


if __name__ == "__main__":
    main()
