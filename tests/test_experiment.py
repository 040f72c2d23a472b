"""Experiments: the file's mistakes read clearly, cells run in one store, a kill resumes whole, failing policies show."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from evolve.cli.experiments import experiment_header
from evolve.cli.main import main
from evolve.config import ConfigError
from evolve.engine.events import CellEnded, CellStarted
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import load_experiment
from evolve.problems.problem import list_problems
from evolve.report.results import collect
from evolve.report.terminal import render_report
from evolve.seeds import cell_seed
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import (
    EVALUATOR,
    Refusal,
    ScriptedPolicyServer,
    answer,
    number_problem,
    write_problem,
)

ROOT = Path(__file__).resolve().parents[1]

SMALL = """\
problems = ["run_length", "symbolic_regression"]
seeds = [0, 1]
iterations = 2
parallel_cells = 2
[run]
programs_dir = "{programs}"
concurrency = 2
[[policies]]
name = "smollm2"
backend = "llamacpp"
max_new_tokens = 160
"""


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text.replace("{programs}", str(ROOT / "programs")))
    return path


# ---------------------------------------------------------------- the experiment file


def test_name_and_store_default_to_the_files_stem_and_a_db_beside_it(tmp_path: Path) -> None:
    spec = load_experiment(write(tmp_path, SMALL, "compare.toml"))
    assert spec.name == "compare" and spec.db == str(tmp_path / "compare.db")
    assert len(spec.cells()) == 4
    config = spec.cell_config("run_length", "smollm2", 1)
    assert (config.run.problem, config.run.seed, config.run.iterations, config.run.db) == (
        "run_length", cell_seed(1, "run_length"), 2, spec.db)
    assert config.run.name == "compare/run_length/smollm2/s1" and config.policy.max_new_tokens == 160


def test_an_arm_given_some_of_the_seeds_has_cells_for_those_only(tmp_path: Path) -> None:
    text = SMALL.replace("seeds = [0, 1]", "seeds = [0, 1, 2]").replace("[run]", "arm_seeds = { b = [2, 0] }\n[run]")
    spec = load_experiment(write(tmp_path, text + '[[policies]]\nname = "b"\nbackend = "llamacpp"\n'))
    assert spec.seeds_of("smollm2") == (0, 1, 2) and spec.seeds_of("b") == (0, 2)  # in the order of seeds
    cells = spec.cells()
    assert [seed for problem, arm, seed in cells if arm == "b"] == [0, 0, 2, 2]
    assert len(cells) == 2 * 3 + 2 * 2
    assert "2 policies x 2 problems x 3 seeds (some arms on some of them) = 10 cells" in experiment_header(spec)


def test_order_seeds_runs_every_arms_cells_of_a_seed_before_the_next_seed(tmp_path: Path) -> None:
    text = SMALL.replace("seeds = [0, 1]", "seeds = [0, 1, 2]").replace("[run]", "arm_seeds = { b = [1, 2] }\n[run]")
    text += '[[policies]]\nname = "b"\nbackend = "llamacpp"\n'
    by_arms = load_experiment(write(tmp_path, text))
    by_seeds = load_experiment(write(tmp_path, text.replace("[run]", 'order = "seeds"\n[run]')))
    batches = [[(arm, seed) for _problem, arm, seed in by_arms.cells()][i] for i in range(0, 10, 2)]
    assert batches == [("smollm2", 0), ("smollm2", 1), ("smollm2", 2), ("b", 1), ("b", 2)]
    assert [[(arm, seed) for _problem, arm, seed in by_seeds.cells()][i] for i in range(0, 10, 2)] == [
        ("smollm2", 0), ("smollm2", 1), ("b", 1), ("smollm2", 2), ("b", 2)]
    assert sorted(by_seeds.cells()) == sorted(by_arms.cells())
    assert [problem for problem, _arm, _seed in by_seeds.cells()][:2] == ["run_length", "symbolic_regression"]


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda t: t.replace("seeds", "seed"), "unknown key 'seed'"),
        (lambda t: t.replace("max_new_tokens", "max_tokens"), "unknown key 'policies.0.max_tokens'"),
        (lambda t: t.replace("iterations = 2", "iterations = 0"), "'iterations'"),
        (lambda t: t.replace("[0, 1]", "[0, 0]"), "seeds must be distinct; repeated: 0"),
        (lambda t: t.replace("[0, 1]", "[0, -1]"), "'seeds.1'"),
        (lambda t: t + '[[policies]]\nname = "smollm2"\n', "policies' names must be distinct"),
        (lambda t: t.replace('backend = "llamacpp"', 'backend = "openai"'), "needs url"),
        (lambda t: t.replace("[run]", "[run"), "not valid TOML"),
        (lambda t: t.replace("[run]", "arm_seeds = { other = [0] }\n[run]"), "arm_seeds: 'other' is no arm"),
        (lambda t: t.replace("[run]", "arm_seeds = { smollm2 = [1, 2] }\n[run]"),
         "arm_seeds.smollm2 = [1, 2] must be distinct seeds among seeds = [0, 1], at least one; not among them: 2"),
        (lambda t: t.replace("[run]", "arm_seeds = { smollm2 = [] }\n[run]"), "at least one"),
    ],
)
def test_experiment_file_mistake_is_one_line_naming_the_file(tmp_path: Path, edit, fragment: str) -> None:
    path = write(tmp_path, edit(SMALL))
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    message = str(error.value)
    assert message.startswith(str(path)) and fragment in message and "\n" not in message, message


@pytest.mark.parametrize("name", ["default", "vpo_vs_grpo"])
def test_shipped_experiments_parse_and_name_shipped_problems(name: str) -> None:
    spec = load_experiment(ROOT / "experiments" / f"{name}.toml")
    assert set(spec.problems) <= set(list_problems(ROOT / "programs")), spec.problems
    assert len(spec.policies) == 2


# ---------------------------------------------------------------- a policy whose every call fails


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """A real OpenAI-compatible endpoint that answers every generation request 400 (a misconfigured model)."""
    with ScriptedPolicyServer(lambda number, body: Refusal(400, "model 'x' does not support chat"), "x") as server:
        yield server.url


def test_policy_failing_every_call_is_reported_as_failing_not_as_cracking_nothing(tmp_path: Path,
                                                                                   refusing_server: str) -> None:
    text = SMALL.replace('problems = ["run_length", "symbolic_regression"]', 'problems = ["run_length"]')
    text = text.replace('backend = "llamacpp"', f'backend = "openai"\nurl = "{refusing_server}"\nmodel = "x"\nretries = 0')
    spec = load_experiment(write(tmp_path, text))
    outcome = ExperimentRunner(spec).run()
    assert outcome.finished and not outcome.errors
    results = collect(ProgramStore(spec.db), spec, samples=200)
    row = results.row("run_length", "smollm2")
    assert (row.state, row.cracked, row.policy_calls, row.policy_errors, row.seeds_run) == ("policy_failed", 0, 0,
                                                                                          4, 2)
    assert all(cell.policy_failed for cell in results.cells)
    console = Console(record=True, width=160)
    render_report(results, console)
    assert "policy failed: every call errored (4 errors)" in console.export_text()


# ---------------------------------------------------------------- the real model, killed and resumed


@pytest.mark.slow
def test_experiment_killed_mid_way_resumes_as_a_whole_with_one_run_per_cell(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOLVE_LEASE_S", "2")  # the killed cells' leases lapse soon after the kill
    path = write(tmp_path, SMALL)
    spec = load_experiment(path)
    command = [sys.executable, "-m", "evolve.cli.main", "experiment", str(path), "--plain"]
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    deadline = time.monotonic() + 900  # bounds a hang only: the kill waits for an iteration, however slow
    while time.monotonic() < deadline and first.poll() is None:
        if Path(spec.db).exists() and _iterations_done(spec.db) >= 1:
            break
        time.sleep(0.5)
    assert first.poll() is None, first.stdout.read().decode() if first.stdout else ""
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = _iterations_done(spec.db)
    assert 1 <= killed_at < 8
    time.sleep(2)

    assert main(["experiment", str(path), "--plain"]) == 0
    store = ProgramStore(spec.db)
    cells = store.experiment_cells(spec.name)
    assert sorted((c.problem, c.seed) for c in cells) == sorted((p, s) for p in spec.problems for s in spec.seeds)
    for cell in cells:
        run = store.get_run(cell.run_id)
        assert run.status == "finished"
        assert store.completed_iterations(cell.run_id) == {0, 1, 2}
    assert len(store.list_runs()) == 4  # no cell was started twice

    assert main(["report", str(path), "--out", str(tmp_path / "report")]) == 0
    table = (tmp_path / "report" / "table.csv").read_text().splitlines()
    assert len(table) == 1 + 2 and all(",ok," in line for line in table[1:])
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [c["seeds"] for c in report["curves"]] == [2] * 2 * 5  # two metrics against five axes, on 2 seeds


def _iterations_done(db: str) -> int:
    store = ProgramStore(db)
    try:
        return sum(len([i for i in store.completed_iterations(run.id) if i >= 1]) for run in store.list_runs())
    finally:
        store.close()


def test_a_policy_failing_call_after_call_stops_the_run_resumably_instead_of_eating_its_budget(
        tmp_path: Path, refusing_server: str) -> None:
    from evolve.api import run as evolve_run
    from evolve.config import parse_config
    from evolve.report.run_drawing import draw_run

    db = tmp_path / "refused.db"
    config = parse_config({
        "run": {"problem": "run_length", "iterations": 30, "db": str(db), "concurrency": 1,
                "programs_dir": str(Path(__file__).resolve().parents[1] / "programs"), "stop_after_policy_errors": 3},
        "policy": {"backend": "openai", "url": refusing_server, "model": "x", "retries": 0}})
    console = Console(record=True, width=200)
    outcome = draw_run(lambda observe: evolve_run(config, on_event=observe), console, live=False)
    assert outcome.status == "policy_unavailable"
    store = ProgramStore(str(db))
    (run,) = store.list_runs()
    assert run.status == "interrupted"
    assert store.attempt_counts(run.id).get("policy_error") == 2  # the third is left for a resume to ask again
    text = console.export_text()
    assert "failed 3 calls in a row" in text and "does not support chat" in text and f"--resume {run.id}" in text


# ---------------------------------------------------------------- Ctrl-C with requests in flight

HELD = """\
problems = ["number"]
seeds = [0, 1, 2]
iterations = 4
answers_per_iteration = 2
parallel_cells = 3
[run]
programs_dir = "{programs}"
concurrency = 2
eval_workers = 1
[[policies]]
name = "climber"
backend = "openai"
url = "{url}"
prefill = false
retries = 0
"""


def test_ctrl_c_with_requests_in_flight_ends_the_experiment_in_its_one_message_and_the_command_resumes(
        tmp_path: Path) -> None:
    held = threading.Event()
    first_answers = 6  # then every request waits, so each cell has iterations whose requests are in flight

    def climb(number: int, body: dict) -> str:
        if number > first_answers:
            held.wait()
        return answer("climber", body)

    number_problem(tmp_path / "programs")
    with ScriptedPolicyServer(climb, "climber") as server:
        path = tmp_path / "held.toml"
        path.write_text(HELD.replace("{programs}", str(tmp_path / "programs")).replace("{url}", server.url))
        command = [sys.executable, "-m", "evolve.cli.main", "experiment", str(path), "--plain"]
        first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "COLUMNS": "300"})
        deadline = time.monotonic() + 600  # bounds a hang only: the signal waits for the held requests
        while len(server.requests) < first_answers + 6 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.communicate()
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=600)
        held.set()
        assert first.returncode == 130, out[-2000:] + err[-2000:]
        assert "continue with: evolve experiment" in out
        assert "Traceback" not in out + err and "never retrieved" not in out + err, err[-3000:]

        again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "COLUMNS": "300"})
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "3/3 cells finished" in again.stdout and "never retrieved" not in again.stderr


SEED_ROUNDS = """\
problems = ["number", "other_number"]
seeds = [0, 1]
iterations = 2
parallel_cells = 2
order = "seeds"
[run]
programs_dir = "{programs}"
concurrency = 1
[[policies]]
name = "a"
backend = "openai"
url = "{url}"
prefill = false
[[policies]]
name = "b"
backend = "openai"
url = "{url}"
prefill = false
"""


def test_order_seeds_finishes_a_seeds_cells_of_every_arm_before_any_cell_of_the_next_seed(tmp_path: Path) -> None:
    number_problem(tmp_path / "programs")
    write_problem(tmp_path / "programs", "other_number", "Set x to a number too.", EVALUATOR)
    events: list[tuple[str, str, int]] = []

    def record(event: object) -> None:
        if isinstance(event, CellStarted | CellEnded):
            _problem, arm, seed = event.cell.key
            events.append(("start" if isinstance(event, CellStarted) else "end", arm, seed))

    with ScriptedPolicyServer("climber") as server:
        path = write(tmp_path, SEED_ROUNDS.replace("{programs}", str(tmp_path / "programs")).replace(
            "{url}", server.url))
        outcome = ExperimentRunner(load_experiment(path), on_event=record).run()
    assert outcome.finished and len(outcome.cells) == 8, outcome
    rounds = [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    for earlier, later in zip(rounds, rounds[1:], strict=False):
        last_end = max(i for i, (what, *batch) in enumerate(events) if what == "end" and tuple(batch) == earlier)
        first_start = min(i for i, (what, *batch) in enumerate(events) if what == "start" and tuple(batch) == later)
        assert last_end < first_start, events
