"""Trusted evaluator for bin_packing: generates the instances, checks each packing, scores L1 / bins used.

Only the item sizes go to the candidate's child; the packing that comes back is verified here
(every item placed once, no bin over capacity), so nothing the child does can inflate a score.
"""

import math
import random
from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

CAPACITY = 150
ITEMS_PER_INSTANCE = 250
INSTANCES = 6
DRIVER = Path(__file__).with_name("driver.py")


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


def bins_used(name: str, items: list[int], packing: object) -> int:
    """Verify a packing and count its bins; CandidateFailure if it is not a valid packing."""
    if not isinstance(packing, list) or len(packing) != len(items):
        raise CandidateFailure("bad_output", f"{name}: the packing does not give one bin per item")
    load: dict[int, int] = {}
    for item, index in zip(items, packing, strict=True):
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise CandidateFailure("bad_output", f"{name}: invalid bin index {index!r}")
        load[index] = load.get(index, 0) + item
        if load[index] > CAPACITY:
            raise CandidateFailure("bad_output", f"{name}: bin {index} holds {load[index]} > {CAPACITY}")
    return len(load)


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    problems = instances()
    payload = {"capacity": CAPACITY, "instances": list(problems.values())}
    reply = fail_unless_ok(sandbox.run_driver(program_path, DRIVER, payload)).value
    if isinstance(reply, dict) and isinstance(reply.get("bad_output"), str):
        raise CandidateFailure("bad_output", reply["bad_output"])
    packings = reply.get("packings") if isinstance(reply, dict) else None
    if not isinstance(packings, list) or len(packings) != len(problems):
        raise CandidateFailure("bad_output", "expected one packing per instance")
    scores, notes = {}, []
    for (name, items), packing in zip(problems.items(), packings, strict=True):
        used = bins_used(name, items, packing)
        scores[name] = lower_bound(items) / used
        notes.append(f"{name}: {used} bins (lower bound {lower_bound(items)})")
    return EvaluationResult(scores=scores, artifacts={"feedback": "; ".join(notes)})
