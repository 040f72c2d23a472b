"""An experiment's arms may search differently at equal answers ([arm_selection]): plain sampling of the seed as an
arm beside evolution, paired on the same cells, and every curve drawn against the answers spent."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.config import ConfigError
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import load_experiment
from evolve.report.results import collect
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import ScriptedPolicyServer, number_problem

TWO_ARMS = """\
problems = ["number"]
seeds = [0, 1]
iterations = 8
answers_per_iteration = 2
parallel_cells = 2
[run]
programs_dir = "{programs}"
concurrency = 2
[selection]
islands = 2
inspirations = 1
[[policies]]
name = "evolution"
backend = "openai"
url = "{url}"
prefill = false
[[policies]]
name = "sampling"
backend = "openai"
url = "{url}"
prefill = false
[arm_selection]
sampling = {{ strategy = "seed" }}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "arms.toml"
    path.write_text(text)
    return path


def test_a_sampling_arm_runs_the_seeds_prompt_every_iteration_beside_evolution_on_the_same_cells(
        tmp_path: Path) -> None:
    number_problem(tmp_path / "programs")
    with ScriptedPolicyServer("climber") as server:  # answers one more than the number its parent sets
        spec = load_experiment(write(tmp_path, TWO_ARMS.format(programs=tmp_path / "programs", url=server.url)))
        assert spec.cell_config("number", "sampling", 0).selection.model_dump(include={"strategy", "islands",
                                                                                       "inspirations"}) == {
            "strategy": "seed", "islands": 1, "inspirations": 0}
        assert spec.cell_config("number", "evolution", 0).selection.islands == 2  # the other arm as the file says
        outcome = ExperimentRunner(spec).run()
    assert outcome.finished and len(outcome.cells) == 4, outcome
    store = ProgramStore(spec.db)
    runs = {(cell.policy, cell.seed): cell.run_id for cell in store.experiment_cells(spec.name)}
    for seed in spec.seeds:
        sampled = store.programs(runs[("sampling", seed)])
        seed_program = next(p for p in sampled if p.iteration == 0)
        children = [p for p in sampled if p.iteration > 0]
        assert children and all(p.parent_id == seed_program.id for p in children)  # no history: the seed, always
        evolved = store.programs(runs[("evolution", seed)])
        assert {p.parent_id for p in evolved if p.iteration > 0} - {evolved[0].id}  # evolution builds on children
    results = collect(store, spec, samples=200)
    store.close()
    best = {row.policy: row.mean_best_scalar.estimate for row in results.table}
    assert best["evolution"] > best["sampling"]  # the climber climbs only where parents move
    differences = [d for d in results.differences if d.metric == "mean_best"]
    assert [(d.policy_a, d.policy_b) for d in differences] == [("evolution", "sampling")]
    answers = [c for c in results.curves if c.axis == "answers" and c.metric == "best_score"]
    assert {c.policy for c in answers} == {"evolution", "sampling"}
    assert all(c.x[-1] == spec.iterations * spec.answers_per_iteration for c in answers)  # 2 answers an iteration
    cell = next(c for c in results.cells if c.policy == "sampling")
    assert [step.answers for step in cell.steps] == list(range(0, 17, 2))


@pytest.mark.parametrize(("arm_selection", "fragment"), [
    ('nobody = { strategy = "seed" }', "'nobody' is no arm of the experiment"),
    ('sampling = { strategy = "random" }', "arm_selection.sampling: strategy: Input should be"),
    ("sampling = { islands = 0 }", "arm_selection.sampling: islands: Input should be greater than or equal to 1"),
])
def test_an_arm_selection_naming_no_arm_or_an_invalid_setting_is_one_error_naming_it(
        tmp_path: Path, arm_selection: str, fragment: str) -> None:
    text = TWO_ARMS.format(programs=tmp_path, url="http://127.0.0.1:9").replace(
        'sampling = {{ strategy = "seed" }}'.format(), arm_selection)
    with pytest.raises(ConfigError, match=fragment):
        load_experiment(write(tmp_path, text))


def test_a_table_of_selection_is_merged_key_by_key_for_the_arm(tmp_path: Path) -> None:
    text = TWO_ARMS.format(programs=tmp_path, url="http://127.0.0.1:9").replace(
        'sampling = { strategy = "seed" }', 'sampling = { map_elites = { bins = 4 } }')
    spec = load_experiment(write(tmp_path, text))
    grid = spec.selection_of("sampling").map_elites
    assert grid.bins == 4 and grid.features == spec.selection.map_elites.features
    assert spec.selection_of("evolution") == spec.selection


BUDGETS = """\
problems = ["number"]
seeds = [0]
iterations = 4
answers_per_iteration = 3
parallel_cells = 2
[run]
programs_dir = "{programs}"
concurrency = 1
[[policies]]
name = "three"
backend = "openai"
url = "{url}"
prefill = false
[[policies]]
name = "one"
backend = "openai"
url = "{url}"
prefill = false
[arm_budget]
one = {{ answers_per_iteration = 1, iterations = 12 }}
"""


def test_an_arm_budget_splits_the_same_answers_into_more_iterations_and_the_report_compares_them_on_answers(
        tmp_path: Path) -> None:
    number_problem(tmp_path / "programs")
    with ScriptedPolicyServer("climber") as server:
        spec = load_experiment(write(tmp_path, BUDGETS.format(programs=tmp_path / "programs", url=server.url)))
        assert (spec.iterations_of("one"), spec.answers_per_iteration_of("one")) == (12, 1)
        assert (spec.iterations_of("three"), spec.answers_per_iteration_of("three")) == (4, 3)
        outcome = ExperimentRunner(spec).run()
    assert outcome.finished, outcome
    store = ProgramStore(spec.db)
    results = collect(store, spec, samples=200)
    store.close()
    cells = {c.policy: c for c in results.cells}
    assert (cells["one"].iterations_done, cells["three"].iterations_done) == (12, 4)
    assert cells["one"].answers == cells["three"].answers == 12  # equal answers, split otherwise
    assert [s.answers for s in cells["one"].steps] == list(range(13))
    answers = {c.policy: c.x[-1] for c in results.curves if c.axis == "answers" and c.metric == "best_score"}
    assert answers == {"one": 12, "three": 12}
    iterations = {c.policy: c.x[-1] for c in results.curves if c.axis == "iterations" and c.metric == "best_score"}
    assert iterations == {"one": 12, "three": 4}
    assert results.arm_budgets == {"one": (1, 12)} and results.iterations_of("one") == 12


@pytest.mark.parametrize(("budget", "fragment"), [
    ("one = { answers_per_iteration = 1, iterations = 10 }", "= 10 answers a cell; the experiment's is 12"),
    ("nobody = { answers_per_iteration = 1, iterations = 12 }", "'nobody' is no arm of the experiment"),
])
def test_an_arm_budget_of_other_answers_or_no_arm_is_one_error_naming_it(tmp_path: Path, budget: str,
                                                                        fragment: str) -> None:
    text = BUDGETS.format(programs=tmp_path, url="http://127.0.0.1:9").replace(
        "one = { answers_per_iteration = 1, iterations = 12 }", budget)
    with pytest.raises(ConfigError, match=fragment):
        load_experiment(write(tmp_path, text))


def test_a_policy_with_its_own_budget_in_an_ensemble_without_one_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    text = BUDGETS.format(programs=tmp_path, url="http://127.0.0.1:9").replace(
        'name = "one"\nbackend = "openai"', 'name = "one"\nanswers = 2\nbackend = "openai"').replace(
        "one = { answers_per_iteration = 1, iterations = 12 }", "one = { answers_per_iteration = 2, iterations = 6 }")
    assert load_experiment(write(tmp_path, text)).iterations_of("one") == 6  # its own budget divides its m
    with pytest.raises(ConfigError, match="policy 'one' in ensemble 'both'"):
        load_experiment(write(tmp_path, text + '[[ensembles]]\nname = "both"\nmembers = ["three", "one"]\n'))
