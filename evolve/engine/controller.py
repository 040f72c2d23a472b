"""The asyncio evolution loop: select, prompt, generate, edit, evaluate, commit, for N iterations."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping

from evolve.config import RunConfig
from evolve.engine.driving import end_tasks, retrieve_error
from evolve.engine.ensemble import Choice, SearchChoices
from evolve.engine.events import (
    EvaluationEnded,
    EvaluationStarted,
    IterationCommitted,
    IterationStarted,
    Observer,
    RequestEnded,
    RequestStarted,
    RunProgressed,
    ignore,
)
from evolve.engine.offspring import ChildScorer, code_key, missing_answers, offspring, require_seed
from evolve.engine.run_setup import requests_per_iteration, selection_for
from evolve.engine.run_stats import RunStats, describe_iteration
from evolve.engine.schedule import IterationSchedule
from evolve.engine.stop_rules import StopRule
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem
from evolve.records import Completion, Evaluation, MutationRequest, Program, ProgramHeader, code_key_of
from evolve.search.novelty import ChildrenInFlight, NearDuplicate, NoveltyIndex, novelty_index
from evolve.search.prompt_templates import load_template
from evolve.search.prompts import Prompt, PromptOptions
from evolve.search.selection import Selector
from evolve.seeds import request_seed
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore


class Controller:
    """Runs (or resumes) one run to its iteration budget; every iteration is committed on its own."""

    def __init__(
        self,
        config: RunConfig,
        problem: Problem,
        store: ProgramStore,
        policy: Policy | Mapping[str, Policy],
        run_id: int,
        on_event: Observer | None = None,
        eval_slots: asyncio.Semaphore | None = None,
        eval_pool: EvaluatorPool | None = None,
    ) -> None:
        self.config = config
        self.problem = problem
        self.store = store
        # an ensemble's backends by policy name ([[policies]]), or the one [policy]'s backend
        policies = policy if isinstance(policy, Mapping) else {config.policy.name: policy}
        self.choices = SearchChoices(config, policies)
        self.policy = policies[config.policy.name]
        self.run_id = run_id
        self.on_event: Observer = on_event or ignore
        self.selector = Selector(selection_for(config, problem), problem.objectives, config.run.seed)
        self.stats = RunStats(iterations_target=config.run.iterations, run_id=run_id,
                              live_tokens=live_token_count(policies.values()))
        self.prompt_options = PromptOptions.from_policy(config.policy)
        self.template = load_template(config.policy.template)
        self._seen_code: set[str] = set()
        self.novelty: NoveltyIndex | None = novelty_index(config.novelty)  # None when the filter is off
        # novelty.in_flight: accepted children of iterations not yet committed, compared too. Which siblings are in
        # flight depends on timing, as the commit order already does with several iterations in flight. A resume
        # sees the rejections stored with committed iterations (their reason names the sibling's iteration, not a
        # program: that iteration may never have been committed) and starts with none in flight, since it runs
        # only uncommitted iterations again, and their children were never stored.
        self.in_flight = ChildrenInFlight(config.novelty.threshold) \
            if self.novelty is not None and config.novelty.in_flight else None
        self._errors_in_row = 0
        self._restored: bool | None = None  # what restore() returned, once it ran (run() then does not repeat it)
        self._clock_started = time.monotonic()
        self._clock_base = 0.0  # active seconds of earlier processes of this run, read from the store in run()
        self.requests_per_iteration = requests_per_iteration(config)
        self.stop_rule = StopRule.of(config.run)
        self._stop = asyncio.Event()  # set once the stop rule holds: the iterations in flight are dropped
        self._request_slots = asyncio.Semaphore(config.run.concurrency)  # requests in flight, all iterations
        # an experiment passes one semaphore to all its cells: eval_workers then bounds them together. No cache
        # (capacity 0): admitted code is never offered again, and code that failed is evaluated again as it always was
        # with run.warm_evaluators, children are scored on warm evaluator processes: the caller's pool (an
        # experiment's cells share one, which its owner closes) or one of this run's own, closed when run() ends
        self.scorer = ChildScorer(eval_slots or asyncio.Semaphore(config.run.eval_workers), capacity=0,
                                  pool=eval_pool if config.run.warm_evaluators else None)
        self._own_pool = config.run.warm_evaluators and eval_pool is None

    async def run(self) -> RunStats:
        if self._own_pool:
            self.scorer.pool = EvaluatorPool(self.config.run.eval_workers, self.config.run.evaluator_recycle)
        try:
            return await self._run()
        finally:
            if self._own_pool and self.scorer.pool is not None:
                await self.scorer.pool.close()
                self.scorer.pool = None

    async def _run(self) -> RunStats:
        self._clock_started = time.monotonic()
        self._clock_base = self.store.run_elapsed_s(self.run_id)
        if not (self._restored if self._restored is not None else self.restore()):
            self._admit(await self._seed())
        pending = IterationSchedule(self.config.run.iterations, self.store.completed_iterations(self.run_id))
        self.stats.iterations_done = self.stats.iterations_at_start = pending.completed
        self._check_stop()  # a resumed run that already met its stop rule stays done
        self.on_event(RunProgressed(self.stats))
        if self.stats.stopped:
            return self.stats
        # An iteration holds a request slot only while it generates: with eval_workers more iterations than request
        # slots, the policy keeps `concurrency` requests in flight while earlier children are being evaluated.
        in_flight = self.config.run.concurrency + self.config.run.eval_workers
        self.stats.workers = in_flight
        workers = [asyncio.create_task(self._worker(pending)) for _ in range(in_flight)]
        all_done = asyncio.gather(*workers)
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({all_done, stop}, return_when=asyncio.FIRST_COMPLETED)
            if all_done.done():
                all_done.result()  # a worker's error (PolicyUnavailable, a bug) ends the run here
        finally:
            all_done.add_done_callback(retrieve_error)  # ends once the workers have: never logged as unretrieved
            await end_tasks([stop, *workers])
        return self.stats

    def _check_stop(self) -> None:
        """Set stats.stopped (and wake _run) once the run's stop rule holds."""
        if self.stop_rule.active and not self.stats.stopped:
            self.stats.stopped = self.stop_rule.reason(self.stats.best, self.stats.first_solved)
            if self.stats.stopped:
                self._stop.set()

    def run_elapsed_s(self) -> float:
        """The run's active wall clock: this process's seconds plus what earlier processes of the run stored."""
        return self._clock_base + time.monotonic() - self._clock_started

    async def _seed(self) -> Program:
        evaluation = require_seed(self.problem, await self._evaluate(self.problem.initial_code))
        child = self._child_record(self.problem.initial_code, None, 0, "", evaluation)
        (program,) = self.store.record_iteration(self.run_id, 0, [child], run_elapsed_s=self.run_elapsed_s())
        return program

    def restore(self) -> bool:
        """Rebuild selection, the seen-code set and the stats from the run's stored programs, replayed in commit
        order as headers streamed from the store (no code) with each committed iteration's migration; the programs
        the state keeps are then read whole. The state equals the one the uninterrupted process held. False when
        the run has no program yet. Called once, by run() or before it (a resume reads the store before it writes)."""
        restored = False
        stored_ids: list[int] = []  # for the novelty index, which needs the code the headers lack
        for event in self.store.replay(self.run_id, with_scores=self.selector.reads_scores()):
            if isinstance(event, int):  # an iteration's commit: _commit migrates, then restarts, after admitting
                self.selector.maybe_migrate(event)
                self.selector.maybe_restart(event)
            else:
                self._admit(event)
                restored = True
                if self.novelty is not None:
                    stored_ids.append(event.id)
        if self.novelty is not None:
            for start in range(0, len(stored_ids), 500):  # a batch of programs at a time, their code then dropped
                batch = self.store.programs_by_id(stored_ids[start:start + 500])
                for program_id in sorted(batch):
                    self.novelty.add(program_id, batch[program_id].code)
        if self.choices.needs_history():  # an ensemble's bandit, the instruction population
            self.choices.restore(self.store.iteration_choices(self.run_id))
        kept = self.selector.held_ids() | {p.id for p in (self.stats.best, self.stats.first_solved) if p is not None}
        whole = self.store.programs_by_id(kept)
        self.selector.materialize(whole)
        self.stats.best = whole.get(self.stats.best.id) if self.stats.best else None
        self.stats.first_solved = whole.get(self.stats.first_solved.id) if self.stats.first_solved else None
        self._restored = restored
        return restored

    def _admit(self, program: Program) -> None:
        self._seen_code.add(code_key_of(program))
        if self.novelty is not None and not isinstance(program, ProgramHeader):  # a resume adds headers' code later
            self.novelty.add(program.id, program.code)
        self.stats.consider(program)
        if program.iteration == 0:  # the seed starts every island
            for island in range(self.config.selection.islands):
                self.selector.add(dataclasses.replace(program, island=island))
        else:
            self.selector.add(program)

    async def _worker(self, pending: IterationSchedule) -> None:
        for iteration in pending:  # shared by the workers: each takes the next iteration not yet done
            await self._iterate(iteration)

    async def _iterate(self, iteration: int) -> None:
        """One iteration: `requests_per_iteration` requests on one parent, committed together once all are done."""
        island, parent, inspirations = self.selector.sample(iteration)
        request = MutationRequest(
            iteration=iteration,
            island=island,
            parent=parent,
            inspirations=inspirations,
            problem_description=self.problem.description,
            objective_names=self.problem.objectives,
        )
        choice = self.choices.choose(iteration)
        prompt = choice.prompt(request, self.problem.prompt)
        prompt_text = prompt.text if prompt.text is not None else render_prompt_text(prompt.messages, prompt.prefill)
        seen_in_iteration: set[str] = set()  # children of every request of this iteration, for duplicates
        self.stats.iteration_started(iteration, time.monotonic())
        self.on_event(IterationStarted(self.stats, iteration))
        tasks = [asyncio.create_task(self._request(iteration, attempt, island, parent, prompt, prompt_text,
                                                   seen_in_iteration, choice))
                 for attempt in range(choice.requests)]
        committed = False
        try:
            outcomes = await _all_or_none(tasks)
            self.stats.iteration_ended(iteration, time.monotonic(), committed=True)
            committed = True
            self._commit(iteration, [record for records in outcomes for record in records], island, parent, choice)
        finally:  # committed (its children are in the novelty index now) or dropped
            if not committed:
                self.stats.iteration_ended(iteration, time.monotonic(), committed=False)
            if self.in_flight is not None:
                self.in_flight.release(iteration)

    async def _request(self, iteration: int, attempt: int, island: int, parent: Program, prompt: Prompt,
                       prompt_text: str, seen_in_iteration: set[str], choice: Choice
                       ) -> list[AttemptRecord | ChildRecord]:
        """One request of an iteration, with its own sampling seed: its policy call and outcomes, or its error."""
        seed = request_seed(self.config.run.seed, iteration, attempt)
        async with self._request_slots:
            started = time.monotonic()
            self.stats.in_flight += 1
            self.on_event(RequestStarted(self.stats, iteration, attempt))
            ended = RequestEnded(self.stats, iteration, attempt, error="cancelled")
            try:
                completion = await choice.policy.generate(prompt, seed)
                ended = RequestEnded(self.stats, iteration, attempt, completion.completion_tokens,
                                     time.monotonic() - started)
            except PolicyUnavailable as exc:
                ended = RequestEnded(self.stats, iteration, attempt, error=str(exc).splitlines()[0][:300])
                raise  # the run stops; this iteration stays unrecorded so that a resume asks again
            except Exception as exc:  # any backend failure is a recorded attempt, never a crash
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                ended = RequestEnded(self.stats, iteration, attempt, error=reason)
                self._errors_in_row += 1
                limit = self.config.run.stop_after_policy_errors
                if limit and self._errors_in_row >= limit:  # this iteration stays unrecorded: a resume asks again
                    raise PolicyUnavailable(f"the policy failed {self._errors_in_row} calls in a row (last: "
                                            f"{reason}); stopped rather than spend the budget on errors "
                                            "(run.stop_after_policy_errors)") from exc
                return [AttemptRecord("policy_error", reason, prompt=prompt_text)]
            finally:
                self.stats.in_flight -= 1
                self.on_event(ended)
        self._errors_in_row = 0
        completion = dataclasses.replace(completion, latency_s=completion.latency_s or time.monotonic() - started)
        self.stats.policy_calls += 1
        self.stats.completion_tokens += completion.completion_tokens
        self.stats.generation_s += completion.latency_s
        records = await self._children(iteration, island, parent, prompt.prefill, completion, seen_in_iteration,
                                       choice)
        call = AttemptRecord(
            "policy_call",
            completion.finish_reason or None,
            prompt=prompt_text,
            completion=completion.text,
            latency_s=completion.latency_s,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
        )
        return [call, *records]

    async def _children(
        self, iteration: int, island: int, parent: Program, prefill: str, completion: Completion,
        seen_in_iteration: set[str], choice: Choice,
    ) -> list[AttemptRecord | ChildRecord]:
        """The completion's answers as children (evaluated) or failures; `seen_in_iteration` holds the code of
        the children of this iteration's other requests, which are not in the store yet."""
        records: list[AttemptRecord | ChildRecord] = []
        candidates: list[tuple[str, str]] = []
        children = offspring(parent.code, prefill + completion.text, choice.options)
        for child in children:
            if child.code is None:
                kind = "duplicate" if child.unchanged else "edit_failed"
                records.append(AttemptRecord(kind, child.failure, completion=child.answer))
                continue
            key = code_key(child.code)
            if key in self._seen_code or key in seen_in_iteration:
                records.append(AttemptRecord("duplicate", "same code as an earlier program", child_code=child.code))
                continue
            near = self._near_duplicate(iteration, child.code)
            if near is not None:  # rejected before evaluation: it copies a program of the population (or in flight)
                records.append(AttemptRecord("duplicate", near.reason, child_code=child.code))
                continue
            seen_in_iteration.add(key)
            candidates.append((child.answer, child.code))
        records += missing_answers(len(children), choice.options.answers, completion.text)
        evaluations = await asyncio.gather(*(self._evaluate(code) for _, code in candidates))
        for (answer, code), evaluation in zip(candidates, evaluations, strict=True):
            if evaluation.ok:
                records.append(self._child_record(code, parent.id, island, answer, evaluation, choice.name))
            else:
                reason = f"{evaluation.failure}: {evaluation.detail}"[:300]
                records.append(AttemptRecord("eval_failed", reason, completion=answer, child_code=code))
        return records

    def _near_duplicate(self, iteration: int, code: str) -> NearDuplicate | None:
        """What the novelty filter finds `code` copies; a child it accepts is held in flight (novelty.in_flight).
        Synchronous, so no other child is checked between this check and the hold."""
        if self.novelty is None:
            return None
        fingerprint = self.novelty.fingerprint(code)
        near = self.novelty.near_duplicate_of(*fingerprint)
        if self.in_flight is not None and near is None:
            near = self.in_flight.near_duplicate_of(*fingerprint)
            if near is None:
                self.in_flight.hold(iteration, *fingerprint)
        return near

    async def _evaluate(self, code: str) -> Evaluation:
        self.stats.evaluating += 1
        self.on_event(EvaluationStarted(self.stats))
        try:
            return await self.scorer.evaluate(self.problem, code)
        finally:
            self.stats.evaluating -= 1
            self.on_event(EvaluationEnded(self.stats))

    def _child_record(
        self, code: str, parent_id: int | None, island: int, edit: str, evaluation: Evaluation, policy: str = ""
    ) -> ChildRecord:
        return ChildRecord(
            code=code,
            parent_id=parent_id,
            island=island,
            policy=(policy or self.config.policy.name) if parent_id is not None else "",
            edit=edit,
            scores=evaluation.scores,
            scalar=self.problem.scalar(evaluation.scores),
            solved=self.problem.is_solved(evaluation.scores),
            artifacts=evaluation.artifacts,
        )

    def _commit(self, iteration: int, records: list[AttemptRecord | ChildRecord], island: int,
                parent: Program | int | None, choice: Choice | None = None) -> None:
        """Write the iteration, admit its children, and record what its choice of policy and instruction brought;
        `parent` is the program the calls edited (or its id, for a caller that never chose)."""
        parent_id = parent.id if isinstance(parent, Program) else parent
        name = choice.name if choice is not None else self.config.policy.name
        instruction = choice.instruction if choice is not None else None
        programs = self.store.record_iteration(self.run_id, iteration, records, policy=name, parent_id=parent_id,
                                               run_elapsed_s=self.run_elapsed_s(), prompt_variant=instruction)
        if isinstance(parent, Program):
            best = max((program.scalar for program in programs), default=None)
            self.choices.record(name, instruction, max(0.0, best - parent.scalar) if best is not None else 0.0)
        for program in programs:
            self._admit(program)
        self.selector.maybe_migrate(iteration)
        self.selector.maybe_restart(iteration)
        outcome_kinds = [r.kind for r in records if isinstance(r, AttemptRecord) and r.kind != "policy_call"]
        self.stats.outcomes.update(outcome_kinds)
        self.stats.outcomes.update(["child"] * len(programs))
        self.stats.children += len(programs)
        self.stats.iterations_with_child += bool(programs)
        self.stats.iterations_done += 1
        line = describe_iteration(iteration, island, programs, records,
                                  f"{self.run_id}:{self.stats.programs - len(programs) + 1}")
        self.stats.note(line)
        self._check_stop()
        self.on_event(IterationCommitted(self.stats, iteration, line))


async def _all_or_none(tasks: list[asyncio.Task[list[AttemptRecord | ChildRecord]]]
                       ) -> list[list[AttemptRecord | ChildRecord]]:
    """Every request's records; PolicyUnavailable in one request: the others are dropped, the iteration stays
    unrecorded."""
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task.done():
                task.result()  # the first failed request's error (CancelledError for one cancelled elsewhere)
        return [task.result() for task in tasks]
    finally:
        await end_tasks(tasks)


def live_token_count(policies: Iterable[Policy]) -> Callable[[], int] | None:
    """What the policies' models have generated so far, counted as they generate (a sign of life while a long
    answer is on its way); None when no policy counts (a remote server answers whole completions only)."""
    counters = [policy.generated_tokens for policy in policies if callable(getattr(policy, "generated_tokens", None))]
    return (lambda: sum(counter() for counter in counters)) if counters else None


def render_prompt_text(messages: list[dict[str, str]], prefill: str) -> str:
    """The prompt as stored for replay and RL export: role-tagged messages plus the prefill."""
    parts = [f"<{m['role']}>\n{m['content']}" for m in messages]
    return "\n".join(parts) + f"\n<assistant>\n{prefill}"
