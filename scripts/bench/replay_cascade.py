"""Measure what a problem's cascade saves on a stored run's children: each answer's code scored with the cascade
and without it (a copy of the problem folder without its [[cascade]] tables), on warm evaluator processes.

    .venv/bin/python scripts/bench/replay_cascade.py STORE.db --problem programs/lis [--run ID] [--limit N]

Printed: children scored, how many the cascade stopped, evaluation wall seconds with and without the cascade
(summed over the children, one evaluation at a time), whether every child that passed the stages got the same
scores as without the cascade (it must), and how many stopped children the full evaluation would have scored
higher than the partial vector they keep (what the cascade hides from selection).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evolve.problems.cascade import CASCADE_ARTIFACT, CascadeNote  # noqa: E402
from evolve.problems.evaluator_pool import EvaluatorPool  # noqa: E402
from evolve.problems.problem import Problem, load_problem  # noqa: E402
from evolve.store.program_store import ProgramStore  # noqa: E402


def without_cascade(folder: Path, into: Path) -> Problem:
    """A copy of the problem folder whose problem.toml lacks the [[cascade]] tables (which must come last)."""
    copy = into / folder.name
    shutil.copytree(folder, copy)
    text = (folder / "problem.toml").read_text()
    cut = text[:text.index("[[cascade]]")]
    expected = {key: value for key, value in tomllib.loads(text).items() if key != "cascade"}
    if tomllib.loads(cut) != expected:
        raise SystemExit(f"{folder / 'problem.toml'}: the [[cascade]] tables must be the file's last tables")
    (copy / "problem.toml").write_text(cut)
    return load_problem(str(copy), into)


def stored_codes(store: ProgramStore, run_id: int) -> list[str]:
    """Every answer's built code (programs after the seed, then failed evaluations), distinct, in write order."""
    codes = [program.code for program in store.programs(run_id) if program.iteration > 0]
    codes += [a.child_code for a in store.attempts(run_id) if a.kind == "eval_failed" and a.child_code]
    return list(dict.fromkeys(codes))


async def measure(cascaded: Problem, plain: Problem, codes: list[str]) -> None:
    stopped = failed = mismatched = hidden = 0
    with_s = without_s = 0.0
    async with EvaluatorPool(size=1) as pool:
        for code in codes:
            started = time.monotonic()
            staged = await pool.evaluate(cascaded, code)
            with_s += time.monotonic() - started
            started = time.monotonic()
            full = await pool.evaluate(plain, code)
            without_s += time.monotonic() - started
            note = CascadeNote.from_artifact(staged.artifacts.get(CASCADE_ARTIFACT, "")) if staged.ok else None
            if not staged.ok:
                failed += 1
            elif note is not None and note.stopped:
                stopped += 1
                hidden += full.ok and cascaded.scalar(full.scores) > cascaded.scalar(staged.scores)
            elif staged.scores != full.scores:
                mismatched += 1
    print(f"children {len(codes)}: stopped by the cascade {stopped}, failed evaluations {failed}, "
          f"passed every stage {len(codes) - stopped - failed} (scores differing from the full evaluation: "
          f"{mismatched})")
    print(f"stopped children whose full evaluation would have scored higher than their stored partial vector: "
          f"{hidden} of {stopped}")
    saved = without_s - with_s
    print(f"evaluation wall seconds: {with_s:.1f} with the cascade, {without_s:.1f} without "
          f"({saved:.1f} s saved, {100 * saved / without_s if without_s else 0:.0f} %)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store")
    parser.add_argument("--problem", required=True, help="the problem folder (with its [[cascade]])")
    parser.add_argument("--run", type=int, default=None, help="run id (default: the store's first run)")
    parser.add_argument("--limit", type=int, default=0, help="score at most this many children (0: all)")
    args = parser.parse_args(argv)
    store = ProgramStore(args.store, mode="read")
    run_id = args.run or store.list_runs()[0].id
    folder = Path(args.problem).resolve()
    cascaded = load_problem(str(folder), folder.parent)
    if not cascaded.cascade:
        raise SystemExit(f"{folder / 'problem.toml'} declares no [[cascade]]")
    codes = stored_codes(store, run_id)
    codes = codes[:args.limit] if args.limit else codes
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(measure(cascaded, without_cascade(folder, Path(scratch)), codes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
