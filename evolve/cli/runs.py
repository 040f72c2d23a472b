"""`evolve show`, `evolve lineage` and `evolve export`: one run's summary, a program's ancestry, the run as JSONL."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rich.console import Console

from evolve.cli.common import read_store, replaced_file, write_output
from evolve.cli.conventions import add_out_flag, add_set_flag

if TYPE_CHECKING:
    from evolve.store.program_store import ProgramStore


def add_commands(commands: argparse._SubParsersAction) -> None:
    show = commands.add_parser("show", help="one run (best programs, first solve, failures, throughput), or one "
                               "of its programs (RUN:N)")
    show.add_argument("target", nargs="?", metavar="RUN[:N]", help="a run id (evolve runs lists them), or RUN:N for "
                      "program N of the run (numbered 1..N within it, 1 the seed)")
    show.add_argument("program", nargs="?", type=int, metavar="N", help="program N of the run (as RUN:N does)")
    show.add_argument("--run", type=int, dest="run_id", metavar="RUN", help="the run, when N is given alone")
    show.add_argument("--id", type=int, dest="program_id", metavar="ID",
                      help="a program by its store-wide id (as `evolve export` and the store spell it)")
    show.add_argument("--json", action="store_true", help="print the numbers as JSON instead")
    show.add_argument("--code", action="store_true", help="print the program's code alone, as a file holds it: "
                      "with RUN alone, the run's best program (evolve show 3 --code > best.py)")
    add_out_flag(show, "write that code to FILE instead (implies --code)", metavar="FILE")

    lineage = commands.add_parser("lineage", help="replay a program's ancestry: diffs and objectives gained/lost")
    lineage.add_argument("run", type=int, help="run id")
    lineage.add_argument("program", type=int, nargs="?", metavar="N", help="program N of the run, numbered 1..N "
                         "within it as `evolve show` prints it (default: first solved, else the best)")
    lineage.add_argument("--id", type=int, dest="program_id", metavar="ID", help="the program by its store-wide id")
    add_out_flag(lineage, "also write a self-contained HTML page to FILE", old=("--html",), metavar="FILE")

    export = commands.add_parser("export", help="the whole run as JSONL (parent, prompt, completion, child, scores)")
    export.add_argument("run", type=int, help="run id")
    add_out_flag(export, "JSONL file (default: standard output)", old=("--output",), metavar="FILE")

    for command in (show, lineage, export):
        command.add_argument("--db", default=None, help="SQLite file or SQLAlchemy URL (default: from config)")
        command.add_argument("--config", "-c", default=None)
        add_set_flag(command, "run.db=other.db")


def show_target(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """(run id, program number) from `show RUN`, `show RUN:N`, `show RUN N`, `show --run RUN N` or `show N --run
    RUN`; (None, None) with --id. ConfigError, one line, for anything else."""
    from evolve.config import ConfigError

    if args.program_id is not None:
        if args.target is not None or args.run_id is not None:
            raise ConfigError("show --id ID takes no run: the store-wide id names the program alone")
        return None, None
    text = args.target or ""
    run_text, colon, number_text = text.partition(":")
    numbers = [part for part in (run_text, number_text) if part]
    if not all(part.strip().isdigit() for part in numbers) or (colon and not number_text):
        raise ConfigError(f"show {text!r}: write RUN, RUN:N (program N of run RUN) or --id ID, e.g. show 3:12")
    if args.run_id is not None:  # --run RUN N: the positional is N
        if colon or args.program is not None or not run_text:
            raise ConfigError("show --run RUN N: give N alone, e.g. show --run 3 12")
        return args.run_id, int(run_text)
    if not run_text:
        raise ConfigError("show: name a run (show 3), a program of it (show 3:12) or a program's id (show --id ID)")
    if colon and args.program is not None:
        raise ConfigError(f"show {text} {args.program}: write either RUN:N or RUN N")
    return int(run_text), int(number_text) if colon else args.program


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    from evolve.report.program_view import program_dict, program_view, render_program
    from evolve.report.run_summary import render_run, run_summary_dict

    run_id, number = show_target(args)
    store = read_store(args)
    if args.code or args.out:
        return _show_code(args, store, run_id, number, console)
    if run_id is not None and number is None:
        if args.json:
            print(json.dumps(run_summary_dict(store, run_id), indent=1))
        else:
            render_run(store, run_id, console)
        return 0
    program = store.get_program(args.program_id) if run_id is None else \
        store.program_by_number(run_id, number or 0)
    view = program_view(store, program)
    if args.json:
        print(json.dumps(program_dict(view), indent=1))
    else:
        render_program(view, console)
    return 0


def _show_code(args: argparse.Namespace, store: ProgramStore, run_id: int | None, number: int | None,
               console: Console) -> int:
    """`show --code` / `show --out FILE`: the program's code alone (the run's best with RUN alone), on standard
    output as it is, or written to FILE with one line saying which program it was."""
    from evolve.config import ConfigError
    from evolve.store.program_store import StoreError

    if args.json:
        raise ConfigError("show: give --json or --code/--out, not both")
    if run_id is None:
        program = store.get_program(args.program_id)
    elif number is None:
        best = store.best_programs(run_id, 1)
        if not best:
            raise StoreError(f"run {run_id} has no scored program yet")
        program = best[0]
    else:
        program = store.program_by_number(run_id, number)
    if not args.out:
        sys.stdout.write(program.code)
        return 0
    write_output(args.out, program.code)
    which = f"{program.run_id}:{store.program_number(program.run_id, program.id)}"
    console.print(f"wrote program {which} (scalar {program.scalar:.4f}, iteration {program.iteration}"
                  f"{', solved' if program.solved else ''}) to {args.out}", highlight=False)
    return 0


def cmd_lineage(args: argparse.Namespace, console: Console) -> int:
    from evolve.report.lineage import ancestry, lineage_html, render_lineage

    store = read_store(args)
    if args.program is not None and args.program_id is not None:
        from evolve.config import ConfigError

        raise ConfigError("lineage: give program N of the run or --id ID, not both")
    program_id = args.program_id if args.program is None else store.program_by_number(args.run, args.program).id
    lineage = ancestry(store, args.run, program_id)
    if args.out:  # first: the page is written whatever becomes of the console (`| head` closing it)
        write_output(args.out, lineage_html(lineage))
    render_lineage(lineage, console)
    if args.out:
        console.print(f"wrote {args.out}", highlight=False)
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from evolve.report.export import export_run

    store = read_store(args)
    if args.out:
        store.get_run(args.run)  # no such run: one line, and the file is left as it was
        with replaced_file(args.out) as out:  # a failure on the way leaves the file as it was too
            count = export_run(store, args.run, out)
        console.print(f"wrote {count} records to {args.out}", highlight=False)
    else:
        export_run(store, args.run, sys.stdout)
    return 0
