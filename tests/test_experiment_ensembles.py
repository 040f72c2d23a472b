"""Ensemble arms in experiments: an [[ensembles]] arm runs several of the experiment's policies in each cell (chosen
per iteration by weights or a bandit) beside each policy alone, every child recorded with its member policy, the
report comparing the arms; its mistakes are one line. Two scripted policies answer over real OpenAI-compatible
endpoints on loopback, scored by real evaluator processes into a real store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evolve.config import ConfigError
from evolve.engine.experiment import ExperimentRunner, load_experiment
from evolve.report.html import report_html
from evolve.report.results import collect
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import ScriptedPolicyServer, number_problem

EXPERIMENT = """\
problems = ["number"]
seeds = [3]
iterations = 12
parallel_cells = 1
[run]
programs_dir = "{programs}"
concurrency = 1
eval_workers = 1
[[policies]]
name = "climber"
backend = "openai"
url = "{climber}"
prefill = false
retries = 0
[[policies]]
name = "breaker"
backend = "openai"
url = "{breaker}"
prefill = false
retries = 0
[[ensembles]]
name = "climber+breaker"
members = ["climber", "breaker"]
choice = "bandit"
exploration = 0.3
"""


def experiment_file(tmp_path: Path, text: str, climber: str = "http://127.0.0.1:9/v1",
                    breaker: str = "http://127.0.0.1:9/v1") -> Path:
    number_problem(tmp_path / "programs")
    path = tmp_path / "arms.toml"
    path.write_text(text.replace("{programs}", str(tmp_path / "programs")).replace("{climber}", climber)
                    .replace("{breaker}", breaker))
    return path


def test_an_ensemble_arm_runs_its_members_in_each_cell_beside_each_alone(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as climber, ScriptedPolicyServer("breaker") as breaker:
        spec = load_experiment(experiment_file(tmp_path, EXPERIMENT, climber.url, breaker.url))
        outcome = ExperimentRunner(spec).run()
        assert outcome.finished and not outcome.errors
        assert len(climber.requests) > 12 and len(breaker.requests) > 12  # alone, plus their share in the ensemble
        sent = len(climber.requests) + len(breaker.requests)
        assert ExperimentRunner(spec).run().finished  # run again: every cell is finished, nothing is asked again
        assert len(climber.requests) + len(breaker.requests) == sent
    store = ProgramStore(spec.db, mode="read")
    cells = {cell.policy: cell.run_id for cell in store.experiment_cells(spec.name)}
    assert set(cells) == {"climber", "breaker", "climber+breaker"}
    with sqlite3.connect(spec.db) as connection:
        calls = dict(connection.execute("SELECT policy, count(*) FROM attempts WHERE run_id = ? AND iteration >= 1 "
                                        "AND kind = 'policy_call' GROUP BY policy",
                                        (cells["climber+breaker"],)).fetchall())
    assert sum(calls.values()) == 12 and calls["climber"] > calls.get("breaker", 0) >= 1  # the bandit learned
    results = collect(store, spec, samples=200)
    assert results.policies == ("climber", "breaker", "climber+breaker")
    best = {policy: results.row("number", policy).best_scalar for policy in results.policies}
    assert best["breaker"] == 0.001 and best["climber"] > 0.001 and best["climber+breaker"] > 0.001
    assert 'data-policy="climber+breaker"' in report_html(results)


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda t: t.replace('members = ["climber", "breaker"]', 'members = ["climber", "vpo"]'),
     "ensemble 'climber+breaker': members must name [[policies]] entries; unknown: vpo"),
    (lambda t: t.replace('members = ["climber", "breaker"]', 'members = ["climber", "climber"]'),
     "members must be distinct"),
    (lambda t: t.replace('members = ["climber", "breaker"]', 'members = ["climber"]'), "members"),
    (lambda t: t.replace('name = "climber+breaker"', 'name = "breaker"'), "repeated: breaker"),
    (lambda t: t.replace('choice = "bandit"', 'choice = "greedy"'), "choice"),
])
def test_an_ensemble_arm_mistake_is_one_line_naming_the_file(tmp_path: Path, edit, fragment: str) -> None:
    path = experiment_file(tmp_path, edit(EXPERIMENT))
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    message = str(error.value)
    assert fragment in message and "\n" not in message and "arms.toml" in message


class NeverCalledExecutor:
    def run_cells(self, runner: ExperimentRunner, todo: list, outcome: object) -> None:
        raise AssertionError("the refusal comes before any cell is placed")


def test_ensemble_arms_are_refused_on_a_cluster_in_one_line_before_anything_is_stored(tmp_path: Path) -> None:
    spec = load_experiment(experiment_file(tmp_path, EXPERIMENT))
    with pytest.raises(ConfigError) as error:
        ExperimentRunner(spec, executor=NeverCalledExecutor()).run()
    assert "[[ensembles]] arms run in this process only" in str(error.value) and "\n" not in str(error.value)
    assert ProgramStore(spec.db, mode="read").experiment_cells(spec.name) == []
