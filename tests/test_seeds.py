"""Seed streams: one recipe, stable values, distinct purposes; every experiment cell on a seed of its problem and
seed index, shared by its policies, and plain sampling on streams of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evolve.config import MAX_SEED, ConfigError, load_config
from evolve.engine.experiment_spec import ExperimentSpec, load_experiment
from evolve.engine.sampling import sample_config
from evolve.seeds import (
    CELL,
    PURPOSES,
    REQUEST,
    ROLLOUT_SAMPLING,
    VPO_WEIGHTS,
    batch_seed,
    cell_seed,
    derive,
    name_index,
    request_seed,
    sample_seed,
    selection_rng,
)

ROOT = Path(__file__).resolve().parents[1]
PINNED_CELL, PINNED_SAMPLE = 2345751431028696251, 576081516455032696  # a recipe change is seen


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


def experiment(tmp_path: Path, problems: str, seeds: str = "[0, 1, 7]") -> ExperimentSpec:
    path = tmp_path / "exp.toml"
    path.write_text(f'problems = {problems}\nseeds = {seeds}\niterations = 3\n'
                    f'[run]\nprograms_dir = "{ROOT / "programs"}"\n[[policies]]\nname = "p"\nbackend = "hf"\n'
                    f'[[policies]]\nname = "q"\nbackend = "hf"\ntemperature = 1.0\n'
                    f'[[ensembles]]\nname = "pq"\nmembers = ["p", "q"]\n')
    return load_experiment(path)


def sent(run_seed: int, iterations: int = 3, attempts: int = 3) -> set[int]:
    """The request seeds a run on `run_seed` sends in its first iterations."""
    return {request_seed(run_seed, iteration, attempt) for iteration in range(1, iterations + 1)
            for attempt in range(attempts)}


def test_each_experiment_cell_runs_on_its_own_seed_and_sends_its_own_request_seeds(tmp_path: Path) -> None:
    spec = experiment(tmp_path, '["run_length"]')
    configs = [spec.cell_config(problem, policy, seed) for problem, policy, seed in spec.cells() if policy == "p"]
    assert [config.run.seed for config in configs] == [cell_seed(seed, "run_length") for seed in (0, 1, 7)]
    requests = [sent(config.run.seed) for config in configs]
    assert all(len(seeds) == 9 for seeds in requests)
    assert not (requests[0] & requests[1]) and not (requests[0] & requests[2]) and not (requests[1] & requests[2])
    assert derive(0, REQUEST, 1, 0) & (2**31 - 1) == request_seed(0, 1, 0)


def test_two_problems_on_the_same_seed_index_send_different_request_seeds(tmp_path: Path) -> None:
    spec = experiment(tmp_path, '["run_length", "fizzbuzz", "symbolic_regression"]')
    for seed in spec.seeds:
        run_seeds = [spec.cell_config(problem, "p", seed).run.seed for problem in spec.problems]
        assert len(set(run_seeds)) == 3
        requests = [sent(run_seed) for run_seed in run_seeds]
        assert not (requests[0] & requests[1]) and not (requests[0] & requests[2]) and not (requests[1] & requests[2])
        draws = [[selection_rng(run_seed, iteration).random() for iteration in range(1, 4)] for run_seed in run_seeds]
        assert len({tuple(d) for d in draws}) == 3  # the parents drawn differ too


def test_every_policy_and_ensemble_on_the_same_problem_and_seed_runs_on_the_same_seed(tmp_path: Path) -> None:
    spec = experiment(tmp_path, '["run_length", "fizzbuzz"]')
    for problem in spec.problems:
        for seed in spec.seeds:
            run_seeds = {spec.cell_config(problem, arm, seed).run.seed for arm in ("p", "q", "pq")}
            assert run_seeds == {cell_seed(seed, problem)}


def test_sampling_a_problem_draws_other_streams_than_its_experiment_cells(tmp_path: Path) -> None:
    spec = experiment(tmp_path, '["run_length", "fizzbuzz"]')
    base = load_config(None, {"run.seed": 1, "run.programs_dir": str(ROOT / "programs")})
    for problem in spec.problems:
        sampling = sample_config(base, problem, problem, 9)
        assert sampling.run.seed == sample_seed(1, problem) != spec.cell_config(problem, "p", 1).run.seed
        assert not sent(sampling.run.seed) & sent(spec.cell_config(problem, "p", 1).run.seed)
    assert sample_config(base, "run_length", "run_length", 9).run.seed != \
        sample_config(base, "fizzbuzz", "fizzbuzz", 9).run.seed


def test_run_seeds_of_cells_and_samples_are_pinned_and_the_same_in_another_process() -> None:
    assert cell_seed(0, "fizzbuzz") == derive(0, CELL, name_index("fizzbuzz"))
    assert (cell_seed(0, "fizzbuzz"), sample_seed(0, "fizzbuzz")) == (PINNED_CELL, PINNED_SAMPLE)
    code = "from evolve.seeds import cell_seed, sample_seed; print(cell_seed(0, 'fizzbuzz'), sample_seed(0, 'fizzbuzz'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                           env={"PYTHONHASHSEED": "99"})
    assert tuple(map(int, other.stdout.split())) == (PINNED_CELL, PINNED_SAMPLE)
    assert all(0 <= cell_seed(seed, name) <= MAX_SEED for seed in (0, MAX_SEED) for name in ("a", "b" * 300))


def test_a_problem_named_by_its_folder_path_runs_on_its_names_seed(tmp_path: Path) -> None:
    by_path = experiment(tmp_path, f'["{ROOT / "programs" / "fizzbuzz"}"]', "[2]")
    problem = by_path.problems[0]
    assert by_path.cell_config(problem, "p", 2).run.seed == cell_seed(2, "fizzbuzz")
    with pytest.raises(ConfigError, match="problems must have distinct names.*fizzbuzz"):
        experiment(tmp_path, f'["fizzbuzz", "{ROOT / "programs" / "fizzbuzz"}"]')
