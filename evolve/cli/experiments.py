"""`evolve experiment` and `evolve report`: run an experiment file's cells, and report what each policy cracked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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


def experiment_file(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix != ".toml" and not path.exists():
        path = Path("experiments") / f"{name_or_path}.toml"
    return path


def cmd_experiment(args: argparse.Namespace, console: Console) -> int:
    from evolve.cli.progress import ExperimentView
    from evolve.engine.experiment import ExperimentRunner, load_experiment

    spec = load_experiment(experiment_file(args.file), args.db)
    cells = len(spec.cells())
    console.print(f"experiment [bold]{spec.name}[/]: {len(spec.policies)} policies x {len(spec.problems)} problems "
                  f"x {len(spec.seeds)} seeds = {cells} cells of {spec.iterations} iterations, store {spec.db}",
                  highlight=False)
    runner = ExperimentRunner(spec)
    view = ExperimentView(f"evolve experiment {spec.name}", list(runner.cells.values()), console,
                          live=False if args.plain else None)
    runner.on_change = view.update
    with view:
        outcome = runner.run()
    for error in outcome.errors:
        console.print(f"[red]error:[/] {error}", highlight=False)
    done = sum(cell.status == "finished" for cell in outcome.cells.values())
    console.print(f"{done}/{cells} cells finished", highlight=False)
    if not outcome.finished:
        console.print(f"the experiment is saved; continue with: evolve experiment {args.file}"
                      + (f" --db {args.db}" if args.db else ""), highlight=False)
    console.print(f"report: evolve report {args.file}" + (f" --db {args.db}" if args.db else ""), highlight=False)
    if outcome.interrupted:
        return 130
    return 0 if outcome.finished else 1


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from evolve.config import ConfigError
    from evolve.engine.experiment import load_experiment
    from evolve.report.html import report_html
    from evolve.report.results import collect
    from evolve.report.results_files import write_csvs, write_json
    from evolve.report.terminal import render_report
    from evolve.store.program_store import ProgramStore

    score_range = _score_range(args.score_range, ConfigError)
    spec = load_experiment(experiment_file(args.experiment), args.db)
    store = ProgramStore(spec.db, mode="read")
    stored = store.experiment_spec(spec.name)
    if stored is None:
        console.print(f"[red]error:[/] no experiment '{spec.name}' in {spec.db}; run `evolve experiment "
                      f"{args.experiment}` first", highlight=False)
        return 1
    if json.loads(stored) | {"db": spec.db} != json.loads(spec.model_dump_json()):
        console.print(f"[yellow]warning:[/] {experiment_file(args.experiment)} changed since the experiment last "
                      "ran; the report follows the file (cells it no longer names are left out, new ones show as "
                      "not run)", highlight=False)
    results = collect(store, spec, score_range=score_range, pairs=args.pairs)
    render_report(results, console)
    out = Path(args.out or Path("reports") / spec.name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(report_html(results))
    write_json(results, out / "report.json")
    written = [out / "report.html", out / "report.json", *write_csvs(results, out)]
    console.print("wrote " + ", ".join(str(path) for path in written), highlight=False)
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
