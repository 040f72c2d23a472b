"""Issue 28's calibration, step 1: screen HumanEval tasks by the base model's plain sampling for the evolution pilot.

Reads the store of `evolve sample` (experiments/calibration/base_n20.db: the base, n = 20 answers per task) and
applies the screening rule pre-registered in docs/study_cpu.md, using the base only:
- finished tasks only (a task sampled to fewer than 20 answers, or not yet, is listed as pending);
- too easy, left out: 3 or more of 20 answers solve it (p >= 0.15: 300 answers of evolution crack it surely);
- floor, left out: no answer solves it and no answer passes any test (best score 0);
- pilot candidates: the rest, ordered by solved answers then best score, both descending.
Writes the candidates, one problem path per line, and prints the counts.

Step 3, with `--pilot experiments/calibration/pilot.db` (the pilot experiment's store, every cell finished): per
candidate its two cells (cracked or not, the first iteration that cracked, the best score), the in-band rule of
docs/study_cpu.md, and the test list (every second in-band task by task number, up to 30) and train list (the
rest); with too few in band the test list is filled to 30 first, then the train list to 20, from the candidates
nearest the band (both sides in turn), written as test_problems.txt and train_problems.txt, each task's cells,
verdict and list as selection.tsv, and the study file experiments/study_cpu.toml from
experiments/calibration/study_cpu.template.toml with those lists.

    .venv/bin/python scripts/study/calibration_select.py [--db experiments/calibration/base_n20.db]
        [--out experiments/calibration/pilot_candidates.txt] [--pilot experiments/calibration/pilot.db]

The band and the sizes are the HumanEval study's unless given: `--band LOW HIGH` (a task cracked in some of its
cells but not all is in band when its cracked share is within; cracked in all, when the mean first crack is after
`--late-crack`; in none, when every best score is at least `--near-miss`), `--test-size`, `--train-size`, and
`--train-spans-band` (issue 60's rule: the train list drawn from below and above the median of the in-band tasks in
turn, the test list the rest). `--pilot-only` skips the screen (a pool whose pilot took every problem, as for
`evolve import generated`) and `--no-study` the study file. Issue 60's pool, for example:

    .venv/bin/python scripts/study/calibration_select.py --pilot-only --pilot PILOT.db --out DIR/candidates.txt
        --band 0.1 0.9 --test-size 100 --train-size 50 --train-spans-band --no-study
"""

from __future__ import annotations

import argparse
import sqlite3
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

ANSWERS = 20
TOO_EASY = 3
LATE_CRACK = 30  # cracked in both pilot cells, but after this many iterations on average: still in band
NEAR_MISS = 0.8  # cracked in neither, with at least this best score in both: in band
TEST_SIZE, TRAIN_MIN = 30, 20


@dataclass(frozen=True)
class Band:
    """The in-band rule's thresholds: the crack share of a task cracked in some but not all of its cells, and the
    stand-ins for the edges when the cells agree (cracked in all: late; in none: near misses)."""

    low: float = 0.1
    high: float = 0.7
    late_crack: float = LATE_CRACK
    near_miss: float = NEAR_MISS


HUMANEVAL_BAND = Band()  # docs/study_cpu.md


@dataclass(frozen=True)
class TaskSample:
    problem: str
    answers: int
    solved: int
    best: float
    finished: bool


def query(db: Path, sql: str) -> list[tuple]:
    """The rows of one query on a store opened read-only (nothing of it changes)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)  # a piece may be writing it
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def read_samples(db: Path) -> list[TaskSample]:
    """Each sampled task's answers, solved answers and best scalar, read-only."""
    rows = query(db, "select r.problem, r.status, count(p.id), coalesce(sum(s.solved), 0), "
                     "coalesce(max(s.scalar), 0) from runs r "
                     "left join programs p on p.run_id = r.id and p.iteration > 0 "
                     "left join scores s on s.program_id = p.id group by r.id order by r.problem")
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


@dataclass(frozen=True)
class PilotCell:
    problem: str
    seed: int
    finished: bool
    first_crack: int | None  # the first iteration whose program solved the problem, None if none did
    best: float


def read_pilot(db: Path) -> list[PilotCell]:
    """Each pilot cell's outcome, read-only; its problem named as the screen names it (humaneval/he_007), not as the
    experiment file does (programs/humaneval/he_007), so the lists get one `programs/` prefix."""
    rows = query(db, "select c.problem, c.seed, r.status, min(case when s.solved then p.iteration end), "
                     "coalesce(max(s.scalar), 0) from experiment_cells c join runs r on r.id = c.run_id "
                     "left join programs p on p.run_id = r.id left join scores s on s.program_id = p.id "
                     "group by c.run_id order by c.problem, c.seed")
    return [PilotCell(problem.removeprefix("programs/"), int(seed), status == "finished", crack, float(best))
            for problem, seed, status, crack, best in rows]


def cells_by_task(cells: list[PilotCell]) -> dict[str, list[PilotCell]]:
    """The pilot's cells grouped by their task, in the order the tasks first appear."""
    by_task: dict[str, list[PilotCell]] = {}
    for cell in cells:
        by_task.setdefault(cell.problem, []).append(cell)
    return by_task


def in_band(cells: list[PilotCell], band: Band = HUMANEVAL_BAND) -> bool | None:
    """docs/study_cpu.md's rule on one task's pilot cells (with two cells, one crack is in any band holding 0.5):
    None until at least two have finished, all of them."""
    if len(cells) < 2 or not all(cell.finished for cell in cells):
        return None
    cracks = [cell.first_crack for cell in cells if cell.first_crack is not None]
    if len(cracks) == len(cells):
        return sum(cracks) / len(cracks) > band.late_crack
    if not cracks:
        return all(cell.best >= band.near_miss for cell in cells)
    return band.low <= len(cracks) / len(cells) <= band.high


def ease(cells: list[PilotCell]) -> tuple[float, float, float]:
    """How easy the pilot found a task, for ordering tasks within the band: the cracked share, then the earlier
    mean first crack, then the smallest best score."""
    cracks = [cell.first_crack for cell in cells if cell.first_crack is not None]
    mean_crack = sum(cracks) / len(cracks) if cracks else float("inf")
    return len(cracks) / len(cells), -mean_crack, min(cell.best for cell in cells)


def spanning_train(by_task: dict[str, list[PilotCell]], band: list[str], size: int) -> list[str]:
    """Issue 60's train list: `size` in-band tasks taken in turn from below and above the band's median (the harder
    and the easier half by `ease`), the harder first; within each half evenly spaced in `ease` order, so the list
    spans both sides of the band and each side's whole range, whatever the task numbers say."""
    ordered = sorted(band, key=lambda task: (ease(by_task[task]), task_number(task), task))
    halves = (ordered[:len(ordered) // 2], ordered[len(ordered) // 2:])
    wanted = (min(len(halves[0]), (size + 1) // 2), min(len(halves[1]), size // 2))
    picks = [[half[int((i + 0.5) * len(half) / count)] for i in range(count)]
             for half, count in zip(halves, wanted, strict=True)]
    turns = [task for pair in zip_longest(*picks) for task in pair if task is not None]
    rest = [task for task in ordered if task not in turns]  # a half too small: the other gives the rest
    return (turns + rest)[:size]


def task_number(problem: str) -> int:
    return int(problem.rsplit("_", 1)[-1]) if problem.rsplit("_", 1)[-1].isdigit() else 10**9


def nearest_to_band(by_task: dict[str, list[PilotCell]], verdicts: dict[str, bool | None]) -> list[str]:
    """Out-of-band tasks, nearest first, the two sides in turn: cracked in every cell, the latest mean first crack
    first (the ceiling side); cracked in none, the highest smallest best score first (the floor side)."""
    out = [task for task, verdict in verdicts.items() if verdict is False]
    ceiling = sorted((task for task in out if all(cell.first_crack is not None for cell in by_task[task])),
                     key=lambda task: (-sum(cell.first_crack or 0 for cell in by_task[task]), task_number(task)))
    floor = sorted((task for task in out if all(cell.first_crack is None for cell in by_task[task])),
                   key=lambda task: (-min(cell.best for cell in by_task[task]), task_number(task)))
    return [task for pair in zip_longest(ceiling, floor) for task in pair if task is not None]


def split_lists(cells: list[PilotCell], band_rule: Band = HUMANEVAL_BAND, test_size: int = TEST_SIZE,
                train_min: int = TRAIN_MIN, train_spans_band: bool = False) -> tuple[list[str], list[str], list[str]]:
    """(test, train, pending): in-band tasks by task number, every second one to the test list up to `test_size`,
    the rest to the train list (with `train_spans_band`, issue 60's registered rule: the train list takes
    `train_min` in-band tasks from below and above the band's median in turn, see spanning_train, and the test list
    the rest, `test_size` or more); too few in band, the test list takes what the train list would have, then both
    are topped up (test to `test_size`, then train to `train_min`) from the out-of-band tasks nearest the band, its
    two sides in turn."""
    by_task = cells_by_task(cells)
    verdicts = {task: in_band(task_cells, band_rule) for task, task_cells in by_task.items()}
    pending = sorted(task for task, verdict in verdicts.items() if verdict is None)
    band = sorted((task for task, verdict in verdicts.items() if verdict), key=task_number)
    if train_spans_band:
        train = spanning_train(by_task, band, min(train_min, max(0, len(band) - test_size)))
        test = [task for task in band if task not in train]
    else:
        test = band[0::2][:test_size]
        train = [task for task in band if task not in test]
    if len(test) < test_size:  # too few in band: the test list takes what the train list would have
        moved = train[:test_size - len(test)]
        test, train = test + moved, [task for task in train if task not in moved]
    near = nearest_to_band(by_task, verdicts)
    added = near[:max(0, test_size - len(test))]
    test = sorted(test + added, key=task_number)
    train += near[len(added):len(added) + max(0, train_min - len(train))]
    return test, train, pending


def selection_table(cells: list[PilotCell], test: list[str], train: list[str],
                    band: Band = HUMANEVAL_BAND) -> str:
    """One row per pilot task (tab-separated, by task number): each cell's first crack and best score, the rule's
    verdict (in band; ceiling: cracked in every cell, early; floor: cracked in none, a best under NEAR_MISS) and the
    list it went to, `test`/`train` from the band or `test (nearest)`/`train (nearest)` from the top-up."""
    by_task = cells_by_task(cells)
    rows = ["task\tcells (seed: first crack or -, best)\tverdict\tlist"]
    for task in sorted(by_task, key=task_number):
        task_cells = sorted(by_task[task], key=lambda cell: cell.seed)
        verdict = in_band(task_cells, band)
        share = sum(cell.first_crack is not None for cell in task_cells) / len(task_cells)
        side = ("pending" if verdict is None else "in band" if verdict
                else "ceiling" if share == 1 or share > band.high else "floor")
        listed = "test" if task in test else "train" if task in train else ""
        if listed and side != "in band":
            listed += " (nearest)"
        shown = ", ".join(f"{cell.seed}: {cell.first_crack if cell.first_crack is not None else '-'}, {cell.best:.3f}"
                          for cell in task_cells)
        rows.append(f"{task}\t{shown}\t{side}\t{listed}")
    return "\n".join(rows) + "\n"


def write_pilot_problems(path: Path, problems: list[str]) -> None:
    """Replace the `problems = [...]` list of the pilot's experiment file, keeping every other line."""
    text = path.read_text()
    start = text.index("problems = [")
    end = text.index("]", start) + 1
    path.write_text(text[:start] + f"problems = {toml_list(problems)}" + text[end:])


def toml_list(problems: list[str], indent: str = "  ") -> str:
    rows = ",\n".join(indent + ", ".join(f'"{p}"' for p in problems[i:i + 4]) for i in range(0, len(problems), 4))
    return f"[\n{rows},\n]"


def write_study(template: Path, out: Path, test: list[str], train: list[str]) -> None:
    """The study file from its template: TEST_PROBLEMS and TRAIN_PROBLEMS replaced by the lists, every other line
    as registered."""
    text = template.read_text()
    if "TEST_PROBLEMS" not in text or "TRAIN_PROBLEMS" not in text:
        raise SystemExit(f"{template}: no TEST_PROBLEMS / TRAIN_PROBLEMS placeholder to fill")
    text = text.replace("THIS IS THE TEMPLATE: ", f"Written from {template.as_posix()}: ")
    out.write_text(text.replace("TEST_PROBLEMS", toml_list([f"programs/{t}" for t in test]))
                   .replace("TRAIN_PROBLEMS", toml_list([f"programs/{t}" for t in train])))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, default=Path("experiments/calibration/base_n20.db"))
    parser.add_argument("--out", type=Path, default=Path("experiments/calibration/pilot_candidates.txt"),
                        help="the candidates; the lists and selection.tsv go to its folder")
    parser.add_argument("--tasks", type=Path, default=Path("experiments/calibration/humaneval_all.txt"),
                        help="every task to be sampled, one problem path per line")
    parser.add_argument("--pilot", type=Path, nargs="+",
                        help="the pilot experiment's store (or the stores of its pieces): apply the in-band rule")
    parser.add_argument("--pilot-toml", type=Path, default=Path("experiments/calibration/pilot.toml"),
                        help="the pilot experiment file whose problem list is rewritten with the candidates")
    parser.add_argument("--pilot-only", action="store_true",
                        help="no screen (the pilot took the whole pool): only the in-band rule and the lists")
    parser.add_argument("--study-template", type=Path,
                        default=Path("experiments/calibration/study_cpu.template.toml"))
    parser.add_argument("--study", type=Path, default=Path("experiments/study_cpu.toml"),
                        help="with --pilot: the study file written from the template with the lists")
    parser.add_argument("--no-study", action="store_true", help="write the lists but no study file")
    parser.add_argument("--allow-pending", action="store_true",
                        help="a pilot still running: apply the rule to the tasks whose cells have all finished")
    parser.add_argument("--band", type=float, nargs=2, metavar=("LOW", "HIGH"),
                        default=(HUMANEVAL_BAND.low, HUMANEVAL_BAND.high),
                        help="the crack share of a task cracked in some of its cells (default 0.1 0.7)")
    parser.add_argument("--late-crack", type=float, default=LATE_CRACK, metavar="ITERATION",
                        help=f"cracked in every cell: in band when the mean first crack is later "
                             f"(default {LATE_CRACK})")
    parser.add_argument("--near-miss", type=float, default=NEAR_MISS,
                        help=f"cracked in none: in band when every best score is at least this (default {NEAR_MISS})")
    parser.add_argument("--test-size", type=int, default=TEST_SIZE, help=f"default {TEST_SIZE}")
    parser.add_argument("--train-size", type=int, default=TRAIN_MIN, help=f"at least (default {TRAIN_MIN})")
    parser.add_argument("--train-spans-band", action="store_true",
                        help="issue 60: the train list from below and above the band's median in turn")
    return parser.parse_args()


def screen_step(args: argparse.Namespace) -> None:
    """Step 1: the screen of plain sampling, its candidates written and the pilot file's list rewritten."""
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
    if args.pilot_toml.is_file():
        write_pilot_problems(args.pilot_toml, [f"programs/{sample.problem}" for sample in groups["candidates"]])
        print(f"rewrote the problem list of {args.pilot_toml}")


def pilot_step(args: argparse.Namespace) -> None:
    """Step 3: the in-band rule on the pilot's cells, the lists, selection.tsv and (unless --no-study) the study."""
    band = Band(args.band[0], args.band[1], args.late_crack, args.near_miss)
    cells = [cell for store in args.pilot for cell in read_pilot(store)]
    test, train, pending = split_lists(cells, band, args.test_size, args.train_size, args.train_spans_band)
    table = selection_table(cells, test, train, band)
    verdicts = [row.split("\t")[2] for row in table.splitlines()[1:]]
    print(f"pilot: {verdicts.count('in band')} in band, {verdicts.count('ceiling')} ceiling, "
          f"{verdicts.count('floor')} floor, {len(pending)} tasks whose cells have not all finished")
    if pending and not args.allow_pending:
        raise SystemExit(f"the pilot is not finished: run `evolve experiment {args.pilot_toml}`")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name, tasks in (("test_problems.txt", test), ("train_problems.txt", train)):
        (args.out.parent / name).write_text("".join(f"programs/{task}\n" for task in tasks))
    (args.out.parent / "selection.tsv").write_text(table)
    nearest = sum(row.endswith("(nearest)") for row in table.splitlines())
    print(f"{len(test)} test, {len(train)} train; {nearest} of them from the top-up (selection.tsv)")
    if not args.no_study:
        write_study(args.study_template, args.study, test, train)
        print(f"wrote {args.study} (the study file, its lists filled)")
    if len(test) < args.test_size or len(train) < args.train_size:
        print(f"fewer in-band tasks than the plan asks ({args.test_size} test, {args.train_size} train): "
              "say so in README")


def main() -> None:
    args = parse_args()
    if not args.pilot_only:
        screen_step(args)
    if args.pilot is not None:
        pilot_step(args)
    elif args.pilot_only:
        raise SystemExit("--pilot-only needs --pilot STORE")


if __name__ == "__main__":
    main()
