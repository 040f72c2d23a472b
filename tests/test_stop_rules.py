"""run.stop_when_solved and run.target_score: a run (or an experiment's cell) finishes as soon as a child solves the
problem or reaches the target, says why, and a resume of a run that stopped so does not continue. A real store, real
evaluators on the real fizzbuzz problem, and a real HTTP policy server on loopback whose second answer solves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evolve.config import ConfigError, load_config
from evolve.store.program_store import ProgramStore
from tests.fake_policy_server import FakePolicyServer

ROOT = Path(__file__).resolve().parents[1]


def overrides(url: str, db: Path, **run: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "run.problem": "fizzbuzz", "run.programs_dir": str(ROOT / "programs"), "run.db": str(db),
        "run.iterations": 20, "run.concurrency": 1, "run.eval_workers": 1,
        "policy.backend": "openai", "policy.url": url, "policy.model": "fake", "policy.name": "fake"}
    settings.update({f"run.{key}": value for key, value in run.items()})
    return settings


def test_a_run_that_solves_its_problem_stops_early_and_a_resume_does_not_continue(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import evolve
    from evolve.report.run_drawing import draw_run

    db = tmp_path / "stop.db"
    with FakePolicyServer(latency_s=0.01) as server:
        console = Console(file=open(tmp_path / "out.txt", "w"), width=200)  # noqa: SIM115 - closed with the test
        outcome = draw_run(lambda observe: evolve.run(load_config(None, overrides(server.url, db,
                                                                                   stop_when_solved=True)),
                                                      on_event=observe), console, live=False)
        assert outcome.status == "finished"
        assert outcome.stats.stopped.startswith("solved at iteration")
        assert outcome.stats.first_solved is not None
        used = outcome.stats.iterations_done
        assert 1 <= used < 20
        requests = server.requests
        resumed = draw_run(lambda observe: evolve.run(load_config(None, {"run.db": str(db)}), resume=outcome.run_id,
                                                      on_event=observe), console, live=False)
        assert resumed.status == "finished" and resumed.stats.stopped == outcome.stats.stopped
        assert resumed.stats.iterations_done == used and server.requests == requests  # not one more request
    from evolve.report.run_summary import run_summary_dict

    store = ProgramStore(str(db), mode="read")
    assert store.get_run(outcome.run_id).status == "finished"
    assert run_summary_dict(store, outcome.run_id)["stopped"] == outcome.stats.stopped  # `evolve show` reads it back
    solved = outcome.stats.first_solved
    number = store.program_number(outcome.run_id, solved.id)  # the live lines number programs as `show RUN:N` does
    assert outcome.stats.solved_number == resumed.stats.solved_number == number
    console.file.close()
    from evolve.cli.main import main

    assert main(["runs", "--db", str(db)]) == 0  # read back from the store: the rule in its config holds
    printed = (tmp_path / "out.txt").read_text()
    assert "stopped early: solved at iteration" in printed
    assert f"child {outcome.run_id}:{number} scalar 1.0000 SOLVED" in printed
    assert "finished (stopped early)" in capsys.readouterr().out


def test_without_the_rule_the_same_run_spends_its_budget(tmp_path: Path) -> None:
    import evolve

    with FakePolicyServer(latency_s=0.0) as server:
        config = load_config(None, overrides(server.url, tmp_path / "all.db", iterations=4))
        outcome = evolve.run(config)
    assert outcome.stats.first_solved is not None  # it solved, yet went on
    assert outcome.stats.iterations_done == 4 and outcome.stats.stopped == ""


def test_a_target_the_seed_already_reaches_stops_before_any_policy_call(tmp_path: Path) -> None:
    import evolve

    with FakePolicyServer(latency_s=0.0) as server:
        config = load_config(None, overrides(server.url, tmp_path / "t.db", target_score=-1e9))
        outcome = evolve.run(config)
        assert server.requests == 0
    assert outcome.status == "finished" and outcome.stats.iterations_done == 0
    assert outcome.stats.stopped.startswith("target score -1e+09 reached")


def test_a_target_that_is_not_a_number_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="run.target_score"):
        load_config(None, {"run.target_score": "high"})


def test_an_experiment_cell_stops_early_and_says_so(tmp_path: Path) -> None:
    from evolve.cli.main import main

    with FakePolicyServer(latency_s=0.01) as server:
        experiment = tmp_path / "stops.toml"
        experiment.write_text(
            f'problems = ["fizzbuzz"]\nseeds = [0]\niterations = 20\ndb = "{tmp_path / "x.db"}"\n'
            f'[run]\nprograms_dir = "{ROOT / "programs"}"\nconcurrency = 1\neval_workers = 1\n'
            f'[[policies]]\nname = "fake"\nbackend = "openai"\nurl = "{server.url}"\nmodel = "fake"\n')
        code = main(["experiment", str(experiment), "--plain", "--set", "run.stop_when_solved=true"])
    assert code == 0
    store = ProgramStore(str(tmp_path / "x.db"), mode="read")
    (run,) = store.list_runs()
    assert run.status == "finished"
    done = sum(1 for iteration in store.completed_iterations(run.id) if iteration >= 1)
    assert 1 <= done < 20 and store.first_solved(run.id) is not None
    out = tmp_path / "report"
    assert main(["report", str(experiment), "--set", "run.stop_when_solved=true", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "finished (stopped early)" in page and f"{done}/20" in page
