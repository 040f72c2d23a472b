"""Issue 62's training pilots: short runs of each algorithm that find a recipe which takes on this machine, written
from one grid file, run one after another, and judged on their training curves alone.

- `plan` writes one TrainConfig file per pilot of experiments/training/pilots/grid.toml (`<name>.toml` beside it,
  its `out` checkpoints/pilots/<name>); it refuses a grid whose problem lists do not exist yet (the calibration's
  `select` writes the train list, `ceiling` below the ceiling list) or that lists a problem of the test list.
- `ceiling` writes experiments/generated/calibration/ceiling_problems.txt: the calibration's problems whose two cells
  both cracked early (its rule's ceiling side; never a test problem of a study, since they are out of band), in an
  order shuffled by Random(62), so that a set taking its first few takes a random few.
- `order` prints the pilots' files in the grid's order (what `training_pilots.sh` runs); `state NAME` prints
  `finished`, `resume` or `new` for one pilot's output folder.
- `judge` prints each pilot's verdict (evolve/report/training_takes.py): the train reward's change with its exact
  sign-flip p, its tokens per answer and share of distinct answers late against early, problem by problem, its KL,
  and the recipe's choice (of the pilots that take without collapse, the one with least KL). It reads the committed
  logs (experiments/training/pilots/<name>/train_log.jsonl) and, for a pilot still running here, its live log.

A pilot is one piece: it runs whole within a session (about 75 minutes on 2 cores, docs/training.md); its
curves are committed when it ends and its optimizer state never is (a LoRA r = 16 state on every projection is tens
of MB, replaced every step); a pilot cut off by a session's end resumes on the same machine, or starts again.

    .venv/bin/python scripts/study/training_pilots.py plan
    bash scripts/study/training_pilots.sh start
    .venv/bin/python scripts/study/training_pilots.py judge
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from random import Random
from typing import Any

from calibration_select import cells_by_task, ease, read_pilot
from generated_calibration import FOLDER as CALIBRATION
from generated_calibration import finished_stores, verdict_of

from evolve.report.training_takes import METHOD, TrainingVerdict, least_kl_that_takes, training_verdict
from evolve.rl.train_config import TrainConfig

PILOTS = Path("experiments/training/pilots")
RUNS = Path("checkpoints/pilots")
TEST_LIST = CALIBRATION / "test_problems.txt"
TRAIN_LIST = CALIBRATION / "train_problems.txt"
CEILING_SHUFFLE = 62


def read_list(path: Path) -> list[str]:
    if not path.exists():
        raise SystemExit(f"{path}: not written yet (the calibration's lists: scripts/study/generated_calibration.py "
                         "select; the ceiling list: scripts/study/training_pilots.py ceiling)")
    names = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [name for name in names if name]


def grid_pilots(grid: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = tomllib.loads(grid.read_text(encoding="utf-8"))
    return data, data.get("pilot", [])


def bare(name: str) -> str:
    """A problem's name as the calibration's stores hold it: programs/generated/x -> generated/x."""
    return name.removeprefix("programs/")


def by_ease(names: list[str]) -> list[str]:
    """`names` ordered by how easily the calibration's two cells cracked each (calibration_select.ease: the hardest
    first), from the piece stores here."""
    by_task = cells_by_task([cell for store in finished_stores() for cell in read_pilot(store)])
    missing = [name for name in names if bare(name) not in by_task]
    if missing:
        raise SystemExit(f"{', '.join(missing[:3])}: no calibration cells here (unpack the piece stores: "
                         "bash scripts/study/generated_calibration.sh start, or its save's packed stores)")
    return sorted(names, key=lambda name: (ease(by_task[bare(name)]), name))


def set_problems(parts: list[dict[str, Any]]) -> list[str]:
    """A problem set: from each `{ file, take }` its first `take` problems (all without `take`), or with
    `spaced = true` `take` problems evenly spaced in the calibration's ease order (so they span the band), each
    problem once, in order."""
    problems: list[str] = []
    for part in parts:
        names = read_list(Path(part["file"]))
        take = part.get("take", len(names))
        if take > len(names):
            raise SystemExit(f"{part['file']}: {len(names)} problems, {take} asked for")
        if part.get("spaced"):
            ordered = by_ease(names)
            problems += [ordered[int((i + 0.5) * len(ordered) / take)] for i in range(take)]
        else:
            problems += names[:take]
    unique: dict[str, str] = {}  # a problem named in two files (with or without programs/) is taken once
    for name in problems:
        unique.setdefault(bare(name), name)
    return list(unique.values())


def pilot_config(common: dict[str, Any], sets: dict[str, list[dict[str, Any]]], pilot: dict[str, Any],
                 test: set[str]) -> TrainConfig:
    """One pilot's full settings: the grid's common keys, its own over them, and its set's problems."""
    parts = sets.get(pilot["set"])
    if parts is None:
        raise SystemExit(f"pilot {pilot['name']}: no set {pilot['set']!r} in the grid's [sets]")
    problems = set_problems(parts)
    leaked = sorted(name for name in problems if bare(name) in {bare(t) for t in test})
    if leaked:
        raise SystemExit(f"pilot {pilot['name']}: trains on test problems {', '.join(leaked[:5])}")
    own = {key: value for key, value in pilot.items() if key not in ("name", "set")}
    return TrainConfig(**(common | own), problems=tuple(problems), out=str(RUNS / pilot["name"]))


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {toml_value(v)}" for key, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def config_toml(config: TrainConfig, name: str) -> str:
    """The pilot's file for `evolve train --config`: every key the grid set (a default it restates included, so the
    file means the same if a default changes), the rest TrainConfig's defaults."""
    chosen = config.model_dump(exclude_unset=True)
    lines = [f"# Issue 62's pilot {name}, written by scripts/study/training_pilots.py plan from grid.toml",
             *(f"{key} = {toml_value(value)}" for key, value in chosen.items())]
    return "\n".join(lines) + "\n"


def plan(grid: Path) -> None:
    data, pilots = grid_pilots(grid)
    test = set(read_list(TEST_LIST)) if TEST_LIST.exists() else set()
    for pilot in pilots:
        config = pilot_config(data.get("common", {}), data.get("sets", {}), pilot, test)
        path = grid.parent / f"{pilot['name']}.toml"
        path.write_text(config_toml(config, pilot["name"]), encoding="utf-8")
        print(f"{path}: {config.algo}, lr {config.lr:g}, entropy {config.entropy_coef:g}, "
              f"{len(config.problems)} problems, {config.steps} steps")


def ceiling() -> None:
    """The ceiling problems, shuffled by Random(62) so that a set taking the first few takes a random few."""
    by_task = cells_by_task([cell for store in finished_stores() for cell in read_pilot(store)])
    listed = {bare(name) for path in (TEST_LIST, TRAIN_LIST) if path.exists() for name in read_list(path)}
    names = sorted(f"programs/{task}" for task, cells in by_task.items()
                   if verdict_of(cells) == "ceiling" and task not in listed)  # a list's top-up may take one
    if not names:
        raise SystemExit("no problem of the calibration's finished cells is at the ceiling yet")
    Random(CEILING_SHUFFLE).shuffle(names)
    out = CALIBRATION / "ceiling_problems.txt"
    out.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    print(f"{out}: {len(names)} problems")


def order(grid: Path) -> None:
    for pilot in grid_pilots(grid)[1]:
        print(grid.parent / f"{pilot['name']}.toml")


def log_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def state(name: str) -> str:
    out = RUNS / name
    if (PILOTS / name / "train_log.jsonl").exists() or (out / "final").exists():
        return "finished"
    return "resume" if (out / "resume" / "state.pt").is_file() else "new"  # evolve/rl/checkpoints.py's STATE_FILE


def judge(grid: Path) -> None:
    verdicts: list[TrainingVerdict] = []
    print(f"method: {METHOD}\n")
    print(f"{'pilot':34} {'steps':>5} {'objective':>15} {'p':>7} {'tokens':>12} {'distinct':>8} {'KL':>8}  verdict")
    for pilot in grid_pilots(grid)[1]:
        name = pilot["name"]
        kept = PILOTS / name / "train_log.jsonl"
        records = log_records(kept if kept.exists() else RUNS / name / "train_log.jsonl")
        if not records:
            print(f"{name:34} not run")
            continue
        verdict = training_verdict(name, records)
        change = verdict.change
        running = "" if kept.exists() else " (running here, not committed)"
        reward = "-" if change.change is None else f"{change.first:.3f}->{change.last:.3f}"
        p = "-" if change.p_value is None else f"{change.p_value:.2g}"
        tokens = "-" if verdict.tokens_ratio is None else f"{verdict.tokens_first:.0f} x{verdict.tokens_ratio:.2f}"
        distinct = "-" if verdict.distinct_ratio is None else f"x{verdict.distinct_ratio:.2f}"
        kl = "-" if verdict.kl_last is None else f"{verdict.kl_last:.1e}"
        print(f"{name:34} {change.steps:>5} {reward:>15} {p:>7} {tokens:>12} {distinct:>8} {kl:>8}  "
              f"{verdict.verdict}{running}")
        print(f"{'':34} {verdict.measure}: {verdict.sentence()}")
        if kept.exists():
            verdicts.append(verdict)
    chosen = least_kl_that_takes(verdicts)
    print(f"\nthe recipe (least KL of the committed pilots that take, p Holm-adjusted over the {len(verdicts)} "
          "committed): "
          + (chosen.change.run if chosen else "none yet"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("plan", "ceiling", "order", "state", "judge"))
    parser.add_argument("name", nargs="?", help="state: the pilot's name")
    parser.add_argument("--grid", type=Path, default=PILOTS / "grid.toml")
    args = parser.parse_args()
    if args.step == "state":
        if not args.name:
            parser.error("state needs a pilot's name")
        print(state(args.name))
        return
    {"plan": lambda: plan(args.grid), "ceiling": ceiling, "order": lambda: order(args.grid),
     "judge": lambda: judge(args.grid)}[args.step]()


if __name__ == "__main__":
    sys.exit(main())
