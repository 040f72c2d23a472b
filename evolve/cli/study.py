"""`evolve study FILE`: train VPO / GRPO / Multi-RLVR policies with equal budgets, sample and evolve with each and
the base on held-out problems, and report; one resumable command."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console

from evolve.cli.conventions import add_out_flag

if TYPE_CHECKING:
    from evolve.study.config import StudySpec
    from evolve.study.plan import StudyPaths

STAGE_NAMES = ("train", "sample", "evolve", "report")


def add_commands(commands: argparse._SubParsersAction) -> None:
    study = commands.add_parser("study", help="train policies, sample and evolve with them, report (resumable: run "
                                "it again after a kill)")
    study.add_argument("file", help="study TOML, e.g. experiments/study_small.toml")
    study.add_argument("--db", help="store for the sampling and evolution runs (default: STUDY_DIR/study.db)")
    add_out_flag(study, "the study folder: checkpoints, store, report (default: studies/NAME/)", metavar="FOLDER")
    study.add_argument("--until", choices=STAGE_NAMES, default="report",
                       help="stop after this stage (default: report, the whole study)")
    study.add_argument("--status", action="store_true", help="only print where each stage stands")
    study.add_argument("--report-so-far", action="store_true",
                       help="only write STUDY/report/ from the evolution seeds finished so far for every arm (with "
                       "[evolution] pieces: the (piece, seed) parts) while the study may be running: an interim "
                       "report, which the report stage replaces")
    study.add_argument("--redo", nargs="+", type=int, metavar="RUN_ID",
                       help="only take these evolution cells' runs out of the study (kept in the store, renamed), so "
                       "the next `evolve study` runs those cells again; needs --reason, refused while the study runs")
    study.add_argument("--reason", default="", help="why the --redo cells are run again (kept in study_state.json "
                       "and named by the report)")
    study.add_argument("--piece", type=int, metavar="K", help="with --redo, of a study whose evolution is in pieces: "
                       "the run ids are piece K's (its store STUDY/evolution_0K.db)")
    study.add_argument("--cluster", choices=("ray",), help="evolve stage: each cell a Ray task on the cluster at "
                       "RAY_ADDRESS, or on a local one (needs: pip install -e '.[ray]')")
    study.set_defaults(handler=cmd_study)


def cmd_study(args: argparse.Namespace, console: Console) -> int:
    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths, load_study

    spec = load_study(args.file)
    paths = StudyPaths.of(spec, args.out, args.db)
    if args.status:  # reads only: creates no folder, state file or store
        reader = Study(spec, paths, console, source=args.file, read_only=True)
        reader.print_statuses(reader.statuses())
        return 0
    if args.report_so_far:  # reads the store only; writes STUDY/report/
        reporter = Study(spec, paths, console, source=args.file, read_only=True)
        path = reporter.write_interim_report()
        console.print(f"interim report: {path.parent / 'report.html'}", highlight=False, soft_wrap=True)
        return 0
    if args.redo:
        return redo(spec, paths, args, console)
    from evolve.report.progress import ExperimentDrawing

    drawing = ExperimentDrawing(console)  # the evolve stage's cells, drawn as `evolve experiment` draws them
    study = Study(spec, paths, console, source=args.file, cluster=args.cluster, on_event=drawing)
    try:
        outcome = study.run(args.until)
    finally:
        drawing.close()
    for error in outcome.errors:
        console.print(f"[red]error:[/] {error}", highlight=False, soft_wrap=True)
    again = f"evolve study {args.file}" + (f" --out {args.out}" if args.out else "") + \
        (f" --db {args.db}" if args.db else "")
    if outcome.interrupted:
        console.print(f"interrupted; everything done so far is kept: continue with `{again}`", highlight=False)
        return 130
    if outcome.errors:
        console.print(f"stopped on errors; fix them and continue with `{again}`", highlight=False)
        return 1
    seconds = study.state.seconds
    timings = ", ".join(f"{stage} {seconds[stage]:.0f} s" for stage in STAGE_NAMES if stage in seconds)
    console.print(f"study {spec.name}: {'finished' if outcome.finished else 'stopped after ' + args.until}"
                  + (f" (time per stage, all runs together: {timings})" if timings else "")
                  + (f"; report: {outcome.report.parent / 'report.html'}" if outcome.report else ""),
                  highlight=False, soft_wrap=True)
    return 0


def redo(spec: StudySpec, paths: StudyPaths, args: argparse.Namespace, console: Console) -> int:
    from evolve.study.redo import evolution_store, redo_cells

    records = redo_cells(spec, paths, evolution_store(spec, paths, args.piece), args.redo, args.reason, args.piece)
    for record in records:
        console.print(f"run {record['run_id']} ({record['problem']} x {record['policy']} seed {record['seed']}, "
                      f"{record['status']}): taken out of the study, kept in the store", highlight=False,
                      soft_wrap=True)
    console.print(f"{len(records)} cell{'s' * (len(records) != 1)} to run again: `evolve study {args.file}`",
                  highlight=False)
    return 0
