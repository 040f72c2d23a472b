"""What a run's cascade evaluation and novelty filter saved: children stopped at a cheap stage (full evaluations
not run, and the seconds they would have taken, estimated) and children rejected as near-duplicates.

The cascade's numbers come from each program's `cascade` artifact (problems/cascade.py's CascadeNote): the stage it
stopped at and the wall seconds of each stage it ran, measured in the trusted evaluator process. The seconds a
stopped child did not spend are estimated as the mean seconds of the stages it skipped, over the run's programs
that did run them (the seed included); with none the estimate is None. That sample can be small and unlike the
stopped children (a slow seed that passed, wrong children that would have failed fast): `estimated_from` says how
many programs it rests on, and scripts/bench/replay_cascade.py measures the saving instead. Programs are read a batch
at a time, and only when the run's seed program was scored through a cascade.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from evolve.problems.cascade import CASCADE_ARTIFACT, CascadeNote
from evolve.store.program_store import ProgramStore

_BATCH = 500
NOVELTY_REASONS = ("duplicate: same structure", "duplicate: near-duplicate")  # failure_counts heads (novelty.py)


@dataclass(frozen=True)
class CascadeSavings:
    scored: int  # programs scored through the cascade (the seed included)
    stopped: int  # stopped below a stage's threshold: full evaluations not run
    stopped_by_stage: dict[str, int]  # stage function -> children stopped there
    stage_failures: int  # answers whose candidate failed inside a stage (crash, timeout, ...), so not run further
    spent_s: float  # wall seconds of every stage run, summed
    saved_s: float | None  # estimated wall seconds the stopped children did not spend; None when no child ran on
    mean_stage_s: dict[str, float]  # stage function -> mean wall seconds of one run of it
    estimated_from: int = 0  # programs that ran the final stage: the sample behind saved_s (small samples mislead)

    @property
    def saved_share(self) -> float | None:
        """saved / (spent + saved): the share of evaluation time the cascade took off."""
        if self.saved_s is None or self.spent_s + self.saved_s <= 0:
            return None
        return self.saved_s / (self.spent_s + self.saved_s)


def novelty_rejections(failures: dict[str, int]) -> int:
    """Answers the novelty filter rejected, from store.failure_counts' 'kind: reason head' counts."""
    return sum(count for reason, count in failures.items() if reason in NOVELTY_REASONS)


def cascade_savings(store: ProgramStore, run_id: int) -> CascadeSavings | None:
    """The run's cascade numbers; None when its programs were not scored through a cascade."""
    headers = store.program_headers(run_id)
    first = next(headers, None)
    if first is None or _note(store.programs_by_id([first.id]).get(first.id)) is None:
        return None
    notes: list[CascadeNote] = []
    batch = [first.id]
    for header in headers:
        batch.append(header.id)
        if len(batch) == _BATCH:
            notes.extend(_notes(store, batch))
            batch = []
    notes.extend(_notes(store, batch))
    return _savings(notes, _stage_failures(store, run_id))


def _note(program: object) -> CascadeNote | None:
    artifacts = getattr(program, "artifacts", None) or {}
    text = artifacts.get(CASCADE_ARTIFACT)
    return CascadeNote.from_artifact(text) if isinstance(text, str) else None


def _notes(store: ProgramStore, ids: list[int]) -> list[CascadeNote]:
    found = store.programs_by_id(ids)
    return [note for note in (_note(found[program_id]) for program_id in sorted(found)) if note is not None]


def _stage_failures(store: ProgramStore, run_id: int) -> int:
    return sum(1 for batch in store.outcome_batches(run_id) for attempt in batch
               if attempt.kind == "eval_failed" and ": cascade stage " in (attempt.reason or ""))


def _savings(notes: list[CascadeNote], stage_failures: int) -> CascadeSavings:
    seconds_by_stage: dict[int, list[float]] = defaultdict(list)
    names: dict[int, str] = {}
    for note in notes:
        for number, seconds in enumerate(note.seconds, start=1):
            seconds_by_stage[number].append(seconds)
        names[note.stage] = note.function
    means = {number: sum(values) / len(values) for number, values in seconds_by_stage.items()}
    stopped = [note for note in notes if note.stopped]
    saved: float | None = 0.0
    for note in stopped:
        skipped = range(note.stage + 1, note.stages + 1)
        if any(number not in means for number in skipped):
            saved = None
            break
        saved += sum(means[number] for number in skipped)
    return CascadeSavings(
        scored=len(notes), stopped=len(stopped),
        stopped_by_stage=dict(Counter(note.function for note in stopped).most_common()),
        stage_failures=stage_failures, spent_s=sum(sum(note.seconds) for note in notes), saved_s=saved,
        mean_stage_s={names.get(number, f"stage {number}"): mean for number, mean in sorted(means.items())},
        estimated_from=sum(1 for note in notes if not note.stopped))
