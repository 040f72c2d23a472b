"""Seed streams: one recipe, stable values, distinct purposes, and every experiment cell on its own seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evolve.engine.experiment_spec import load_experiment
from evolve.seeds import (
    PURPOSES,
    REQUEST,
    ROLLOUT_SAMPLING,
    VPO_WEIGHTS,
    batch_seed,
    derive,
    request_seed,
    selection_rng,
)

ROOT = Path(__file__).resolve().parents[1]


def test_values_are_pinned_so_a_recipe_change_is_seen() -> None:
    assert derive(0, VPO_WEIGHTS, 0, 0) == 8904846224825141521
    assert derive(0, ROLLOUT_SAMPLING, 0, 0) == 1936351230103344337
    assert request_seed(0, 1, 0) == 1141130394


def test_values_are_the_same_in_another_process() -> None:
    code = "from evolve.seeds import derive, VPO_WEIGHTS; print(derive(7, VPO_WEIGHTS, 3, 1))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                           env={"PYTHONHASHSEED": "123"})
    assert int(other.stdout) == derive(7, VPO_WEIGHTS, 3, 1)


def test_sampling_and_dirichlet_weights_of_a_group_get_different_seeds() -> None:
    pairs = [(step, group) for step in range(30) for group in range(8)]
    sampling = {derive(5, ROLLOUT_SAMPLING, step, group) for step, group in pairs}
    weights = {derive(5, VPO_WEIGHTS, step, group) for step, group in pairs}
    assert len(sampling) == len(weights) == len(pairs)
    assert not sampling & weights


def test_every_purpose_gives_its_own_value_for_the_same_parts() -> None:
    assert len({derive(3, purpose, 1, 2) for purpose in PURPOSES}) == len(PURPOSES)


def test_seed_indices_and_their_order_all_change_the_value() -> None:
    base = derive(1, ROLLOUT_SAMPLING, 2, 3)
    assert len({base, derive(2, ROLLOUT_SAMPLING, 2, 3), derive(1, ROLLOUT_SAMPLING, 3, 2),
                derive(1, ROLLOUT_SAMPLING, 2), derive(1, ROLLOUT_SAMPLING, 23)}) == 5


def test_widths_fit_their_consumers() -> None:
    requests = [request_seed(seed, iteration, attempt) for seed in range(5) for iteration in range(40)
                for attempt in range(3)]
    assert all(0 <= value < 2**31 for value in requests) and len(set(requests)) == len(requests)
    wide = [derive(seed, VPO_WEIGHTS, step) for seed in range(5) for step in range(100)]
    assert all(0 <= value < 2**63 for value in wide) and max(wide) >= 2**62  # uses the full 63 bits
    assert all(0 <= batch_seed([seed, seed + 1]) < 2**63 for seed in range(50))


def test_a_typo_in_a_purpose_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown seed purpose 'requests'"):
        derive(0, "requests", 1)
    with pytest.raises(ValueError, match="at least one request"):
        batch_seed([])


def test_selection_rng_repeats_per_iteration_and_differs_between_iterations() -> None:
    draws = [selection_rng(4, iteration).random() for iteration in range(20)]
    assert draws == [selection_rng(4, iteration).random() for iteration in range(20)]
    assert len(set(draws)) == 20 and selection_rng(5, 0).random() != draws[0]


def test_each_experiment_cell_runs_on_its_own_seed_and_sends_its_own_request_seeds(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_text(f'problems = ["run_length"]\nseeds = [0, 1, 7]\niterations = 3\n'
                    f'[run]\nprograms_dir = "{ROOT / "programs"}"\n[[policies]]\nname = "p"\nbackend = "hf"\n')
    spec = load_experiment(path)
    configs = [spec.cell_config(problem, policy, seed) for problem, policy, seed in spec.cells()]
    assert [config.run.seed for config in configs] == [0, 1, 7]
    sent = [{request_seed(config.run.seed, iteration, attempt) for iteration in range(1, 4) for attempt in range(3)}
            for config in configs]
    assert all(len(seeds) == 9 for seeds in sent)
    assert not (sent[0] & sent[1]) and not (sent[0] & sent[2]) and not (sent[1] & sent[2])
    assert derive(0, REQUEST, 1, 0) & (2**31 - 1) == request_seed(0, 1, 0)
