"""A run split by what its iterations chose: one row per policy of an ensemble, or per evolved instruction (with its
text), with its iterations, answers, valid children, the share of answers that were valid, the children that beat
their parent, the mean gain of its iterations and its best child. Computed from store.iteration_choices;
run_summary.py renders a run's rows, html_tables.py an experiment's instruction rows pooled per policy arm."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from evolve.instruction_texts import instruction_text
from evolve.store.choice_scans import IterationChoice
from evolve.store.program_store import ProgramStore


@dataclass(frozen=True)
class ChoiceRow:
    """What the iterations that chose one policy (or one instruction) brought."""

    name: str
    iterations: int
    answers: int  # answer outcomes: children, duplicates, edit and evaluation failures
    children: int  # valid, scored children
    valid_share: float | None  # children / answers
    improvements: int  # children scoring above their parent
    best: float | None  # the best child's scalar
    mean_gain: float = 0.0  # mean over its iterations of how far the best child rose above its parent (0 if not)
    text: str = ""  # an instruction's text (instruction_texts.py); "" in rows by policy


@dataclass
class _Sum:
    iterations: int = 0
    answers: int = 0
    children: int = 0
    improvements: int = 0
    best: float | None = None
    gain: float = 0.0

    def add(self, choice: IterationChoice) -> None:
        self.iterations += 1
        self.gain += choice.gain
        self.answers += choice.answers
        self.children += choice.children
        self.improvements += choice.improvements
        if choice.best_scalar is not None:
            self.best = choice.best_scalar if self.best is None else max(self.best, choice.best_scalar)


def _rows(sums: dict[str, _Sum], texts: bool = False) -> tuple[ChoiceRow, ...]:
    return tuple(ChoiceRow(name, s.iterations, s.answers, s.children, s.children / s.answers if s.answers else None,
                           s.improvements, s.best, s.gain / s.iterations if s.iterations else 0.0,
                           instruction_text(name) if texts else "") for name, s in sums.items())


def split_run(choices: Iterable[IterationChoice]) -> tuple[tuple[ChoiceRow, ...], tuple[ChoiceRow, ...]]:
    """(rows by policy, rows by instruction), each in order of first use, from one pass over the run's iterations;
    iterations stored without an instruction are in no instruction row."""
    by_policy: dict[str, _Sum] = {}
    by_instruction: dict[str, _Sum] = {}
    for choice in choices:
        by_policy.setdefault(choice.policy, _Sum()).add(choice)
        if choice.prompt_variant is not None:
            by_instruction.setdefault(choice.prompt_variant, _Sum()).add(choice)
    return _rows(by_policy), _rows(by_instruction, texts=True)


@dataclass(frozen=True)
class ArmInstructions:
    """An experiment arm's evolved instructions, pooled over its cells (every problem and seed)."""

    policy: str
    runs: int  # the arm's runs that recorded an instruction
    rows: tuple[ChoiceRow, ...]  # one per instruction, in order of first use (first cell first)


def instructions_by_arm(cells: Iterable[tuple[ProgramStore, str, int | None]]) -> tuple[ArmInstructions, ...]:
    """For each policy arm of `cells` ((store, policy, run id or None): an experiment's pieces each have their own
    store) whose runs evolved instructions, the rows of its instructions pooled over its runs; arms without prompt
    evolution are left out. A gain pools scalars of different problems: compare instructions within an arm, not
    across problems of other scales."""
    sums: dict[str, dict[str, _Sum]] = {}
    runs: dict[str, int] = {}
    for store, policy, run_id in cells:
        if run_id is None or not _evolves_instructions(store.get_run(run_id).config_json):
            continue  # a run without prompt evolution is not scanned
        used = False
        for choice in store.iteration_choices(run_id):
            if choice.prompt_variant is not None:
                sums.setdefault(policy, {}).setdefault(choice.prompt_variant, _Sum()).add(choice)
                used = True
        runs[policy] = runs.get(policy, 0) + used
    return tuple(ArmInstructions(policy, runs[policy], _rows(rows, texts=True)) for policy, rows in sums.items())


def _evolves_instructions(config_json: str) -> bool:
    """Whether a stored run config enables [prompt_evolution] (plain JSON: any version's config reads)."""
    try:
        section = json.loads(config_json).get("prompt_evolution")
    except (ValueError, AttributeError):
        return False
    return isinstance(section, dict) and bool(section.get("enabled"))
