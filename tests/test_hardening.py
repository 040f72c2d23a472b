"""Hardening against hostile candidates and careless users: memory bombs through drivers, read-only commands,
damaged stores and absurd budgets each end in one clear outcome."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from evolve.evaluation import evaluate_program
from evolve.problem_check import new_problem
from evolve.problems import load_problem
from evolve.records import Evaluation

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
HOARDER = """
def hoard(n):
    chunks = []
    while True:
        chunks.append(bytearray(50 * 1024 * 1024))

fizzbuzz = solve = hoard
"""


def evaluate_timed(folder: Path, name: str, code: str) -> tuple[Evaluation, float]:
    problem = load_problem(name, folder)
    started = time.monotonic()
    evaluation = asyncio.run(evaluate_program(problem, code))
    return evaluation, time.monotonic() - started


# ---------------------------------------------------------------- memory bombs through drivers


def test_a_memory_bomb_through_the_fizzbuzz_driver_is_scored_memory_not_timeout() -> None:
    evaluation, took = evaluate_timed(PROGRAMS, "fizzbuzz", HOARDER)
    assert evaluation.failure == "memory", evaluation
    assert took < 5.0  # the wall limit: swallowed per input, the bomb allocated until it (scored timeout)


def test_a_memory_bomb_through_the_new_problem_scaffold_driver_is_scored_memory(tmp_path: Path) -> None:
    new_problem("stairs", tmp_path)
    evaluation, took = evaluate_timed(tmp_path, "stairs", HOARDER)
    assert evaluation.failure == "memory", evaluation
    assert took < 5.0
