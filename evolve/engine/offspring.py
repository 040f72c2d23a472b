"""Offspring: a completion's answers turned into child programs, and children into scores, one way for every caller.

Evolution (engine.controller), `evolve train` (rl.rollouts) and veRL's reward (rl.verl_reward) all go through here:
`offspring` splits prefill + completion into its m answers (split_answers) and builds each child with
apply_rewrite / apply_diff, keeping the edit's failure reason when none is built; a `ChildScorer` evaluates children
in the sandbox a few at a time (on an EvaluatorPool's warm evaluator processes when it has one, else a fresh
process each), each (problem, code) once while it is cached. The cache takes evaluators to be
deterministic; the controller runs with it off (capacity 0), as it always re-evaluated code it had not admitted.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

from evolve.errors import UserError
from evolve.problems.evaluation import evaluate_program
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem
from evolve.records import Evaluation, code_key  # code_key: importers keep naming this module
from evolve.search.edits import EditError, apply_diff, apply_rewrite, split_answers
from evolve.search.prompts import PromptOptions
from evolve.store.records import AttemptRecord

NO_CHANGE = "no change"  # the edit's reason when an answer rebuilds its parent unchanged

CacheKey = tuple[str, str]  # (problem folder, code_key)


class SeedProgramError(UserError, RuntimeError):
    """The problem's initial program does not evaluate, so there is nothing to evolve from."""


@dataclass(frozen=True)
class Child:
    """One answer and the child it builds: `code`, or None with the edit's `failure` reason."""

    answer: str
    code: str | None
    failure: str | None = None

    @property
    def unchanged(self) -> bool:
        """The answer rebuilt the parent as it was: a duplicate of it rather than a broken edit."""
        return self.failure == NO_CHANGE


@dataclass(frozen=True)
class ScoredChild:
    """A child with its objective vector: None when it was not built or its evaluation failed."""

    child: Child
    vector: list[float] | None


def build_child(parent_code: str, answer: str, edit_format: str) -> Child:
    """The child one answer makes of the parent (a whole-block rewrite, or SEARCH/REPLACE edits for "diff")."""
    try:
        code = apply_diff(parent_code, answer) if edit_format == "diff" else apply_rewrite(parent_code, answer)
    except EditError as exc:
        return Child(answer, None, exc.reason)
    return Child(answer, code)


def offspring(parent_code: str, text: str, options: PromptOptions) -> list[Child]:
    """The children of a completion: `text` (the prompt's prefill + the completion) split into up to
    `options.answers` answers in `options.answer_tag` tags, each edited into the parent by `options.edit_format`."""
    return [build_child(parent_code, answer, options.edit_format)
            for answer in split_answers(text, options.answers, options.answer_tag)]


def missing_answers(written: int, asked: int, completion: str) -> list[AttemptRecord]:
    """One edit_failed record per answer a completion was asked for and did not hold, so a request's outcomes
    count its m answers (the policy_call record keeps the completion; a completion without any answer keeps it too,
    on its first record)."""
    if written >= asked:
        return []
    if written == 0:
        return [AttemptRecord("edit_failed", "no answer in the completion", completion=completion if i == 0 else None)
                for i in range(asked)]
    reason = f"missing from the completion ({written} of {asked} answers written)"
    return [AttemptRecord("edit_failed", reason) for _ in range(asked - written)]


def objective_vector(problem: Problem, evaluation: Evaluation) -> list[float] | None:
    """The evaluation's scores in the problem's objective order; None when the evaluation failed."""
    return [evaluation.scores[name] for name in problem.objectives] if evaluation.ok else None


def require_seed(problem: Problem, evaluation: Evaluation) -> Evaluation:
    """The seed program's evaluation, or SeedProgramError when it failed: there is nothing to evolve from."""
    if not evaluation.ok:
        raise SeedProgramError(f"{problem.path / 'initial.py'}: the initial program fails its evaluation "
                               f"({evaluation.failure}: {evaluation.detail})")
    return evaluation


class ChildScorer:
    """Evaluates children in the trusted evaluator's sandbox and keeps their evaluations by (problem, code).

    `slots` bounds the evaluations running at once: a semaphore shared with other scorers (an experiment's cells
    share one), or a count, which gets one semaphore per event loop (veRL's plain reward function runs each call in
    a fresh loop). `capacity`: evaluations kept, the oldest dropped first; None keeps all, 0 keeps none (every call
    evaluates). Concurrent requests for the same code in one event loop share one evaluation. `pool`: warm
    evaluator processes to score on (its owner closes it, and it belongs to one event loop); None: a fresh
    evaluator process per evaluation (evaluate_program).
    """

    def __init__(self, slots: int | asyncio.Semaphore = 2, capacity: int | None = None,
                 pool: EvaluatorPool | None = None) -> None:
        self.pool = pool
        self._shared_slots = slots if isinstance(slots, asyncio.Semaphore) else None
        self.workers = slots if isinstance(slots, int) else 0
        self.capacity = capacity
        self.evaluations = 0  # sandbox evaluations started (cache hits not counted)
        self._done: dict[CacheKey, Evaluation] = {}
        self._loop_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = \
            weakref.WeakKeyDictionary()
        self._running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[CacheKey, asyncio.Task[Evaluation]]] \
            = weakref.WeakKeyDictionary()

    async def evaluate(self, problem: Problem, code: str, workers: int | None = None) -> Evaluation:
        """The child's evaluation, from the cache when it holds one. `workers` sizes this event loop's semaphore
        when it is the loop's first evaluation (default: the scorer's count)."""
        if self.capacity == 0:
            return await self._run(problem, code, workers)
        key = (str(problem.path), code_key(code))
        if key in self._done:
            return self._done[key]
        running = self._running.setdefault(asyncio.get_running_loop(), {})
        if key not in running:
            running[key] = asyncio.ensure_future(self._run_and_keep(problem, code, workers, key, running))
        return await running[key]

    async def vector(self, problem: Problem, code: str | None, workers: int | None = None) -> list[float] | None:
        """The child's objective vector; None when there is no child or its evaluation failed."""
        if code is None:
            return None
        return objective_vector(problem, await self.evaluate(problem, code, workers))

    async def score(self, problem: Problem, parent_code: str, text: str, options: PromptOptions,
                    workers: int | None = None) -> list[ScoredChild]:
        """A completion's children (see `offspring`), each with its vector, scored concurrently."""
        children = offspring(parent_code, text, options)
        vectors = await asyncio.gather(*(self.vector(problem, child.code, workers) for child in children))
        return [ScoredChild(child, vector) for child, vector in zip(children, vectors, strict=True)]

    async def _run_and_keep(self, problem: Problem, code: str, workers: int | None, key: CacheKey,
                            running: dict[CacheKey, asyncio.Task[Evaluation]]) -> Evaluation:
        try:
            evaluation = await self._run(problem, code, workers)
            if self.capacity is not None and len(self._done) >= self.capacity:
                self._done.pop(next(iter(self._done)))
            self._done[key] = evaluation
            return evaluation
        finally:
            running.pop(key, None)

    async def _run(self, problem: Problem, code: str, workers: int | None) -> Evaluation:
        async with self._slots(workers):
            self.evaluations += 1
            if self.pool is not None:
                return await self.pool.evaluate(problem, code)
            return await evaluate_program(problem, code)

    def _slots(self, workers: int | None) -> asyncio.Semaphore:
        if self._shared_slots is not None:
            return self._shared_slots
        loop = asyncio.get_running_loop()
        if loop not in self._loop_slots:
            self._loop_slots[loop] = asyncio.Semaphore(workers or self.workers or 1)
        return self._loop_slots[loop]
