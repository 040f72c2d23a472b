"""One program for `evolve show RUN:N` (or `--id ID`): where it sits in its run (its number 1..N there, its parent's,
its store-wide id), its scores and its code; as rich text or as JSON-ready data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from evolve.records import Program
from evolve.report.run_summary import compact_vector
from evolve.store.program_store import ProgramStore


@dataclass(frozen=True)
class ProgramView:
    program: Program
    number: int  # within its run, 1..N in store order (1: the seed)
    parent_number: int | None
    run_name: str

    @property
    def label(self) -> str:
        return f"{self.program.run_id}:{self.number}"


def program_view(store: ProgramStore, program: Program) -> ProgramView:
    run = store.get_run(program.run_id)
    parent = None if program.parent_id is None else store.program_number(program.run_id, program.parent_id)
    return ProgramView(program, store.program_number(program.run_id, program.id), parent, run.name)


def program_dict(view: ProgramView) -> dict[str, Any]:
    p = view.program
    return {"run_id": p.run_id, "number": view.number, "id": p.id, "parent_number": view.parent_number,
            "parent_id": p.parent_id, "iteration": p.iteration, "island": p.island, "policy": p.policy,
            "scalar": p.scalar, "solved": p.solved, "scores": dict(p.scores), "code": p.code}


def render_program(view: ProgramView, console: Console) -> None:
    p = view.program
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold cyan")
    facts.add_column()
    parent = "none (the seed program)" if p.parent_id is None else \
        f"{p.run_id}:{view.parent_number} (store id {p.parent_id})"
    for key, value in (("program", f"{view.label} (store id {p.id}) of run {p.run_id}: {view.run_name}"),
                       ("iteration", f"{p.iteration}, island {p.island}" + (f", policy {p.policy}" if p.policy
                                                                            else "")),
                       ("parent", parent), ("scalar", f"{p.scalar:.4f}"), ("solved", "yes" if p.solved else "no"),
                       ("scores", compact_vector(p.scores))):
        facts.add_row(key, Text(value))
    console.print(facts)
    if console.is_terminal:
        console.print(Syntax(p.code.rstrip("\n"), "python", theme="ansi_dark", line_numbers=True, word_wrap=True))
    else:
        console.print(p.code.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    console.print(Text(f"ancestry: evolve lineage {p.run_id} {view.number}", style="dim"))
