"""Ensemble arms in experiments: an [[ensembles]] arm runs several of the experiment's policies in each cell (chosen
per iteration by weights or a bandit) beside each policy alone, every child recorded with its member policy, the
report comparing the arms; its mistakes are one line. Two scripted policies answer over real OpenAI-compatible
endpoints on loopback, scored by real evaluator processes into a real store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evolve.config import ConfigError, parse_config, stored_config
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import load_experiment
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
    assert not Path(spec.db).exists()  # refused before the store is even made


def test_resuming_an_ensemble_cell_whose_members_changed_fails_that_cell_in_one_line(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as climber, ScriptedPolicyServer("breaker") as breaker:
        first = EXPERIMENT.replace("iterations = 12", "iterations = 2")
        spec = load_experiment(experiment_file(tmp_path, first, climber.url, breaker.url))
        assert ExperimentRunner(spec).run().finished
        store = ProgramStore(spec.db)
        cells = {cell.policy: cell.run_id for cell in store.experiment_cells(spec.name)}
        store.set_run_status(cells["climber+breaker"], "interrupted")  # as a killed process leaves it
        changed = first.replace('members = ["climber", "breaker"]', 'members = ["climber", "again"]') + \
            first[first.index("[[policies]]"):first.index("[[policies]]", first.index("[[policies]]") + 1)] \
            .replace('name = "climber"', 'name = "again"')
        # the store keeps the design it ran with: another one is refused whole, in one line, before any cell
        with pytest.raises(ConfigError) as refused:
            ExperimentRunner(load_experiment(experiment_file(tmp_path, changed, climber.url, breaker.url))).run()
        assert "ran with another design (ran -> now: ensembles.climber+breaker.members ['climber', 'breaker'] -> " \
               "['climber', 'again'];" in str(refused.value) and "\n" not in str(refused.value)
        assert store.get_run(cells["climber+breaker"]).status == "interrupted"
        with sqlite3.connect(spec.db) as connection:  # a store that keeps no design: the cell itself still refuses
            connection.execute("DELETE FROM experiments")
        connection.close()
        outcome = ExperimentRunner(load_experiment(experiment_file(tmp_path, changed, climber.url, breaker.url))).run()
    (error,) = outcome.errors
    assert error.startswith("number/climber+breaker/3: its stored run uses policies breaker, climber; ensemble "
                            "'climber+breaker' now has climber, again") and "\n" not in error
    assert store.get_run(cells["climber+breaker"]).status == "failed"


def test_a_stored_ensemble_of_openai_policies_reads_back_as_written() -> None:
    """stored_config drops an openai policy's unused server keys from [policy] and from each of [[policies]] alike,
    so a resumed ensemble (evolve run --resume, an experiment's cell) is not refused as [policy] != policies[0]."""
    written = parse_config({"policies": [{"backend": "openai", "name": name, "url": f"http://127.0.0.1:{port}/v1"}
                                         for name, port in (("a", 1), ("b", 2))], "ensemble": {"choice": "bandit"}})
    assert stored_config(written.model_dump_json()) == written
