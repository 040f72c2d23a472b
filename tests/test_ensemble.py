"""Policy ensembles: several [[policies]] in one run, chosen per iteration by weights or by a bandit on the gain their
children brought; every child recorded with its policy, the report split by policy, the bandit replayed on resume.
Two scripted policies answer over real OpenAI-compatible endpoints on loopback, scored by real evaluator processes
into a real store."""

from __future__ import annotations

import asyncio
import io
import random
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evolve.config import ConfigError, RunConfig, parse_config
from evolve.engine.controller import Controller
from evolve.engine.run_driver import run_evolution
from evolve.policies.factory import open_policies
from evolve.problems.problem import load_problem
from evolve.report.run_summary import render_run, run_summary_dict
from evolve.search.bandit import Bandit
from evolve.seeds import ENSEMBLE, derive
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import ScriptedPolicyServer, number_problem


def ensemble_config(tmp_path: Path, servers: dict[str, ScriptedPolicyServer], iterations: int,
                    **sections: Any) -> RunConfig:
    number_problem(tmp_path / "programs")
    policies = [{"backend": "openai", "name": name, "url": server.url, "prefill": False, "retries": 0,
                 "weight": weight} for (name, server), weight in zip(servers.items(), (3.0, 1.0), strict=False)]
    return parse_config({"run": {"problem": "number", "programs_dir": str(tmp_path / "programs"),
                                 "iterations": iterations, "db": str(tmp_path / "run.db"), "concurrency": 1,
                                 "eval_workers": 1, "seed": 7},
                         "policies": policies, **sections})


def iteration_policies(db: Path) -> dict[int, str]:
    """iteration -> the policy its calls were recorded with, straight from the SQLite file."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT DISTINCT iteration, policy FROM attempts WHERE iteration >= 1 "
                                  "AND kind = 'policy_call'").fetchall()
    return dict(rows)


def test_weighted_choice_draws_each_iteration_s_policy_from_the_run_seed_and_records_it(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as climber, ScriptedPolicyServer("breaker") as breaker:
        config = ensemble_config(tmp_path, {"climber": climber, "breaker": breaker}, 24)
        outcome = run_evolution(config)
        assert outcome.status == "finished"
        recorded = iteration_policies(tmp_path / "run.db")
        weights = Bandit("weights", {"climber": 3.0, "breaker": 1.0})
        expected = {i: weights.choose(["climber", "breaker"], random.Random(derive(7, ENSEMBLE, i)))
                    for i in range(1, 25)}
        assert recorded == expected
        counts = Counter(expected.values())
        assert 0 < counts["breaker"] < counts["climber"]
        assert (len(climber.requests), len(breaker.requests)) == (counts["climber"], counts["breaker"])
    store = ProgramStore(str(tmp_path / "run.db"), mode="read")
    programs = store.programs(outcome.run_id)
    assert {p.policy for p in programs if p.iteration >= 1} == {"climber"}  # the breaker's answers never score
    rows = {row["name"]: row for row in run_summary_dict(store, outcome.run_id)["by_policy"]}
    assert rows["climber"]["iterations"] == counts["climber"] and rows["breaker"]["iterations"] == counts["breaker"]
    assert rows["climber"]["children"] == counts["climber"] and rows["climber"]["valid_share"] == 1.0
    assert rows["breaker"]["children"] == 0 and rows["breaker"]["best"] is None
    assert rows["climber"]["best"] == max(p.scalar for p in programs)
    shown = io.StringIO()
    render_run(store, outcome.run_id, Console(file=shown, width=160))
    assert "by policy" in shown.getvalue() and "breaker" in shown.getvalue()


def test_a_bandit_gives_most_iterations_to_the_policy_whose_children_beat_their_parents(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as climber, ScriptedPolicyServer("breaker") as breaker:
        config = ensemble_config(tmp_path, {"climber": climber, "breaker": breaker}, 30,
                                 ensemble={"choice": "bandit", "bandit": "ucb1", "exploration": 0.3})
        outcome = run_evolution(config)
    counts = Counter(iteration_policies(tmp_path / "run.db").values())
    assert counts["breaker"] >= 1  # tried
    assert counts["climber"] >= 3 * counts["breaker"]
    rows = {row["name"]: row for row in run_summary_dict(ProgramStore(str(tmp_path / "run.db"), mode="read"),
                                                         outcome.run_id)["by_policy"]}
    assert rows["climber"]["improvements"] == counts["climber"]  # every climber child beat its parent


def test_a_resumed_bandit_holds_the_statistics_of_the_process_that_wrote_the_run(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as climber, ScriptedPolicyServer("breaker") as breaker:
        config = ensemble_config(tmp_path, {"climber": climber, "breaker": breaker}, 16,
                                 ensemble={"choice": "bandit", "bandit": "thompson"})
        problem = load_problem("number", tmp_path / "programs")
        store = ProgramStore(config.run.db)
        run_id = store.create_run("r", "number", "climber+breaker", 7, config.model_dump_json(), 16)
        with open_policies(config.ensemble_policies()) as policies:
            first = Controller(config, problem, store, policies, run_id)
            asyncio.run(first.run())
            resumed = Controller(config, problem, ProgramStore(config.run.db, mode="existing"), policies, run_id)
            assert resumed.restore()
    assert first.choices.bandit.stats == resumed.choices.bandit.stats
    assert first.choices.bandit.largest_gain == resumed.choices.bandit.largest_gain
    assert sum(stats.pulls for stats in first.choices.bandit.stats.values()) == 16
    # the next choices are the same draws on the same statistics
    assert [first.choices.choose(i).name for i in range(17, 30)] == [resumed.choices.choose(i).name
                                                                      for i in range(17, 30)]


def test_a_store_from_before_prompt_variants_is_still_split_by_policy_read_only(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as climber, ScriptedPolicyServer("breaker") as breaker:
        config = ensemble_config(tmp_path, {"climber": climber, "breaker": breaker}, 6)
        outcome = run_evolution(config)
    with sqlite3.connect(tmp_path / "run.db") as connection:
        connection.execute("ALTER TABLE attempts DROP COLUMN prompt_variant")
    store = ProgramStore(str(tmp_path / "run.db"), mode="read")
    rows = run_summary_dict(store, outcome.run_id)["by_policy"]
    assert sum(row["iterations"] for row in rows) == 6
    assert run_summary_dict(store, outcome.run_id)["by_instruction"] == []


@pytest.mark.parametrize(("data", "message"), [
    ({"policy": {"name": "x"}, "policies": [{"name": "a"}]}, "either [policy] or [[policies]]"),
    ({"policies": [{"name": "a"}, {"name": "a"}]}, "distinct names"),
    ({"policies": [{"name": "a"}, {"name": "b", "answers": 2}], "run": {"answers_per_iteration": 3}},
     "answers = 2 of policy 'b'"),
    ({"policies": [{"name": "a", "weight": 0}]}, "weight"),
    ({"ensemble": {"choice": "roulette"}}, "ensemble.choice"),
])
def test_ensemble_mistakes_are_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        parse_config(data, "evolve.toml")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("evolve.toml")


def test_a_single_policy_section_and_its_stored_config_keep_working() -> None:
    config = parse_config({"policy": {"name": "solo"}})
    assert [section.name for section in config.ensemble_policies()] == ["solo"]
    ensemble = parse_config({"policies": [{"name": "a"}, {"name": "b", "answers": 3}]})
    assert ensemble.policy.name == "a"
    assert RunConfig.model_validate_json(ensemble.model_dump_json()) == ensemble
