"""Lineage replay: the chain of programs from the seed to one program, with diffs and objectives gained or lost.

`ancestry` reads the store only; `render_lineage` prints it with rich, `lineage_html` writes one self-contained
page (inline CSS, no scripts, no external resources). Program code, completions and policy names are untrusted
text: the terminal view never reads them as rich markup and the page escapes every one of them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from html import escape

from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from evolve.records import Program
from evolve.store.program_store import ProgramStore, StoreError

MAX_DIFF_LINES = 80  # the terminal view shows at most this many diff lines per step
MAX_NAMES = 12  # objective names listed per step in the terminal before "+N more"
CHANGE_TOL = 1e-12  # an objective moved when it changed by more than this (float noise is not a gain)


class LineageError(StoreError):
    """The program asked for is not in the run (or the run has no programs), worded as one line."""


@dataclass(frozen=True)
class LineageStep:
    """One program of the chain and how it differs from its parent (the seed has no parent)."""

    program_id: int
    label: str  # RUN:N, the program's number within its run as `evolve show RUN:N` takes it
    parent_id: int | None
    iteration: int
    policy: str  # "" for the seed
    island: int
    code: str
    diff: str  # unified diff against the parent's code, "" for the seed
    scores_before: dict[str, float] | None  # the parent's vector, None for the seed
    scores_after: dict[str, float]
    gained: tuple[str, ...]  # objectives that went up (a 0/1 test: 0 -> 1)
    lost: tuple[str, ...]  # objectives that went down
    scalar_before: float | None
    scalar_after: float
    solved: bool
    edit: str  # the answer text that produced this program
    completion: str | None  # the whole completion of the policy call it came from, if stored

    @property
    def scalar_delta(self) -> float | None:
        return None if self.scalar_before is None else self.scalar_after - self.scalar_before


@dataclass(frozen=True)
class Lineage:
    """The chain from the root (the seed, iteration 0) to `target_id`, oldest first."""

    run_id: int
    run_name: str
    problem: str
    target_id: int
    chosen_as: str  # "first solved", "best by scalar" or "chosen"
    steps: tuple[LineageStep, ...]

    @property
    def target_label(self) -> str:
        return self.steps[-1].label if self.steps else f"store id {self.target_id}"


def ancestry(store: ProgramStore, run_id: int, program_id: int | None = None) -> Lineage:
    """The lineage of `program_id`, or by default of the run's first solved program, else its best by scalar."""
    run = store.get_run(run_id)
    if program_id is not None:
        programs = store.lineage_programs(run_id, program_id)  # the chain only, not the run's every program
        if program_id not in programs:
            raise LineageError(f"program {program_id} is not in run {run_id} ({store.count_programs(run_id)} "
                               f"programs; `evolve show {run_id}` lists its best)")
        target, chosen_as = programs[program_id], "chosen"
    else:
        solved = store.first_solved(run_id)
        best = store.best_programs(run_id, 1)
        if solved is None and not best:
            raise LineageError(f"run {run_id} has no programs yet (its seed program was never stored)")
        target, chosen_as = (solved, "first solved") if solved is not None else (best[0], "best by scalar")
        programs = store.lineage_programs(run_id, target.id)
    chain = [target]
    parent_id = target.parent_id
    while parent_id is not None and parent_id in programs and len(chain) <= len(programs):  # bound: no cycles
        chain.append(programs[parent_id])
        parent_id = chain[-1].parent_id
    chain.reverse()
    completions = store.call_completions(run_id, (program.id for program in chain))
    labels = {program.id: f"{run_id}:{store.program_number(run_id, program.id)}" for program in chain}
    steps = tuple(_step(program, parent, completions.get(program.id), labels)
                  for parent, program in zip([None, *chain[:-1]], chain, strict=True))
    return Lineage(run_id, run.name, run.problem, target.id, chosen_as, steps)


def moved(before: dict[str, float], after: dict[str, float]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(gained, lost): objectives in both vectors that went up, and that went down, in `after`'s order."""
    common = [name for name in after if name in before]
    gained = tuple(name for name in common if after[name] - before[name] > CHANGE_TOL)
    lost = tuple(name for name in common if before[name] - after[name] > CHANGE_TOL)
    return gained, lost


def code_diff(parent: Program, child: Program, labels: dict[int, str]) -> str:
    lines = difflib.unified_diff(parent.code.splitlines(), child.code.splitlines(),
                                 fromfile=f"{labels[parent.id]} (parent)", tofile=labels[child.id], lineterm="")
    return "\n".join(lines)


def _step(program: Program, parent: Program | None, completion: str | None, labels: dict[int, str]) -> LineageStep:
    gained, lost = moved(parent.scores, program.scores) if parent else ((), ())
    return LineageStep(
        program_id=program.id, label=labels[program.id], parent_id=program.parent_id, iteration=program.iteration,
        policy=program.policy, island=program.island, code=program.code,
        diff=code_diff(parent, program, labels) if parent else "",
        scores_before=dict(parent.scores) if parent else None, scores_after=dict(program.scores),
        gained=gained, lost=lost, scalar_before=parent.scalar if parent else None, scalar_after=program.scalar,
        solved=program.solved, edit=program.edit, completion=completion)


def step_title(index: int, step: LineageStep) -> str:
    """'step k: RUN:N (store id ID) iteration i by POLICY, scalar a -> b (+d)'; the seed: 'step 0: RUN:1 (store id
    ID) iteration 0 (seed), ...'. RUN:N is what `evolve show` and `evolve lineage RUN N` take; ID is the store-wide
    id (--id), as the web view names it."""
    who = f"by {step.policy}" if step.policy else "(seed)"
    if step.scalar_before is None:
        scalar = f"scalar {step.scalar_after:.4f}"
    else:
        scalar = f"scalar {step.scalar_before:.4f} -> {step.scalar_after:.4f} ({step.scalar_delta:+.4f})"
    return f"step {index}: {step.label} (store id {step.program_id}) iteration {step.iteration} {who}, {scalar}"


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f" (+{len(names) - MAX_NAMES} more)" if len(names) > MAX_NAMES else "")


def render_lineage(lineage: Lineage, console: Console) -> None:
    """The lineage on a terminal: a header per step, objectives gained (green) and lost (red), the diff."""
    console.print(Text(f"run {lineage.run_id} ({lineage.run_name}), problem {lineage.problem}: lineage of "
                       f"{lineage.target_label} (store id {lineage.target_id}, {lineage.chosen_as}), "
                       f"{len(lineage.steps)} steps", style="bold"))
    for index, step in enumerate(lineage.steps):
        console.print()
        title = Text(step_title(index, step), style="bold cyan")
        title.append(f"  island {step.island}" + ("  SOLVED" if step.solved else ""), style="bold green"
                     if step.solved else "dim")
        console.print(title)
        if step.scalar_before is None:
            console.print(Text(f"seed program, {len(step.code.splitlines())} lines", style="dim"))
            continue
        moves = Text()
        moves.append("gained: ", style="dim")
        moves.append(_names(step.gained) or "none", style="green" if step.gained else "dim")
        moves.append("   lost: ", style="dim")
        moves.append(_names(step.lost) or "none", style="red" if step.lost else "dim")
        console.print(moves)
        lines = step.diff.splitlines()
        if not lines:
            console.print(Text("no change in the code", style="dim"))
            continue
        console.print(Syntax("\n".join(lines[:MAX_DIFF_LINES]), "diff", theme="ansi_dark", word_wrap=True))
        if len(lines) > MAX_DIFF_LINES:
            console.print(Text(f"... diff truncated: {len(lines) - MAX_DIFF_LINES} more lines of {len(lines)} "
                               f"(`--html FILE` shows it whole)", style="yellow"))


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       background: #f6f7f9; margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 6px; }
section.step { background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.08); padding: 10px 16px; margin: 16px 0; }
h2 { font-size: 16px; margin: 4px 0 8px; }
.solved { color: #0a7a36; font-weight: 600; }
.gained { color: #0a7a36; } .lost { color: #c0121f; } .none { color: #777; }
pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f3f4f6;
      padding: 8px; overflow-x: auto; margin: 6px 0; white-space: pre; }
pre.diff span { display: block; }
pre.diff, pre.diff span { white-space: pre-wrap; overflow-wrap: anywhere; } /* long lines wrap, never cut */
.add { background: #e6f6ea; color: #075e25; } .del { background: #fde8e8; color: #a0101b; }
.hunk { color: #6a3fb5; } .meta { color: #555; font-weight: 600; }
.vector { max-height: 320px; overflow-y: auto; display: inline-block; }
table { border-collapse: collapse; }
th, td { border: 1px solid #dde1e6; padding: 2px 8px; text-align: left; font-size: 13px; }
th { background: #eef1f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.up { background: #d8f3df; } td.down { background: #fbdcdc; }
details summary { cursor: pointer; color: #333; margin: 6px 0; }
"""


def _diff_html(diff: str) -> str:
    classes = {"+++": "meta", "---": "meta", "@@": "hunk", "+": "add", "-": "del"}
    spans = []
    for line in diff.splitlines():
        kind = next((c for prefix, c in classes.items() if line.startswith(prefix)), "")
        spans.append(f'<span class="{kind}">{escape(line)}</span>' if kind else f"<span>{escape(line)}</span>")
    return f'<pre class="diff">{"".join(spans)}</pre>'


def _vector_html(step: LineageStep) -> str:
    before = step.scores_before or {}
    rows = []
    for name, value in step.scores_after.items():
        old = before.get(name)
        change = "" if old is None else "up" if name in step.gained else "down" if name in step.lost else ""
        delta = "" if old is None or not change else f"{value - old:+.4g}"
        cls = f"num {change}" if change else "num"
        rows.append(f"<tr><td>{escape(name)}</td><td class=\"num\">{'' if old is None else f'{old:.4g}'}</td>"
                    f'<td class="{cls}">{value:.4g}</td><td class="{cls}">{delta}</td></tr>')
    return ('<div class="vector"><table><thead><tr><th>objective</th><th>before</th><th>after</th><th>change</th>'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _step_html(index: int, step: LineageStep) -> str:
    solved = ' <span class="solved">solved</span>' if step.solved else ""
    parts = [f'<section class="step" id="p{step.program_id}"><h2>{escape(step_title(index, step))}, island '
             f"{step.island}{solved}</h2>"]
    if step.scores_before is not None:
        for label, names in (("gained", step.gained), ("lost", step.lost)):
            shown = escape(", ".join(names)) if names else "none"
            parts.append(f'<div>{label}: <span class="{label if names else "none"}">{shown}</span></div>')
    parts.append(_vector_html(step))
    if step.scores_before is None:
        parts.append(f"<details><summary>seed code</summary><pre>{escape(step.code)}</pre></details>")
    else:
        parts.append(_diff_html(step.diff) if step.diff else '<p class="none">no change in the code</p>')
        parts.append(f"<details><summary>the answer that made it</summary><pre>{escape(step.edit)}</pre></details>")
        if step.completion is not None:
            parts.append(f"<details><summary>the whole completion</summary><pre>{escape(step.completion)}</pre>"
                         f"</details>")
    return "".join(parts) + "</section>"


def lineage_html(lineage: Lineage) -> str:
    """The lineage as one self-contained HTML page; every string from the store is escaped."""
    title = f"run {lineage.run_id}: lineage of {lineage.target_label}"
    last = lineage.steps[-1]
    ancestors = len(lineage.steps) - 1
    head = (f"<h1>{escape(title)}</h1><p>Run {lineage.run_id} ({escape(lineage.run_name)}), problem "
            f"{escape(lineage.problem)}: program {lineage.target_label} (store id {lineage.target_id}, "
            f"{escape(lineage.chosen_as)}) and its "
            f"{ancestors} ancestor{'s' * (ancestors != 1)}, from the seed. Changed scores are highlighted: "
            f"green went up, red went down.</p>")
    final = f"<details><summary>code of {last.label}</summary><pre>{escape(last.code)}</pre></details>"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>evolve {escape(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>", "<main>", head,
        *(_step_html(index, step) for index, step in enumerate(lineage.steps)), final,
        "</main>", "</body>", "</html>", ""])
