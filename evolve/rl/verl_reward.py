"""veRL custom reward function: a response's m answers scored by evolve's sandboxed evaluators, as reward vectors.

Needs no veRL import. Point veRL at it with ``reward.custom_reward_function.path=pkg://evolve.rl.verl_reward`` and
``reward.custom_reward_function.name=compute_score`` (or ``compute_score_async``, which veRL's reward loop awaits so
that many responses are evaluated at once). Use it with ``algorithm.adv_estimator=vpo`` or ``multi_rlvr`` (see
evolve.rl.verl_vpo), or with veRL's own ``grpo`` on the declared scalar ("score").

Settings: each veRL dataset row's ``extra_info`` dict, over run-wide defaults given as
``+reward.custom_reward_function.reward_kwargs.<key>=...`` (veRL passes those as keyword arguments):

- ``problem``: a problem name under programs_dir, or a problem folder; falls back to the row's ground_truth.
- ``answers`` (m, default 1), ``answer_tag`` (default "response": ``<response_1>...</response_1>``),
  ``edit_format`` ("rewrite" or "diff"), ``prefill`` (text the prompt already opened the assistant turn with; it is
  put back in front of the response before splitting), ``parent_code`` (default: the problem's initial program),
  ``programs_dir`` (default $EVOLVE_PROGRAMS_DIR, else ./programs, else the programs/ folder beside the evolve package),
  ``eval_workers`` (sandboxed evaluations at once per event loop, default the CPU count).

Returns, per response, ``{"score", "reward_vectors", "duplicate_answers", "objective_weights", "scored_answers"}``,
the same five keys every time (veRL reads the key set off the batch's first response):

- ``score``: the problem's declared scalar of the best answer (0 when none scored), what veRL logs and GRPO trains on;
- ``reward_vectors``: a JSON string of the ``m x d`` matrix built exactly as in evolution and ``evolve train``: the
  completion turned into children and scored by engine.offspring (split_answers, apply_rewrite / apply_diff, the
  sandbox; each child evaluated once per process while its evaluation is among the last 4096 kept);
  an answer that is missing, does not build, changes nothing or fails its evaluation is a row of zeros, a duplicate
  child copies its first occurrence (reward_array). A string, not a nested list, because veRL's agent loop calls
  ``np.array`` on each extra key over the batch (nested lists would be stacked, or raise when problems of different
  d share a batch) and its validation metrics skip strings;
- ``duplicate_answers``: a JSON string of m 0/1 flags, 1 where the answer's child repeats an earlier answer's by
  normalised AST (advantages.answer_key, as the VPO authors' ast_dedup); Multi-RLVR leaves those out;
- ``objective_weights``: a JSON string of the problem's d declared objective weights (ones for a plain mean), which
  make Multi-RLVR's per-answer scalar the problem's own;
- ``scored_answers``: how many answers built a child that evaluated successfully.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evolve.engine.offspring import ChildScorer
from evolve.problems.evaluation import resolve_objectives
from evolve.problems.problem import Problem, load_problem
from evolve.rl.advantages import answer_key, duplicate_mask, reward_array
from evolve.rl.estimators import objective_weights
from evolve.search.prompts import PromptOptions

SCORE_KEY = "score"
VECTORS_KEY = "reward_vectors"  # evolve.rl.verl_vpo reads this key from veRL's non_tensor_batch
DUPLICATES_KEY = "duplicate_answers"  # and these two for Multi-RLVR
WEIGHTS_KEY = "objective_weights"
SCORED_KEY = "scored_answers"
SETTINGS = ("problem", "answers", "answer_tag", "edit_format", "prefill", "parent_code", "programs_dir", "eval_workers")
_CACHE_SIZE = 4096  # evaluations kept per process; evaluators are taken to be deterministic, as the engine does

# veRL calls a plain function, so the one scorer of the process lives here: its cache outlives each call's event loop
_scorer = ChildScorer(capacity=_CACHE_SIZE)


def programs_dir(given: str | os.PathLike[str] | None = None) -> Path:
    """The folder problem names are looked up in (see the module docstring for the order)."""
    chosen = given or os.environ.get("EVOLVE_PROGRAMS_DIR")
    if chosen:
        return Path(chosen)
    local = Path("programs")
    return local if local.is_dir() else Path(__file__).resolve().parents[2] / "programs"


@lru_cache(maxsize=64)
def _problem(name: str, folder: str) -> Problem:
    """The problem, loaded once; a pattern problem's objectives resolved from its seed's evaluation (once, in a
    thread of its own, since the caller may be inside an event loop)."""
    problem = load_problem(name, Path(folder))
    if problem.objectives_known:
        return problem
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(lambda: asyncio.run(resolve_objectives(problem))).result()


def _settings(ground_truth: Any, extra_info: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    settings = {key: value for key, value in defaults.items() if key in SETTINGS}
    settings.update({key: value for key, value in (extra_info or {}).items() if key in SETTINGS and value is not None})
    if not settings.get("problem"):
        if not isinstance(ground_truth, str) or not ground_truth:
            raise ValueError("evolve reward: name the problem in extra_info['problem'] (or as the ground_truth)")
        settings["problem"] = ground_truth
    return settings


async def score_response(solution_str: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Score one response's answers; ``settings`` as in the module docstring (``problem`` required)."""
    problem = _problem(str(settings["problem"]), str(programs_dir(settings.get("programs_dir"))))
    m = int(settings.get("answers", 1))
    workers = int(settings.get("eval_workers") or os.cpu_count() or 1)
    parent = str(settings.get("parent_code") or problem.initial_code)
    text = str(settings.get("prefill") or "") + solution_str
    options = PromptOptions(edit_format="diff" if settings.get("edit_format") == "diff" else "rewrite", answers=m,
                            answer_tag=str(settings.get("answer_tag", "response")))
    children = await _scorer.score(problem, parent, text, options, workers)
    codes = [scored.child.code for scored in children]
    vectors = [scored.vector for scored in children]
    keys = [answer_key(code) if code is not None else None for code in codes]
    rewards = reward_array([vectors], m, len(problem.objectives), [keys])[0]
    duplicates = duplicate_mask([keys], m)[0]
    scored = [v for v in vectors if v is not None]
    best = max((problem.scalar(dict(zip(problem.objectives, v, strict=True))) for v in scored), default=0.0)
    return {SCORE_KEY: float(best), VECTORS_KEY: json.dumps(rewards.tolist()),
            DUPLICATES_KEY: json.dumps([int(flag) for flag in duplicates]),
            WEIGHTS_KEY: json.dumps(objective_weights(problem).tolist()), SCORED_KEY: len(scored)}


async def compute_score_async(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """veRL custom reward function (coroutine; veRL's reward loop awaits it). ``data_source`` is not used."""
    return await score_response(solution_str, _settings(ground_truth, extra_info, kwargs))


def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """veRL custom reward function (plain; veRL calls it in a worker thread, which has no running event loop)."""
    return asyncio.run(compute_score_async(data_source, solution_str, ground_truth, extra_info, **kwargs))


def decode_vectors(value: Any) -> NDArray[np.float64]:
    """The ``[m, d]`` matrix of one ``reward_vectors`` entry: a JSON string, or a nested sequence / array; a flat
    ``[d]`` vector is one answer (m = 1)."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        value = json.loads(value)
    matrix = np.asarray(value, dtype=np.float64)
    matrix = matrix[None, :] if matrix.ndim == 1 else matrix
    if matrix.ndim != 2 or 0 in matrix.shape or not np.all(np.isfinite(matrix)):
        raise ValueError(f"a {VECTORS_KEY} entry must be a finite non-empty m x d matrix, got shape {matrix.shape}")
    return matrix


def decode_flags(value: Any, m: int) -> NDArray[np.bool_]:
    """The ``[m]`` duplicate flags of one ``duplicate_answers`` entry (JSON string or sequence), padded with False."""
    if isinstance(value, bytes):
        value = value.decode()
    flags = np.asarray(json.loads(value) if isinstance(value, str) else value, dtype=bool).reshape(-1)
    if flags.size > m:
        raise ValueError(f"a {DUPLICATES_KEY} entry has {flags.size} flags for {m} answers")
    return np.pad(flags, (0, m - flags.size))


def decode_weights(value: Any) -> NDArray[np.float64]:
    """The ``[d]`` declared weights of one ``objective_weights`` entry (JSON string or sequence)."""
    if isinstance(value, bytes):
        value = value.decode()
    weights = np.asarray(json.loads(value) if isinstance(value, str) else value, dtype=np.float64).reshape(-1)
    if weights.size == 0 or not np.all(np.isfinite(weights)) or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError(f"a {WEIGHTS_KEY} entry must be non-negative finite numbers with a positive sum")
    return weights
