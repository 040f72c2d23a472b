"""`evolve experiment` and `evolve report`: run an experiment file's cells, and report what each policy cracked."""

from __future__ import annotations

import argparse

from rich.console import Console


def add_commands(commands: argparse._SubParsersAction) -> None:
    experiment = commands.add_parser("experiment", help="run (or resume) every cell of an experiment file")
    experiment.add_argument("file", help="experiment TOML, e.g. experiments/default.toml")
    experiment.add_argument("--db", help="store for all cells (default: the file's db, or NAME.db beside it)")
    experiment.add_argument("--plain", action="store_true", help="plain line output instead of the live table")

    report = commands.add_parser("report", help="which problems each policy cracked: terminal, HTML, JSON, CSV")
    report.add_argument("experiment", help="experiment TOML, or a name with experiments/NAME.toml")
    report.add_argument("--db", help="the experiment's store (default: from the experiment file)")
    report.add_argument("--out", help="folder for report.html, report.json and CSV files "
                                      "(default: reports/NAME/)")
    report.add_argument("--pairs", choices=("all", "first"), default="all",
                        help="paired differences between every pair of policies, or the first against each other")
    report.add_argument("--score-range", default="0,1", metavar="LOW,HIGH",
                        help="the range every ranking scalar lies in, which the mean intervals assume (default 0,1)")


def cmd_experiment(args: argparse.Namespace, console: Console) -> int:
    from evolve.api import run_experiment

    outcome = run_experiment(args.file, db=args.db, console=console, live=False if args.plain else None)
    for error in outcome.errors:
        console.print(f"[red]error:[/] {error}", highlight=False)
    done = sum(cell.status == "finished" for cell in outcome.cells.values())
    console.print(f"{done}/{len(outcome.cells)} cells finished", highlight=False)
    if not outcome.finished:
        console.print(f"the experiment is saved; continue with: evolve experiment {args.file}"
                      + (f" --db {args.db}" if args.db else ""), highlight=False)
    console.print(f"report: evolve report {args.file}" + (f" --db {args.db}" if args.db else ""), highlight=False)
    if outcome.interrupted:
        return 130
    return 0 if outcome.finished else 1


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from evolve.api import experiment_report
    from evolve.config import ConfigError

    score_range = _score_range(args.score_range, ConfigError)
    experiment_report(args.experiment, db=args.db, out=args.out, pairs=args.pairs, score_range=score_range,
                      console=console)
    return 0


def _score_range(text: str, error: type[Exception]) -> tuple[float, float]:
    """--score-range LOW,HIGH as two numbers with LOW < HIGH, else one error line."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise error(f"--score-range {text!r}: write LOW,HIGH, e.g. --score-range 0,1") from None
    if not low < high:
        raise error(f"--score-range {text!r}: LOW must be below HIGH")
    return low, high
