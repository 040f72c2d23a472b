"""`evolve show`, `evolve lineage` and `evolve export`: one run's summary, a program's ancestry, the run as JSONL."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from evolve.cli.common import read_store
from evolve.cli.conventions import add_out_flag, add_set_flag


def add_commands(commands: argparse._SubParsersAction) -> None:
    show = commands.add_parser("show", help="one run: best programs, first solve, failures by reason, throughput")
    show.add_argument("run", type=int, help="run id (evolve runs lists them)")
    show.add_argument("--json", action="store_true", help="print the numbers as JSON instead")

    lineage = commands.add_parser("lineage", help="replay a program's ancestry: diffs and objectives gained/lost")
    lineage.add_argument("run", type=int, help="run id")
    lineage.add_argument("program", type=int, nargs="?", help="program id (default: first solved, else the best)")
    add_out_flag(lineage, "also write a self-contained HTML page to FILE", old=("--html",), metavar="FILE")

    export = commands.add_parser("export", help="the whole run as JSONL (parent, prompt, completion, child, scores)")
    export.add_argument("run", type=int, help="run id")
    add_out_flag(export, "JSONL file (default: standard output)", old=("--output",), metavar="FILE")

    for command in (show, lineage, export):
        command.add_argument("--db", default=None, help="SQLite file or SQLAlchemy URL (default: from config)")
        command.add_argument("--config", "-c", default=None)
        add_set_flag(command, "run.db=other.db")


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    from evolve.report.run_summary import render_run, run_summary_dict

    store = read_store(args)
    if args.json:
        print(json.dumps(run_summary_dict(store, args.run), indent=1))
    else:
        render_run(store, args.run, console)
    return 0


def cmd_lineage(args: argparse.Namespace, console: Console) -> int:
    from evolve.report.lineage import ancestry, lineage_html, render_lineage

    lineage = ancestry(read_store(args), args.run, args.program)
    render_lineage(lineage, console)
    if args.out:
        Path(args.out).write_text(lineage_html(lineage), encoding="utf-8")
        console.print(f"wrote {args.out}", highlight=False)
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from evolve.report.export import export_run

    store = read_store(args)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            count = export_run(store, args.run, out)
        console.print(f"wrote {count} records to {args.out}", highlight=False)
    else:
        export_run(store, args.run, sys.stdout)
    return 0
