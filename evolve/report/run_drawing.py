"""A run drawn on the console, by `evolve run` and `evolve.run(progress=True)` alike: the engine's run events as the
loading and starting lines, the live panel (or plain lines), and the end of the run (its summary, the best program
against the seed, how to resume)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.syntax import Syntax

from evolve.engine.events import Event, Observer, RunLoading, RunStarted
from evolve.engine.run_driver import RunOutcome
from evolve.records import Program
from evolve.report.progress import ProgressView
from evolve.report.run_summary import RunSummary, summarize
from evolve.store.program_store import ProgramStore, shown_store


class RunDrawing:
    """An observer of one run's events that draws them: the loading line, the starting line, then the progress view
    (a live panel on a terminal, plain lines elsewhere) until close()."""

    def __init__(self, console: Console, live: bool | None) -> None:
        self.console = console
        self.live = live
        self._view: ProgressView | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunLoading):
            self.console.print("loading " + ", ".join(
                f"{section.name} ({section.backend}: {section.model or 'default'})"
                for section in event.config.ensemble_policies()) + " ...", highlight=False)
        elif isinstance(event, RunStarted):
            self._started(event)
        elif self._view is not None and hasattr(event, "stats"):
            self._view.update(event.stats)  # type: ignore[union-attr]

    def _started(self, event: RunStarted) -> None:
        config, problem = event.config, event.problem
        self.console.print(
            f"{'resuming' if event.resuming else 'starting'} run {event.run_id}: problem [bold]{problem.name}[/] "
            f"({len(problem.objectives)} objectives), "
            + ", ".join(f"policy [bold]{section.name}[/] ({section.backend}: {section.model})"
                        for section in config.ensemble_policies())
            + f", {config.run.iterations} iterations, seed {config.run.seed}, store {shown_store(config.run.db)}",
            highlight=False)
        self._view = ProgressView(f"evolve run {event.run_id}: {problem.name} x {config.policy.name}",
                                  self.console, self.live).__enter__()

    def close(self) -> None:
        if self._view is not None:
            self._view.__exit__(None, None, None)
            self._view = None


def draw_run(start: Callable[[Observer], RunOutcome], console: Console | None = None,
             live: bool | None = None) -> RunOutcome:
    """A run started by `start` (evolve.run with its arguments, given the observer) drawn on `console`: progress
    while it runs, then its end (see draw_outcome)."""
    console = console or Console()
    drawing = RunDrawing(console, live)
    try:
        outcome = start(drawing)
    finally:
        drawing.close()
    draw_outcome(console, outcome)
    return outcome


def draw_outcome(console: Console, outcome: RunOutcome) -> None:
    """The end of a run: its summary when finished, else how to continue it."""
    resume_hint = f"evolve run --resume {outcome.run_id} --db {shown_store(outcome.db)}"  # never a password
    if outcome.status == "interrupted":
        console.print(f"interrupted; continue with: {resume_hint}", highlight=False)
    elif outcome.status == "policy_unavailable":
        console.print(f"[red]error:[/] {outcome.error}\nthe run is saved; once the policy is back, continue with: "
                      f"{resume_hint}", highlight=False)
    else:
        store = ProgramStore(outcome.db, mode="read")
        try:
            print_summary(console, store, outcome.run_id)
        finally:
            store.close()
        stats = outcome.stats
        if stats.stopped:
            console.print(f"stopped early: {stats.stopped} ({stats.iterations_done} of {stats.iterations_target} "
                          "iterations used)", highlight=False)


def summary_lines(summary: RunSummary) -> list[tuple[str, str]]:
    """The end-of-run rows, counted from the store over the whole run (a resumed run's earlier processes too)."""
    done, t = summary.iterations_done, summary.throughput
    with_child = summary.iterations_with_child
    share = f"{with_child}/{done} ({100 * with_child / done:.0f}%)" if done else "0/0"
    failures = ", ".join(f"{kind} {count}" for kind, count in sorted(summary.outcomes.items())
                         if kind != "child" and count) or "none"
    best = summary.best[0] if summary.best else None
    solved = summary.first_solved
    rate = f"{t.tokens_per_s:.1f} tokens/s" if t.tokens_per_s is not None else "- tokens/s"
    return [
        ("iterations", f"{done}/{summary.iterations_target}"),
        ("iterations with a valid child", share),
        ("children evaluated", str(summary.outcomes.get("child", 0))),
        ("other outcomes", failures),
        ("best scalar", f"{best.scalar:.4f} (program {summary.run_id}:{best.number}, iteration {best.iteration})"
         if best else "-"),
        ("solved", f"yes, at iteration {solved.iteration} (program {summary.run_id}:{solved.number})" if solved
         else "not yet"),
        ("generation", f"{t.completion_tokens} tokens, {rate} over {t.wall_s:.0f}s of the run's active wall time"),
    ]


def print_summary(console: Console, store: ProgramStore, run_id: int) -> None:
    summary = summarize(store, run_id)
    console.rule(f"run {run_id} finished")
    for key, value in summary_lines(summary):
        console.print(f"[bold cyan]{key:>30}[/]  {value}", highlight=False)
    best = store.best_programs(run_id, 1)
    if best:
        program = best[0]
        console.print(f"\n{against_seed(store, run_id, program)}", highlight=False)
        vector = ", ".join(f"{k}={v:.3g}" for k, v in program.scores.items())
        console.print(f"best program {run_id}:{store.program_number(run_id, program.id)} (store id {program.id}, "
                      f"iteration {program.iteration}): {vector}", highlight=False)
        if console.is_terminal:
            console.print(Syntax(program.code, "python", line_numbers=False))
        else:  # a log or a pipe: the code as it is, not padded with spaces to the console's width
            console.print(program.code, markup=False, highlight=False, soft_wrap=True)


def against_seed(store: ProgramStore, run_id: int, best: Program) -> str:
    """The run's verdict in one line: the best child against the seed program, or that no child beat the seed."""
    seed = store.program_by_number(run_id, 1)
    if best.id == seed.id or best.scalar <= seed.scalar:
        children = store.count_programs(run_id) - 1
        return (f"no child beat the seed program (scalar {seed.scalar:.4f}; {children} valid "
                f"child{'ren' * (children != 1)} evaluated): the best program is still the seed"
                + (", which solves the problem" if seed.solved else ""))
    solved = ", and solves the problem" if best.solved else ""
    return (f"the best child, {run_id}:{store.program_number(run_id, best.id)}, beat the seed: scalar "
            f"{best.scalar:.4f} against {seed.scalar:.4f} (+{best.scalar - seed.scalar:.4f}){solved}")
