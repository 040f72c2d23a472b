"""`evolve experiment` and `evolve report`: run an experiment file's cells, and report what each policy cracked."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from evolve.cli.conventions import add_out_flag, add_set_flag

if TYPE_CHECKING:
    from evolve.engine.experiment_spec import ExperimentSpec
    from evolve.report.design import ReportDesign


def add_commands(commands: argparse._SubParsersAction) -> None:
    experiment = commands.add_parser("experiment", help="run (or resume) every cell of an experiment file")
    experiment.add_argument("file", help="experiment TOML, e.g. experiments/default.toml")
    experiment.add_argument("--db", help="store for all cells (default: the file's db, or NAME.db beside it; "
                            "with pieces, a SQLite path holding {piece})")
    experiment.add_argument("--plain", action="store_true", help="plain line output instead of the live table")
    experiment.add_argument("--piece", type=int, action="append", metavar="K",
                            help="of an experiment in pieces (`pieces = N` in its file), run piece K only "
                            "(repeatable); default: every piece in order")
    experiment.add_argument("--cluster", choices=("ray",), help="run each cell as a Ray task on the cluster at "
                            "RAY_ADDRESS, or on a local one (needs: pip install -e '.[ray]')")
    add_set_flag(experiment, "iterations=4", "a key of the experiment file: iterations=4, run.concurrency=2, "
                 "policies.0.max_new_tokens=64 (a policy by index, name or *)", metavar="KEY=VALUE")

    report = commands.add_parser("report", help="which problems each policy cracked: terminal, HTML, JSON, CSV")
    report.add_argument("experiment", help="experiment TOML, or a name with experiments/NAME.toml")
    report.add_argument("--db", help="the experiment's store (default: from the experiment file)")
    add_out_flag(report, "folder for report.html, report.json and CSV files (default: reports/NAME/)",
                 metavar="FOLDER")
    add_set_flag(report, "iterations=4", "a key of the experiment file (as `evolve experiment --set` did)",
                 metavar="KEY=VALUE")
    report.add_argument("--pairs", choices=("all", "first"), default="all",
                        help="paired differences between every pair of policies, or the first against each other")
    report.add_argument("--arms", metavar="A,B,...", help="report these arms only, in this order (the first is "
                        "--pairs first's; Holm then adjusts over their comparisons alone)")
    report.add_argument("--score-range", default="0,1", metavar="LOW,HIGH",
                        help="the range every ranking scalar lies in, which the mean intervals assume (default 0,1)")


def cmd_experiment(args: argparse.Namespace, console: Console) -> int:
    from evolve.api import run_experiment
    from evolve.report.progress import ExperimentDrawing
    from evolve.store.program_store import shown_store

    spec = _spec(args)
    console.print(experiment_header(spec), highlight=False)
    drawing = ExperimentDrawing(console, live=False if args.plain else None)
    try:
        outcome = run_experiment(spec, cluster=args.cluster, on_event=drawing, pieces=args.piece)
    finally:
        drawing.close()
    for error in outcome.errors:
        console.print(f"[red]error:[/] {error}", highlight=False)
    done = sum(cell.status == "finished" for cell in outcome.cells.values())
    console.print(f"{done}/{len(outcome.cells)} cells finished", highlight=False)
    db = f" --db {shown_store(args.db)}" if args.db else ""  # a database server's password is never printed
    same = db + "".join(f" --set {item}" for item in args.set)
    same += "".join(f" --piece {piece}" for piece in args.piece or ())
    if not outcome.finished:
        console.print(f"the experiment is saved; continue with: evolve experiment {args.file}{same}", highlight=False)
    # the store keeps the design it ran with, --set included
    console.print(f"report: evolve report {args.file}{db}", highlight=False)
    if outcome.interrupted:
        return 130
    return 0 if outcome.finished else 1


def experiment_header(spec: ExperimentSpec) -> str:
    """The line that opens `evolve experiment`: arms x problems x seeds, the budget and the store."""
    from evolve.store.program_store import shown_store

    ensembles = len(spec.ensembles)
    arms = f"{len(spec.policies)} policies" + (f" + {ensembles} ensemble{'s' * (ensembles != 1)}" if ensembles else "")
    some = " (some arms on some of them)" if spec.arm_seeds else ""
    db = shown_store(spec.db)  # a database server's URL without its password
    store = f"store {db}" if spec.pieces == 1 else f"in {spec.pieces} pieces, stores {db}"
    return (f"experiment [bold]{spec.name}[/]: {arms} x {len(spec.problems)} problems x {len(spec.seeds)} seeds"
            f"{some} = {len(spec.cells())} cells of {spec.iterations} iterations, {store}")


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from rich.markup import escape

    from evolve.api import experiment_report
    from evolve.config import ConfigError
    from evolve.report.report_files import check_report_folder

    score_range = _score_range(args.score_range, ConfigError)
    design = _report_design(args)
    check_report_folder(Path(args.out or Path("reports") / design.spec.name))  # before the work, not after it
    if design.note:
        color = "yellow" if design.severity == "warning" else "dim"
        console.print(f"[{color}]{design.severity}:[/] {escape(design.note)}", highlight=False, soft_wrap=True)
    arms = [arm.strip() for arm in args.arms.split(",")] if args.arms else None
    experiment_report(design.spec, out=args.out, pairs=args.pairs, score_range=score_range, console=console,
                      arms=arms)
    return 0


def _report_design(args: argparse.Namespace) -> ReportDesign:
    """The design `evolve report` follows: the one the experiment ran with, as its store keeps it (report/design.py);
    the file and the report's own --set where it gives some."""
    from evolve.api import experiment_file
    from evolve.cli.common import experiment_settings
    from evolve.engine.experiment_pieces import stored_design
    from evolve.engine.experiment_spec import load_experiment
    from evolve.report.design import report_design

    path = experiment_file(args.experiment)
    values, labels = experiment_settings(args)
    return report_design(path, stored_design(load_experiment(path, args.db)), args.db, values, labels)


def _spec(args: argparse.Namespace, name: str | None = None) -> ExperimentSpec:
    """The experiment file (a path, or NAME for experiments/NAME.toml) with --db and every --set applied."""
    from evolve.api import experiment_file
    from evolve.cli.common import experiment_settings
    from evolve.engine.experiment_spec import load_experiment

    values, labels = experiment_settings(args)
    return load_experiment(experiment_file(name or args.file), args.db, values, labels)


def _score_range(text: str, error: type[Exception]) -> tuple[float, float]:
    """--score-range LOW,HIGH as two finite numbers with LOW < HIGH (a mean's interval is drawn between them), else
    one error line."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise error(f"--score-range {text!r}: write LOW,HIGH, e.g. --score-range 0,1") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise error(f"--score-range {text!r}: LOW and HIGH must be finite numbers (not inf or nan), e.g. "
                    "--score-range 0,1")
    if not low < high:
        raise error(f"--score-range {text!r}: LOW must be below HIGH")
    if not math.isfinite(high - low):
        raise error(f"--score-range {text!r}: HIGH - LOW must be a finite number")
    return low, high
