"""RL rollouts on the engine's own mutation prompts: sample G completions per prompt, split answers, score children.

A training prompt is exactly what `evolve run` would send for the problem's seed program (build_prompt on a
MutationRequest whose parent is the seed), so the reward trained on is the reward searched with. Each completion
becomes children and scores exactly as in evolution (engine.offspring: up to m answers, each edited into the parent
and scored with the problem's trusted evaluator in the sandbox, each child once per training run). An answer that
does not parse, leaves the program unchanged, or fails its evaluation scores a zero vector (VPO paper).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from sqlalchemy import select
from transformers import GenerationConfig, StoppingCriteriaList

from evolve.config import ConfigError
from evolve.engine.offspring import ChildScorer, code_key, require_seed
from evolve.policies.base import cut_at_stop, render_prompt
from evolve.policies.hf import _RowStops
from evolve.policies.provenance import problem_keys
from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import Problem, problem_key
from evolve.records import MutationRequest, Program
from evolve.rl.advantages import answer_key, duplicate_mask, reward_array
from evolve.rl.estimators import GroupRewards, objective_weights
from evolve.search.prompt_templates import PromptTemplate
from evolve.search.prompts import Prompt, PromptOptions, build_prompt
from evolve.store.program_store import ProgramStore
from evolve.store.tables import ExperimentRow


@dataclass(frozen=True)
class Task:
    """One training prompt: a problem's seed program as the parent, the engine's prompt for it, its token ids."""

    problem: Problem
    parent: Program
    prompt: Prompt
    prompt_ids: list[int]  # chat template + prefill, as the hf backend renders it
    options: PromptOptions


@dataclass
class Rollout:
    """One sampled completion and what its answers scored."""

    completion_ids: list[int]  # the sampled tokens the loss sees, up to and including the one that ended it
    text: str  # the completion cut at its stop string (the prefill not included)
    answers: list[str] = field(default_factory=list)
    codes: list[str | None] = field(default_factory=list)  # the child per answer; None when it could not be built
    vectors: list[list[float] | None] = field(default_factory=list)  # per answer; None: no child or failed eval


@dataclass
class Group:
    """G rollouts of one prompt, with rewards ``[G, m, d]``, which answers repeat an earlier one of their rollout
    (``[G, m]``, by normalised AST) and the best answer's declared scalar per rollout."""

    task: Task
    rollouts: list[Rollout]
    rewards: NDArray[np.float64]
    scalars: NDArray[np.float64]  # Problem.scalar of the rollout's best answer (0 when none scored); m = 1: GRPO's
    duplicates: NDArray[np.bool_]  # [G, m]
    seconds_generating: float = 0.0

    def estimator_input(self) -> GroupRewards:
        """What the advantage estimators read: rewards, duplicates and the problem's declared weights."""
        return GroupRewards(self.rewards, self.duplicates, objective_weights(self.task.problem))


async def seed_parent(problem: Problem) -> Program:
    """The problem's seed program, scored, as the parent of a training prompt."""
    evaluation = require_seed(problem, await evaluate_program(problem, problem.initial_code))
    return Program(id=0, run_id=0, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                   edit="", scores=evaluation.scores, scalar=problem.scalar(evaluation.scores),
                   solved=problem.is_solved(evaluation.scores), artifacts=evaluation.artifacts)


def parent_prompt(problem: Problem, parent: Program, options: PromptOptions, template: PromptTemplate) -> Prompt:
    """The engine's mutation prompt for `parent`: what `evolve run` sends when it selects that program."""
    request = MutationRequest(iteration=1, island=0, parent=parent, inspirations=(),
                              problem_description=problem.description, objective_names=problem.objectives)
    return build_prompt(request, options, template, problem.prompt)


async def seed_prompt(problem: Problem, options: PromptOptions, template: PromptTemplate) -> tuple[Program, Prompt]:
    """Score the problem's seed program and build the engine's mutation prompt for it."""
    parent = await seed_parent(problem)
    return parent, parent_prompt(problem, parent, options, template)


async def make_task(problem: Problem, tokenizer: Any, options: PromptOptions, template: PromptTemplate,
                    parent: Program | None = None) -> Task:
    """A training prompt for `parent` (default: the scored seed), rendered and tokenised as the hf backend would."""
    parent = parent or await seed_parent(problem)
    prompt = parent_prompt(problem, parent, options, template)
    ids = tokenizer(render_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"]
    return Task(problem, parent, prompt, list(ids), options)


def parents_store(spec: str) -> ProgramStore:
    """The evolve store named by `parents_db` (a SQLite path or a URL); a missing SQLite file is a ConfigError."""
    if "://" not in spec and not Path(spec).expanduser().is_file():
        raise ConfigError(f"parents_db '{spec}': no such file (give the store of earlier `evolve run`s)")
    return ProgramStore(spec, mode="read")  # reading parents never creates or alters a store


def tested_problems(store: ProgramStore) -> dict[str, str]:
    """The test problems of the experiments saved in an evolve store (by name, or a folder's last part), each with
    the experiment that tests it: training on them with that store's parents would leak its test set."""
    tested: dict[str, str] = {}
    with store.engine.connect() as connection:
        for name, spec_json in connection.execute(select(ExperimentRow.name, ExperimentRow.spec_json)):
            try:
                problems = json.loads(spec_json).get("problems", [])
            except (ValueError, AttributeError):
                continue
            for problem in problems:
                tested.setdefault(problem_key(str(problem)), name)
    return tested


def refuse_tested_parents(parents_db: str, problems: Sequence[str]) -> None:
    """ConfigError when a training problem is a test problem of an experiment saved in the parents store: parents
    from its runs would train on the test set."""
    tested = tested_problems(parents_store(parents_db))
    leaked = [f"{name} (experiment {tested[key]})" for name in problems for key in problem_keys([name])
              if key in tested]
    if leaked:
        raise ConfigError(f"--parents-db {parents_db}: {', '.join(leaked)} "
                          f"{'is a test problem' if len(leaked) == 1 else 'are test problems'} of that store's "
                          "experiments; parents from their runs would train on the test set (drop them from "
                          "the training problems)")

def stored_parents(store: ProgramStore, problem: Problem, count: int) -> list[Program]:
    """Up to `count` evolved programs of `problem` from every run in the store: unsolved, distinct, best first."""
    pool = [program for run in store.list_runs() if run.problem == problem.name
            for program in store.best_programs(run.id, 4 * count)
            if program.iteration > 0 and not program.solved]
    chosen: dict[str, Program] = {}
    for program in sorted(pool, key=lambda p: (-p.scalar, p.run_id, p.id)):
        chosen.setdefault(code_key(program.code), program)
    return list(chosen.values())[:count]


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = {eos} if isinstance(eos, int) else set(eos or [])
    return ids | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())


@torch.no_grad()
def sample_group(model: Any, tokenizer: Any, task: Task, group_size: int, seed: int,
                 temperature: float = 1.0) -> list[Rollout]:
    """G completions of the task's prompt, sampled from the model at `temperature` (no top-p/top-k), seeded.

    The prompt is run once and its cache repeated for the G rows. Rows stop as the engine's hf backend stops
    them (end of turn, a stop string, the prompt's token budget); tokens after a row's stop are not kept.
    """
    prompt = task.prompt
    ids = torch.tensor(task.prompt_ids, device=model.device)
    cache = model(input_ids=ids[None, :-1], use_cache=True).past_key_values
    cache.batch_repeat_interleave(group_size)
    inputs = ids.expand(group_size, -1)
    ends = eos_ids(model, tokenizer)
    stops = _RowStops(tokenizer, len(task.prompt_ids), [prompt] * group_size, ends, threading.Event())
    config = GenerationConfig(do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                              max_new_tokens=prompt.max_new_tokens, pad_token_id=tokenizer.pad_token_id
                              if tokenizer.pad_token_id is not None else min(ends), eos_token_id=sorted(ends))
    torch.manual_seed(seed)
    output = model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs), past_key_values=cache,
                            generation_config=config, stopping_criteria=StoppingCriteriaList([stops]))
    rollouts = []
    for row in range(group_size):
        produced = output.shape[1] - len(task.prompt_ids)
        count = min(stops.finished_at[row] or produced, produced)
        tokens = output[row, len(task.prompt_ids):len(task.prompt_ids) + count].tolist()
        raw = tokenizer.decode(tokens, skip_special_tokens=True)
        rollouts.append(Rollout(tokens, cut_at_stop(prompt.prefill, raw, prompt.stop)[0]))
    return rollouts


async def score_group(task: Task, rollouts: list[Rollout], scorer: ChildScorer) -> Group:
    """Split each completion into answers, build and score every child; rewards [G, m, d] and scalars [G]."""
    options, problem = task.options, task.problem
    m, d = options.answers, len(problem.objectives)
    scored = await asyncio.gather(*(scorer.score(problem, task.parent.code, task.prompt.prefill + rollout.text,
                                                 options) for rollout in rollouts))
    for rollout, children in zip(rollouts, scored, strict=True):
        rollout.answers = [scored_child.child.answer for scored_child in children]
        rollout.codes = [scored_child.child.code for scored_child in children]
        rollout.vectors = [scored_child.vector for scored_child in children]
    keys = [[answer_key(code) if code is not None else None for code in r.codes] for r in rollouts]
    rewards = reward_array([r.vectors for r in rollouts], m, d, keys)
    scalars = np.array([max((problem.scalar(dict(zip(problem.objectives, v, strict=True)))
                             for v in r.vectors if v is not None), default=0.0) for r in rollouts])
    return Group(task, rollouts, rewards, scalars, duplicate_mask(keys, m))


async def collect(model: Any, tokenizer: Any, tasks: Sequence[Task], group_size: int, seeds: Sequence[int],
                  scorer: ChildScorer, temperature: float = 1.0) -> list[Group]:
    """One group per task: generation (in a worker thread) of the next group overlaps scoring of the last ones."""
    scoring: list[asyncio.Task[Group]] = []
    seconds: list[float] = []
    for task, seed in zip(tasks, seeds, strict=True):
        started = time.monotonic()
        rollouts = await asyncio.to_thread(sample_group, model, tokenizer, task, group_size, seed, temperature)
        seconds.append(time.monotonic() - started)
        scoring.append(asyncio.ensure_future(score_group(task, rollouts, scorer)))
    groups = list(await asyncio.gather(*scoring))
    for group, spent in zip(groups, seconds, strict=True):
        group.seconds_generating = spent
    return groups


class EngineSampler(Protocol):
    """A rollout engine outside torch (vLLM, llama.cpp): G completions of each task's prompt, seeded per task."""

    def sample(self, tasks: Sequence[Task], group_size: int, seeds: Sequence[int],
               temperature: float = 1.0) -> list[list[Rollout]]: ...


async def collect_sampled(sampler: EngineSampler, tasks: Sequence[Task], group_size: int, seeds: Sequence[int],
                          scorer: ChildScorer, temperature: float = 1.0) -> list[Group]:
    """One group per task, all sampled by the engine in one call (in a worker thread), then scored in the sandbox."""
    started = time.monotonic()
    sampled = await asyncio.to_thread(sampler.sample, tasks, group_size, seeds, temperature)
    spent = time.monotonic() - started
    groups = list(await asyncio.gather(*(score_group(task, rollouts, scorer)
                                         for task, rollouts in zip(tasks, sampled, strict=True))))
    for group in groups:
        group.seconds_generating = spent / len(groups)
    return groups
