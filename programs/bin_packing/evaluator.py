"""Trusted evaluator for bin_packing: generates the instances, packs them online here, scores L1 / bins used.

The packing loop runs in this (trusted) process. For each arriving item it asks the candidate's priority()
in its sandbox (one session, one call per item, each with its own time limit) for a score per bin that can
hold the item plus one fresh bin, and puts the item in the highest-scoring one. The candidate never sees an
item before it arrives, so the heuristic is online by construction, and the packing is valid by construction.
"""

import math
import random
from pathlib import Path
from typing import Any

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, SandboxSession

CAPACITY = 150
ITEMS_PER_INSTANCE = 250
INSTANCES = 6
DRIVER = Path(__file__).with_name("driver.py")
CALL_LIMIT_S = 1.0  # per priority() call


def instances() -> dict[str, list[int]]:
    """Falkenauer-style u250 instances: sizes uniform in [20, 100], one fixed seed per instance.

    Only Random.random() is used: Python guarantees its sequence for a given seed across versions.
    """
    generated = {}
    for seed in range(INSTANCES):
        rng = random.Random(seed)
        generated[f"u250_{seed}"] = [20 + int(rng.random() * 81) for _ in range(ITEMS_PER_INSTANCE)]
    return generated


def lower_bound(items: list[int]) -> int:
    return math.ceil(sum(items) / CAPACITY)  # L1: no packing can use fewer bins


def describe(scores: Any) -> str:
    if isinstance(scores, list):
        return f"{len(scores)} scores"
    return f"a {type(scores).__name__}"


def choose(scores: Any, bins: int) -> int:
    """The highest-scoring bin (the first on ties; NaN counts as lowest); CandidateFailure if the scores are not
    one number per bin."""
    if not isinstance(scores, list) or len(scores) != bins or not all(
            type(score) in (int, float) for score in scores):
        raise CandidateFailure("bad_output", f"priority must return one score per bin: got {describe(scores)} "
                                             f"for {bins} bins")
    return max(range(bins), key=lambda index: (-math.inf if math.isnan(scores[index]) else scores[index], -index))


def bins_used(session: SandboxSession, items: list[int]) -> int:
    """Pack the items online with the candidate's priority function; the number of bins opened."""
    remaining: list[int] = []  # the room left in each bin, in the order the bins were opened
    for item in items:
        fits = [index for index, room in enumerate(remaining) if room >= item]
        run = session.drive([item, [remaining[index] for index in fits] + [CAPACITY]], limit_s=CALL_LIMIT_S)
        if not run.ok:
            raise CandidateFailure(run.status, run.detail)
        choice = choose(run.value, len(fits) + 1)
        if choice == len(fits):
            remaining.append(CAPACITY)
            fits.append(len(remaining) - 1)
        remaining[fits[choice]] -= item
    return len(remaining)


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    scores, notes = {}, []
    with sandbox.session(program_path, driver_path=DRIVER) as session:
        for name, items in instances().items():
            used = bins_used(session, items)
            scores[name] = lower_bound(items) / used
            notes.append(f"{name}: {used} bins (lower bound {lower_bound(items)})")
    return EvaluationResult(scores=scores, artifacts={"feedback": "; ".join(notes)})
