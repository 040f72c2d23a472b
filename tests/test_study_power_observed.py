"""scripts/study/study_power_observed.py: the CPU study's power at its own observed crack rates (issue 58 item 16)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tests.script_modules import load_script

power = load_script("study_power_observed")


def _cells(path: Path, cracked: dict[str, list[int]]) -> Path:
    """A cells.csv with one row per cell: per policy, per problem i, cracked[policy][i] of 5 cells cracked."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["problem", "policy", "seed", "first_solved_iteration"])
        writer.writeheader()
        for policy, counts in cracked.items():
            for problem, count in enumerate(counts):
                for seed in range(5):
                    writer.writerow({"problem": f"p{problem}", "policy": policy, "seed": seed,
                                     "first_solved_iteration": "3" if seed < count else ""})
    return path


def test_observed_rates_pool_an_algorithms_checkpoints_per_problem(tmp_path: Path) -> None:
    rates = power.observed_rates(_cells(tmp_path / "cells.csv", {
        "base": [5, 0], "vpo-t0": [2, 0], "vpo-t1": [3, 1], "grpo-t0": [0, 0], "grpo-t1": [1, 0]}))
    assert rates["base"] == pytest.approx([1.0, 0.0])
    assert rates["vpo"] == pytest.approx([0.5, 0.1]) and rates["grpo"] == pytest.approx([0.1, 0.0])


def test_equal_observed_rates_are_almost_never_detected() -> None:
    rates = {arm: np.full(30, 0.4) for arm in power.ARMS}
    raw, adjusted = power.redrawn_power(rates, studies=100)
    assert raw <= 0.1 and adjusted <= raw


def test_a_large_difference_on_every_problem_is_detected_nearly_always() -> None:
    base = np.full(30, 0.2)
    rates = {"base": base, "grpo": base, "vpo": base + 0.5}
    raw, adjusted = power.redrawn_power(rates, studies=50)
    assert raw >= 0.95 and adjusted >= 0.9
