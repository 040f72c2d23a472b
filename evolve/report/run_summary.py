"""One run at a glance for `evolve show RUN`: header, best programs, first solve, failures, outcomes, throughput.

`summarize` reads the store into a RunSummary; `run_summary_dict` is the same numbers as JSON-ready data and
`render_run` prints them with rich. Rendering computes nothing. Names, reasons and code come from the store and
are printed as plain text (never read as rich markup).

Time: a run's wall time is its active wall clock, the run_elapsed_s stored with its last committed iteration:
the time its processes ran, not the time it lay killed or paused between them (stores from before that column
fall back to created_at -> updated_at). Tokens per second are completion tokens over that wall time, the run's
own rate. Per request, completion tokens over the summed latency of the policy calls is a single request's
decode rate: requests in flight together overlap, so these rates do not add up to the run's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from evolve.engine.stop_rules import stored_stop_reason
from evolve.records import Program
from evolve.report.by_choice import ChoiceRow, split_run
from evolve.report.cascade_savings import CascadeSavings, cascade_savings, novelty_rejections
from evolve.store.program_store import ProgramStore

TOP_K = 5
VECTOR_WIDTH = 40  # objectives shown in a compact vector before "..."


@dataclass(frozen=True)
class ProgramBrief:
    id: int  # store-wide
    iteration: int
    scalar: float
    solved: bool
    scores: dict[str, float]
    number: int = 0  # within its run, 1..N in store order (1: the seed); the CLI shows RUN:N


@dataclass(frozen=True)
class Throughput:
    policy_calls: int  # calls that returned a completion
    policy_errors: int  # calls that failed
    prompt_tokens: int
    completion_tokens: int
    generation_s: float  # summed latency of the policy calls (overlapping calls each count in full)
    tokens_per_s: float | None  # completion tokens / wall_s: the run's generation rate
    tokens_per_request_s: float | None  # completion tokens / generation_s: one request's decode rate
    wall_s: float  # the run's active wall clock (time it lay killed excluded); created_at -> updated_at in old stores
    iterations_per_min: float | None  # iterations done / wall minutes
    mean_latency_s: float | None


@dataclass(frozen=True)
class RunSummary:
    run_id: int
    name: str
    problem: str
    policy: str
    seed: int
    status: str
    iterations_done: int  # iterations >= 1 with a committed outcome
    iterations_target: int
    iterations_with_child: int  # iterations >= 1 with at least one valid child
    created_at: str  # ISO 8601 to the second, UTC
    updated_at: str
    programs: int
    best: tuple[ProgramBrief, ...]  # the TOP_K highest scalars, best first
    first_solved: ProgramBrief | None
    outcomes: dict[str, int]  # answer outcomes of iterations >= 1 by kind, every kind present
    failures: dict[str, int]  # failed answers by 'kind: reason head', most first (store.failure_counts)
    throughput: Throughput
    best_code: str | None
    novelty_rejected: int = 0  # answers the novelty filter rejected before evaluation (counted among duplicates)
    cascade: CascadeSavings | None = None  # what cascade evaluation stopped and saved; None without a cascade
    by_policy: tuple[ChoiceRow, ...] = ()  # one row per policy the iterations used (an ensemble has several)
    by_instruction: tuple[ChoiceRow, ...] = ()  # one row per evolved instruction ([prompt_evolution]), if any
    stopped: str = ""  # why a finished run stopped before its budget (run.stop_when_solved, run.target_score)
    stop_reason: str = ""  # why an interrupted or failed run stopped, as its driver stored it ("": none stored)


def _brief(program: Program, store: ProgramStore) -> ProgramBrief:
    return ProgramBrief(program.id, program.iteration, program.scalar, program.solved, dict(program.scores),
                        store.program_number(program.run_id, program.id))


def _iso(moment: datetime) -> str:
    return moment.replace(microsecond=0).isoformat()


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def summarize(store: ProgramStore, run_id: int) -> RunSummary:
    """The run's numbers from the store (StoreError, one line, for an unknown run)."""
    run = store.get_run(run_id)
    best = store.best_programs(run_id, TOP_K)
    solved = store.first_solved(run_id)
    totals = store.attempt_totals(run_id)  # streamed: a run's prompts and completions are never loaded here
    outcomes, calls = totals.outcomes, totals.policy_calls
    done = sum(1 for iteration in store.completed_iterations(run_id) if iteration >= 1)
    generation_s, completion_tokens = totals.generation_s, totals.completion_tokens
    wall_s = store.run_elapsed_s(run_id) or max(0.0, (run.updated_at - run.created_at).total_seconds())
    throughput = Throughput(
        policy_calls=calls, policy_errors=outcomes["policy_error"],
        prompt_tokens=totals.prompt_tokens, completion_tokens=completion_tokens,
        generation_s=generation_s, tokens_per_s=_ratio(completion_tokens, wall_s) if calls else None,
        tokens_per_request_s=_ratio(completion_tokens, generation_s), wall_s=wall_s,
        iterations_per_min=_ratio(done, wall_s / 60), mean_latency_s=_ratio(generation_s, calls))
    by_policy, by_instruction = split_run(store.iteration_choices(run_id))
    failures = store.failure_counts(run_id)
    stopped = stored_stop_reason(run.config_json, best[0] if best else None, solved) \
        if run.status == "finished" and done < run.iterations_target else ""
    return RunSummary(
        run_id=run.id, name=run.name, problem=run.problem, policy=run.policy, seed=run.seed, status=run.status,
        iterations_done=done, iterations_target=run.iterations_target,
        iterations_with_child=totals.iterations_with_child, created_at=_iso(run.created_at),
        updated_at=_iso(run.updated_at), programs=store.count_programs(run_id),
        best=tuple(_brief(program, store) for program in best),
        first_solved=_brief(solved, store) if solved else None,
        outcomes=outcomes, failures=failures, throughput=throughput,
        novelty_rejected=novelty_rejections(failures), cascade=cascade_savings(store, run_id),
        best_code=best[0].code if best else None, by_policy=by_policy, by_instruction=by_instruction,
        stopped=stopped, stop_reason=(store.stop_reason(run_id) or "") if run.status != "finished" else "")


def run_summary_dict(store: ProgramStore, run_id: int) -> dict[str, Any]:
    """The summary as plain JSON data (lists, not tuples): the same numbers `render_run` prints."""
    return json.loads(json.dumps(asdict(summarize(store, run_id))))


def compact_vector(scores: dict[str, float], width: int = VECTOR_WIDTH) -> str:
    """0/1 vectors as 'passed/n 1101...', others as 'name=value ...', at most `width` objectives shown."""
    values = list(scores.values())
    more = "..." if len(values) > width else ""
    if values and all(value in (0.0, 1.0) for value in values):
        bits = "".join("1" if value == 1.0 else "0" for value in values[:width])
        return f"{sum(values):g}/{len(values)} {bits}{more}"
    shown = " ".join(f"{name}={value:.3g}" for name, value in list(scores.items())[:width])
    return shown + (f" ... (+{len(values) - width})" if more else "")


def _number(value: float | None, unit: str = "", digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def render_run(store: ProgramStore, run_id: int, console: Console) -> None:
    """`evolve show RUN`: the run's header, best programs, first solve, outcomes, failures, throughput, best code."""
    s = summarize(store, run_id)
    t = s.throughput
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold cyan")
    facts.add_column()
    rows = [
        ("problem", s.problem), ("policy", s.policy), ("seed", str(s.seed)),
        ("status", s.status + (f", stopped early: {s.stopped}" if s.stopped else "")),
        *([("why it stopped", s.stop_reason)] if s.stop_reason else []),
        ("iterations", f"{s.iterations_done}/{s.iterations_target}"), ("programs", str(s.programs)),
        ("created", s.created_at), ("updated", f"{s.updated_at} (active {_duration(t.wall_s)})"),
        ("first solved", f"{s.run_id}:{s.first_solved.number} (store id {s.first_solved.id}) at iteration "
                         f"{s.first_solved.iteration}" if s.first_solved else "not solved"),
        ("outcomes", ", ".join(f"{kind} {count}" for kind, count in s.outcomes.items())),
        ("policy calls", f"{t.policy_calls} ({t.policy_errors} failed), mean latency "
                         f"{_number(t.mean_latency_s, ' s', 2)}"),
        ("tokens", f"{t.completion_tokens} completion, {t.prompt_tokens} prompt; "
                   f"{_number(t.tokens_per_s)} tokens/s over the active wall time, "
                   f"{_number(t.tokens_per_request_s)} tokens/s per request ({t.generation_s:.1f} s of summed "
                   "request time; requests overlap)"),
        ("pace", f"{_number(t.iterations_per_min, digits=2)} iterations/min over the active wall time"),
    ]
    if s.novelty_rejected:
        rows.append(("novelty", f"{s.novelty_rejected} answers rejected as near-duplicates before evaluation"))
    if s.cascade is not None:
        rows.append(("cascade", _cascade_line(s.cascade)))
    for key, value in rows:
        facts.add_row(key, Text(value))
    console.print(Text(f"run {s.run_id}: {s.name}", style="bold"))
    console.print(facts)
    console.print(_best_table(s))
    if len(s.by_policy) > 1:
        console.print(choice_table("by policy", "policy", s.by_policy))
    if s.by_instruction:
        console.print(choice_table("by evolved instruction (prompt_evolution)", "instruction", s.by_instruction))
    if s.failures:
        failures = Table(title="failed answers by reason", title_justify="left")
        failures.add_column("reason", overflow="fold")
        failures.add_column("count", justify="right")
        for reason, count in s.failures.items():
            failures.add_row(Text(reason), str(count))
        console.print(failures)
    else:
        console.print(Text("failed answers: none", style="dim"))
    if s.best_code is not None:
        console.print(Text(f"code of the best program {s.run_id}:{s.best[0].number}", style="bold"))
        console.print(Syntax(s.best_code.rstrip("\n"), "python", theme="ansi_dark", line_numbers=True, word_wrap=True))


def _cascade_line(c: CascadeSavings) -> str:
    stages = ", ".join(f"{count} at {stage}" for stage, count in c.stopped_by_stage.items())
    saved = "unknown (no child ran the skipped stages)" if c.saved_s is None else \
        f"~{c.saved_s:.1f} s saved ({_number(None if c.saved_share is None else 100 * c.saved_share, ' %', 0)} " \
        f"of evaluation time; estimated from {c.estimated_from} program(s) that ran every stage)"
    return (f"{c.stopped} of {c.scored} programs stopped before the full evaluation ({stages or 'none'}); "
            f"{c.stage_failures} answers failed inside a stage; {c.spent_s:.1f} s spent on stages, {saved}")


def _best_table(s: RunSummary) -> Table | Text:
    if not s.best:
        return Text("no programs stored (the seed program was never scored)", style="yellow")
    table = Table(title=f"best programs (top {TOP_K} by scalar)", title_justify="left")
    for column in ("program", "store id", "iteration", "scalar", "solved"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("score vector", overflow="fold")
    for brief in s.best:
        table.add_row(f"{s.run_id}:{brief.number}", str(brief.id), str(brief.iteration), f"{brief.scalar:.4f}",
                      Text("yes", style="green") if brief.solved else Text("no", style="dim"),
                      Text(compact_vector(brief.scores)))
    return table


def choice_table(title: str, what: str, rows: tuple[ChoiceRow, ...]) -> Table:
    """The run split by policy or instruction: iterations, answers, valid children and share, improvements, mean
    gain, best; an instruction's text beside its key."""
    texts = any(row.text for row in rows)
    table = Table(title=title, title_justify="left")
    table.add_column(what, no_wrap=True)
    if texts:
        table.add_column("text", overflow="fold", ratio=1, min_width=30)
    for column in ("iterations", "answers", "children", "valid share", "improved on parent", "mean gain", "best"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(Text(row.name), *([Text(row.text)] if texts else []), str(row.iterations), str(row.answers),
                      str(row.children), _number(None if row.valid_share is None else 100 * row.valid_share, " %", 0),
                      str(row.improvements), _number(row.mean_gain, digits=4), _number(row.best, digits=4))
    return table
