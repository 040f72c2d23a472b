"""Trusted evaluator for bin_packing: checks each packing the candidate made and scores it per instance."""

import math
import random
from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

CAPACITY = 150
INSTANCES = 5
ITEMS = 120


def instances() -> list[list[int]]:
    rng = random.Random(20240101)
    return [[rng.randint(20, 100) for _ in range(ITEMS)] for _ in range(INSTANCES)]


def bins_used(items: list[int], assignment: object) -> int:
    """Verify a packing (every item placed, no bin over capacity) and count its bins."""
    if not isinstance(assignment, list) or len(assignment) != len(items):
        raise CandidateFailure("bad_output", "a packing must give one bin index per item")
    load: dict[int, int] = {}
    for item, index in zip(items, assignment):
        if not isinstance(index, int) or index < 0:
            raise CandidateFailure("bad_output", f"invalid bin index {index!r}")
        load[index] = load.get(index, 0) + item
        if load[index] > CAPACITY:
            raise CandidateFailure("bad_output", f"bin {index} over capacity")
    return len(load)


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    problems = instances()
    payload = {"capacity": CAPACITY, "instances": problems}
    packings = fail_unless_ok(sandbox.run_driver(program_path, Path(__file__).with_name("driver.py"), payload)).value
    if not isinstance(packings, list) or len(packings) != len(problems):
        raise CandidateFailure("bad_output", "expected one packing per instance")
    scores, used = {}, []
    for number, (items, packing) in enumerate(zip(problems, packings)):
        bins = bins_used(items, packing)
        used.append(bins)
        scores[f"instance_{number}"] = math.ceil(sum(items) / CAPACITY) / bins
    return EvaluationResult(scores=scores, artifacts={"feedback": f"bins used per instance: {used}"})
