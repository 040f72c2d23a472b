"""What makes arms comparable (issue 28): every cell of a seed index draws the streams of its own problem, the same
for every policy, plain sampling draws others, a stored run keeps its seed; and the token cap is per answer, so an
m-answer policy may generate m times what a one-answer policy may per completion, in evolution and in sampling.

Scripted policies answer over real OpenAI-compatible endpoints on loopback (tests/scripted_policy_server.py), which
record every request's seed and max_tokens; real evaluator processes score into a real store."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from evolve.config import RunConfig, load_config, stored_config
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import ExperimentSpec, load_experiment
from evolve.engine.sampling import plan_samples, problem_sample, run_samples
from evolve.report.results import collect
from evolve.seeds import cell_seed, request_seed, sample_seed
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import ScriptedPolicyServer, number_problem

PROBLEMS = ("number", "digits")

EXPERIMENT = """\
problems = {problems}
seeds = [3]
iterations = 2
parallel_cells = 1
[run]
programs_dir = "{programs}"
concurrency = 1
eval_workers = 1
"""

POLICY = """\
[[policies]]
name = "{name}"
backend = "openai"
url = "{url}"
prefill = false
retries = 0
answers = {answers}
max_new_tokens = 40
"""


def programs(tmp_path: Path) -> Path:
    """`number` and a twin named `digits` (its own description, so that its requests can be told apart)."""
    root = tmp_path / "programs"
    folder = number_problem(root)
    twin = root / "digits"
    shutil.copytree(folder, twin)
    toml = (twin / "problem.toml").read_text()
    (twin / "problem.toml").write_text(toml.replace('name = "number"', 'name = "digits"')
                                       .replace("Set x to a number", "Set x to a number of digits"))
    return root


def experiment(tmp_path: Path, policies: dict[str, tuple[str, int]], problems: tuple[str, ...] = PROBLEMS
               ) -> ExperimentSpec:
    """An experiment of `policies` (name -> (url, answers)) on `problems`, seed 3, two iterations per cell."""
    text = EXPERIMENT.format(problems=list(problems), programs=programs(tmp_path)).replace("'", '"')
    text += "".join(POLICY.format(name=name, url=url, answers=answers) for name, (url, answers) in policies.items())
    path = tmp_path / "fair.toml"
    path.write_text(text)
    return load_experiment(path)


def problem_of(body: dict[str, Any]) -> str:
    user = next(message["content"] for message in reversed(body["messages"]) if message["role"] == "user")
    return "digits" if "number of digits" in user else "number"


def seeds_by_problem(server: ScriptedPolicyServer) -> dict[str, set[int]]:
    seeds: dict[str, set[int]] = {}
    for body in server.requests:
        seeds.setdefault(problem_of(body), set()).add(body["seed"])
    return seeds


def expected_seeds(run_seed: int, iterations: int = 2) -> set[int]:
    return {request_seed(run_seed, iteration, 0) for iteration in range(1, iterations + 1)}


def sampling_base(tmp_path: Path, db: str, url: str, answers: int = 1) -> RunConfig:
    return load_config(None, {"run.db": db, "run.programs_dir": str(tmp_path / "programs"), "run.seed": 3,
                              "policy.backend": "openai", "policy.url": url, "policy.prefill": False,
                              "policy.retries": 0, "policy.answers": answers, "policy.max_new_tokens": 40})


# ---------------------------------------------------------------- a: streams


def test_cells_of_one_seed_index_draw_their_problems_streams_the_same_for_every_policy(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as first, ScriptedPolicyServer("climber") as second:
        spec = experiment(tmp_path, {"a": (first.url, 1), "b": (second.url, 1)})
        assert ExperimentRunner(spec).run().finished
    expected = {problem: expected_seeds(cell_seed(3, problem)) for problem in PROBLEMS}
    assert seeds_by_problem(first) == seeds_by_problem(second) == expected  # paired across policies
    assert not expected["number"] & expected["digits"]  # independent across problems
    store = ProgramStore(spec.db, mode="read")
    for cell in store.experiment_cells(spec.name):
        run = store.get_run(cell.run_id)
        assert (cell.seed, run.seed, stored_config(run.config_json).run.seed) == (3, 3, cell_seed(3, cell.problem))


def test_a_cell_stored_on_its_seed_index_resumes_on_that_seed(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as first, ScriptedPolicyServer("climber") as second:
        spec = experiment(tmp_path, {"a": (first.url, 1), "b": (second.url, 1)}, ("number",))
        store = ProgramStore(spec.db)
        store.save_experiment(spec.name, spec.model_dump_json())
        fresh = spec.cell_config("number", "a", 3)
        legacy = fresh.model_copy(update={"run": fresh.run.model_copy(update={"seed": 3})})  # as stored before
        run_id = store.create_run(legacy.run.name, "number", "a", 3, legacy.model_dump_json(), legacy.run.iterations,
                                  experiment=spec.name)
        store.set_run_status(run_id, "interrupted")
        assert ExperimentRunner(spec).run().finished
    assert seeds_by_problem(first) == {"number": expected_seeds(3)}
    assert seeds_by_problem(second) == {"number": expected_seeds(cell_seed(3, "number"))}
    assert stored_config(ProgramStore(spec.db, mode="read").get_run(run_id).config_json).run.seed == 3


def test_sampling_draws_other_streams_than_the_evolution_of_the_same_problem_and_seed(tmp_path: Path) -> None:
    programs(tmp_path)
    db = str(tmp_path / "sample.db")
    store = ProgramStore(db)
    with ScriptedPolicyServer("climber") as server:
        plans = plan_samples(store, sampling_base(tmp_path, db, server.url), list(PROBLEMS), 2)
        assert sorted(run_samples(store, plans).finished) == ["sample/digits/smollm2-135m",
                                                              "sample/number/smollm2-135m"]
    sampled = seeds_by_problem(server)
    assert sampled == {problem: expected_seeds(sample_seed(3, problem)) for problem in PROBLEMS}
    for problem in PROBLEMS:
        assert not sampled[problem] & expected_seeds(cell_seed(3, problem))
    assert {run.seed for run in store.list_runs()} == {3}  # the runs row records the seed asked for


# ---------------------------------------------------------------- d: tokens per answer


def test_an_m_answer_policy_may_generate_m_times_the_per_answer_cap_in_evolution(tmp_path: Path) -> None:
    with ScriptedPolicyServer("climber") as one, ScriptedPolicyServer("climber") as three:
        spec = experiment(tmp_path, {"one": (one.url, 1), "three": (three.url, 3)}, ("number",))
        assert ExperimentRunner(spec).run().finished
    assert [body["max_tokens"] for body in one.requests] == [40] * 6  # 3 requests of 1 answer per iteration
    assert [body["max_tokens"] for body in three.requests] == [120] * 2  # 1 request of 3 answers per iteration
    budgets = collect(ProgramStore(spec.db, mode="read"), spec, samples=50)
    assert (budgets.budget("one").completion_tokens, budgets.budget("three").completion_tokens) == (6 * 8, 2 * 8)


def test_an_m_answer_policy_may_generate_m_times_the_per_answer_cap_in_plain_sampling(tmp_path: Path) -> None:
    programs(tmp_path)
    db = str(tmp_path / "sample.db")
    store = ProgramStore(db)
    caps = {}
    for m in (1, 3):
        with ScriptedPolicyServer("climber") as server:
            base = sampling_base(tmp_path, db, server.url, answers=m)
            base = base.model_copy(update={"policy": base.policy.model_copy(update={"name": f"m{m}"})})
            (plan,) = plan_samples(store, base, ["number"], 3)
            run_id = run_samples(store, [plan]).finished[plan.config.run.name]
        caps[m] = [body["max_tokens"] for body in server.requests]
        sample = problem_sample(store, plan, run_id, 3)
        assert (sample.n, sample.completion_tokens, sample.tokens_per_answer) == (3, 8 * len(caps[m]), 8 * len(
            caps[m]) / 3)
    assert caps == {1: [40, 40, 40], 3: [120]}
