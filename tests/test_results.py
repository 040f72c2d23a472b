"""The report's numbers from a store written through the real store API, judged by real problem folders.

Two problems made by `evolve new-problem` (14 tests each, solved when all pass), one problem whose folder is gone,
two policies, three seeds, six iterations. Each stored program says how many tests it passed; its stored `solved`
flag follows an OLD rule (half the tests), so the report must re-judge it by the folder's current rule. Policy "A"
writes three children per iteration (one request of three answers, three evaluations), spends 40 tokens and 2 s per
iteration under a per-answer cap of 64 tokens; "B" one child, 10 tokens and 1 s under the default cap of 384. A on
beta seed 2 never cracks: a censored seed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from evolve.cli.main import main
from evolve.engine.experiment_spec import ExperimentSpec
from evolve.engine.sampling import ProblemSample
from evolve.problems.check import new_problem
from evolve.report.html import report_html
from evolve.report.results import ExperimentResults, collect
from evolve.report.results_files import write_csvs, write_json
from evolve.report.stats import BET_FRACTIONS, clopper_pearson, holm
from evolve.report.study_report import study_json
from evolve.report.terminal import render_report
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

TESTS = 14
ITERATIONS = 6
SEEDS = (0, 1, 2)
# (problem, policy, seed) -> {iteration: tests passed by the best child of that iteration}; the seed passes 3
SCRIPTS: dict[tuple[str, str, int], dict[int, int]] = {
    ("alpha", "A", 0): {1: 8, 2: 14}, ("alpha", "A", 1): {3: 14}, ("alpha", "A", 2): {1: 10, 5: 14},
    ("beta", "A", 0): {4: 14}, ("beta", "A", 1): {2: 14}, ("beta", "A", 2): {1: 9, 6: 13},  # never all 14
    ("alpha", "B", 0): {6: 14}, ("alpha", "B", 1): {2: 12}, ("alpha", "B", 2): {3: 7},
    ("beta", "B", 0): {}, ("beta", "B", 1): {5: 4}, ("beta", "B", 2): {},
    ("gone", "A", 0): {1: 9}, ("gone", "A", 1): {}, ("gone", "A", 2): {},
    ("gone", "B", 0): {}, ("gone", "B", 1): {}, ("gone", "B", 2): {},
}
COST = {"A": (3, 40, 2.0), "B": (1, 10, 1.0)}  # children per iteration, tokens per iteration, seconds per iteration


def _vector(passed: int) -> dict[str, float]:
    return {f"test_{i:02d}": float(i < passed) for i in range(TESTS)}


def _child(passed: int, parent_id: int | None, policy: str) -> ChildRecord:
    return ChildRecord(code=f"x = {passed}\n", parent_id=parent_id, island=0, policy=policy, edit="...",
                       scores=_vector(passed), scalar=passed / TESTS, solved=passed >= TESTS // 2)  # the OLD rule


def _write_cell(store: ProgramStore, spec: ExperimentSpec, key: tuple[str, str, int], script: dict[int, int]) -> None:
    problem, policy, seed = key
    config = spec.cell_config(problem, policy, seed)
    run_id = store.create_run(name=config.run.name, problem=problem, policy=policy, seed=seed,
                              config_json=config.model_dump_json(), iterations_target=ITERATIONS,
                              experiment=spec.name)
    (seed_program,) = store.record_iteration(run_id, 0, [_child(3, None, "")], run_elapsed_s=0.5)
    children, tokens, seconds = COST[policy]
    for iteration in range(1, ITERATIONS + 1):
        call = AttemptRecord("policy_call", "stop", prompt="improve it", completion="...", latency_s=0.5,
                             prompt_tokens=100, completion_tokens=tokens)
        passed = script.get(iteration)
        outcomes: list[AttemptRecord | ChildRecord] = [
            _child(passed if passed is not None and answer == 0 else 1, seed_program.id, policy)
            for answer in range(children)]
        store.record_iteration(run_id, iteration, [call, *outcomes], policy=policy,
                               run_elapsed_s=0.5 + seconds * iteration)
    store.set_run_status(run_id, "finished")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory,
               module_store_url: str) -> tuple[ProgramStore, ExperimentSpec, Path]:
    root = tmp_path_factory.mktemp("results")
    programs = root / "programs"
    for name in ("alpha", "beta"):
        new_problem(name, programs)
    spec = ExperimentSpec.model_validate({
        "name": "ab", "db": module_store_url, "problems": ["alpha", "beta", "gone"], "seeds": list(SEEDS),
        "iterations": ITERATIONS, "run": {"programs_dir": str(programs)},
        "policies": [{"name": "A", "answers": 3, "max_new_tokens": 64}, {"name": "B"}]})
    store = ProgramStore(spec.db)
    store.save_experiment(spec.name, spec.model_dump_json())
    for key, script in SCRIPTS.items():
        _write_cell(store, spec, key, script)
    return store, spec, programs


@pytest.fixture(scope="module")
def results(experiment: tuple[ProgramStore, ExperimentSpec, Path]) -> ExperimentResults:
    store, spec, _ = experiment
    return collect(store, spec)


def test_cracked_follows_the_problems_current_rule_not_the_stored_flag(
        experiment: tuple[ProgramStore, ExperimentSpec, Path], results: ExperimentResults) -> None:
    alpha_b = results.row("alpha", "B")  # passed 14, 12, 7: stored flags say 3 cracked, the rule now says 1
    assert (alpha_b.cracked, alpha_b.seeds_run) == (1, 3)
    assert alpha_b.cracked_interval is not None and (alpha_b.cracked_interval.low, alpha_b.cracked_interval.high) \
        == pytest.approx(clopper_pearson(1, 3))
    assert results.row("beta", "A").cracked == 2 and all(c.rule == "current" for c in results.cells
                                                         if c.problem != "gone")
    store, spec, programs = experiment
    toml = programs / "alpha" / "problem.toml"
    original = toml.read_text()
    try:  # the rule relaxed after the run: half the tests now solve it, and the report follows
        toml.write_text(original.replace("all_at_least = 1.0", "scalar_at_least = 0.5"))
        relaxed = collect(store, spec)
        assert relaxed.row("alpha", "B").cracked == 3 and relaxed.row("alpha", "B").median_first_iteration == 3.0
    finally:
        toml.write_text(original)


def test_a_problem_folder_that_no_longer_loads_falls_back_to_the_stored_flags_and_says_so(
        results: ExperimentResults) -> None:
    gone = results.row("gone", "A")
    assert gone.cracked == 1 and {c.rule for c in results.cells if c.problem == "gone"} == {"stored"}
    assert any(note.startswith("gone: the problem folder does not load now") for note in results.notes)


def test_first_crack_counts_a_seed_that_never_cracked_as_censored(results: ExperimentResults) -> None:
    beta = results.row("beta", "A")  # cracked at 4 and 2; seed 2 censored at 6
    assert beta.first_crack is not None and beta.first_crack.censored == 1
    assert beta.median_first_iteration == 4.0  # KM reaches 1/2 at 4 (2/3 by then); dropping the censored seed: 3
    never = results.row("alpha", "B")  # one crack at 6 out of 3 seeds: KM never reaches one half
    assert never.median_first_iteration is None and never.first_crack.longest_budget == ITERATIONS


def test_mean_best_interval_never_has_zero_width_when_seeds_agree(results: ExperimentResults) -> None:
    agree = results.row("alpha", "A").mean_best_scalar  # every seed reached 1.0
    assert agree is not None and agree.estimate == 1.0 and agree.n == 3
    # the betting bound for three values at the top: where the gambler betting "above m" reaches 2 / alpha = 40
    assert 0.2 < agree.low < 0.3 and agree.high == 1.0 and agree.width == pytest.approx(1.0 - agree.low)
    assert np.mean((1 + BET_FRACTIONS * (1 - agree.low) / agree.low) ** 3) == pytest.approx(40.0, rel=1e-6)


def test_curves_exist_against_all_four_axes_on_a_common_grid(results: ExperimentResults) -> None:
    for policy in ("A", "B"):
        for axis in ("iterations", "evaluations", "tokens", "wall_s"):
            curve = results.curve(policy, "cracked_share", axis=axis)
            assert curve.seeds == 3 and curve.problems == 3 and curve.x[0] == 0
    a_evals = results.curve("A", "cracked_share", axis="evaluations")
    b_evals = results.curve("B", "best_score", axis="evaluations")
    assert a_evals.x[-1] == ITERATIONS * 3 and b_evals.x[-1] == ITERATIONS  # the budget each seed reached
    a_iter = results.curve("A", "cracked_share")
    # A cracks alpha at 2, 3, 5, beta at 4, 2 (never seed 2) and gone (stored flag) at 1 on seed 0: at iteration 2,
    # seed 0 has 2 of 3 problems, seed 1 has 1, seed 2 none
    assert a_iter.mean[2] == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
    # on the evaluations axis A's iteration t ends at 3t evaluations: the same value at x = 6
    assert a_evals.mean[list(a_evals.x).index(6.0)] == pytest.approx(a_iter.mean[2])
    a_wall = results.curve("A", "cracked_share", axis="wall_s")
    assert a_wall.x[-1] == pytest.approx(0.5 + 2.0 * ITERATIONS)
    assert all(lo <= m <= hi for lo, m, hi in zip(a_wall.low, a_wall.mean, a_wall.high, strict=True))
    assert all(hi > lo for lo, hi in zip(a_iter.low, a_iter.high, strict=True))  # never zero width


def test_budgets_state_what_each_arm_spent(results: ExperimentResults) -> None:
    a, b = results.budget("A"), results.budget("B")
    assert (a.cells, a.iterations, a.evaluations, a.completion_tokens, a.policy_calls) == (9, 54, 162, 2160, 54)
    assert (b.evaluations, b.completion_tokens) == (54, 540)
    assert a.wall_s == pytest.approx(9 * (0.5 + 12.0)) and b.wall_s == pytest.approx(9 * 6.5)


def test_budgets_give_tokens_per_answer_beside_each_arms_per_answer_cap(results: ExperimentResults,
                                                                        tmp_path: Path) -> None:
    a, b = results.budget("A"), results.budget("B")  # A: 40 tokens per request of 3 answers; B: 10 per answer
    assert (a.answers, a.completion_tokens, a.max_new_tokens) == (9 * ITERATIONS * 3, 2160, (64,))
    assert (b.answers, b.completion_tokens, b.max_new_tokens) == (9 * ITERATIONS, 540, (384,))
    assert (a.tokens_per_answer, b.tokens_per_answer) == (pytest.approx(40 / 3), pytest.approx(10.0))
    assert {c.answers for c in results.cells if c.policy == "A"} == {3 * ITERATIONS}

    console = Console(record=True, width=250)
    render_report(results, console)
    lines = console.export_text().splitlines()
    head = next(line for line in lines if "tokens per answer" in line and "cap per answer" in line)
    a_row = next(line for line in lines if line.startswith("│ A ") and "(40.0/it)" in line)
    assert [cell.strip() for cell in a_row.split("│")][5:9] == ["2,160 (40.0/it)", "162 (3.0/it)", "13.3", "64"]
    assert [cell.strip() for cell in head.split("┃")][6:9] == ["answers", "tokens per answer", "cap per answer"]

    page = report_html(results)
    budgets = page[page.index('<table class="budgets">'):]
    budgets = budgets[:budgets.index("</table>")]
    assert "<th class=\"num\">tokens per answer</th><th class=\"num\">cap per answer</th>" in budgets
    assert '<td class="num">13.3</td><td class="num">64</td>' in budgets
    assert '<td class="num">10.0</td><td class="num">384</td>' in budgets

    write_csvs(results, tmp_path)
    rows = {r["policy"]: r for r in csv.DictReader((tmp_path / "budgets.csv").open())}
    assert (rows["A"]["answers"], rows["A"]["max_new_tokens"]) == ("162", "64")
    assert float(rows["A"]["tokens_per_answer"]) == pytest.approx(40 / 3)
    assert {r["answers"] for r in csv.DictReader((tmp_path / "cells.csv").open()) if r["policy"] == "B"} == {"6"}
    write_json(results, tmp_path / "report.json")
    budget = json.loads((tmp_path / "report.json").read_text())["budgets"][0]
    assert (budget["answers"], budget["max_new_tokens"]) == (162, [64])
    assert budget["tokens_per_answer"] == pytest.approx(40 / 3)


def test_an_ensemble_of_one_and_three_answer_members_counts_the_answers_each_request_asked_for(
        tmp_path: Path) -> None:
    """Arm "one" (m = 1) has a failed request; ensemble "mix" runs "one" in iteration 1 (three requests) and "three"
    (m = 3) in iteration 2 (one request): 3 answers asked per iteration either way, the failed request's included,
    as plain sampling counts them."""
    new_problem("alpha", tmp_path / "programs")
    spec = ExperimentSpec.model_validate({
        "name": "mixed", "db": str(tmp_path / "mixed.db"), "problems": ["alpha"], "iterations": 2,
        "run": {"programs_dir": str(tmp_path / "programs")},
        "policies": [{"name": "one", "max_new_tokens": 100}, {"name": "three", "answers": 3, "max_new_tokens": 50}],
        "ensembles": [{"name": "mix", "members": ["one", "three"]}]})
    store = ProgramStore(spec.db)
    store.save_experiment(spec.name, spec.model_dump_json())

    def request(tokens: int, answers: int, member: str) -> list[AttemptRecord | ChildRecord]:
        nonlocal made
        made += answers
        return [AttemptRecord("policy_call", "stop", prompt="p", completion="...", completion_tokens=tokens),
                *(_child(made - i, seed_id, member) for i in range(answers))]

    error = AttemptRecord("policy_error", "TimeoutError: no reply")
    scripts = {"one": [("one", [30, 30, None]), ("one", [30, 30, 30])],  # None: a failed request
               "mix": [("one", [20, 20, 20]), ("three", [90])],
               "three": [("three", [60]), ("three", [60])]}
    made = 0
    for arm, script in scripts.items():
        config = spec.cell_config("alpha", arm, 0)
        run_id = store.create_run(name=config.run.name, problem="alpha", policy=arm, seed=0,
                                  config_json=config.model_dump_json(), iterations_target=2, experiment=spec.name)
        (seed_program,) = store.record_iteration(run_id, 0, [_child(3, None, "")])
        seed_id = seed_program.id
        for iteration, (member, requests) in enumerate(script, start=1):
            answers = spec.policy(member).answers
            records = [record for tokens in requests
                       for record in ([error] if tokens is None else request(tokens, answers, member))]
            store.record_iteration(run_id, iteration, records, policy=member)
        store.set_run_status(run_id, "finished")
    results = collect(store, spec, samples=50)
    one, mix, three = (results.budget(arm) for arm in ("one", "mix", "three"))
    assert (one.answers, one.policy_calls, one.policy_errors, one.completion_tokens) == (6, 5, 1, 150)
    assert one.tokens_per_answer == pytest.approx(150 / 6) and one.max_new_tokens == (100,)
    assert (mix.answers, mix.tokens_per_answer, mix.max_new_tokens) == (6, pytest.approx(150 / 6), (100, 50))
    assert (three.answers, three.tokens_per_answer, three.max_new_tokens) == (6, pytest.approx(20.0), (50,))
    console = Console(record=True, width=250)
    render_report(results, console)
    assert "100 / 50" in console.export_text()
    document = study_json("s", {}, [], [], {}, results, {})["evolution"]["tokens"]
    assert document["mix"] == {"answers": 6, "evaluations": mix.evaluations, "completion_tokens": 150,
                               "tokens_per_answer": pytest.approx(25.0), "max_new_tokens": [100, 50],
                               "policy_calls": 4, "policy_errors": 0}


def test_differences_csv_carries_the_interval_width_and_the_holm_adjusted_p_values(results: ExperimentResults,
                                                                                   tmp_path: Path) -> None:
    write_csvs(results, tmp_path)
    rows = {r["metric"]: r for r in csv.DictReader((tmp_path / "differences.csv").open())}
    assert set(rows) == {"cracked_share", "mean_best"}
    for d in results.differences:
        row = rows[d.metric]
        assert float(row["width_95%"]) == pytest.approx(d.mean.width)
        assert float(row["width_95%"]) == pytest.approx(float(row["high_95%"]) - float(row["low_95%"]))
        assert float(row["sign_test_p_holm"]) == pytest.approx(d.sign_p_holm)
        assert float(row["permutation_p_holm"]) == pytest.approx(d.permutation_p_holm)
        assert (row["family"], row["significant"]) == ("2", "False")
        assert float(row["permutation_p_holm"]) >= float(row["permutation_p"])


def test_study_report_gives_tokens_per_answer_of_plain_sampling_and_of_each_evolution_arm(
        results: ExperimentResults) -> None:
    samples = {"A": [ProblemSample("alpha", 1, 0.2, 4, 1, (0.5,) * 12, (False,) * 12, 90),
                     ProblemSample("beta", 2, 0.1, 4, 0, (0.5,) * 12, (False,) * 12, 120)]}
    document = study_json("s", {}, [], [], samples, results, {})
    assert document["sampling"]["A"]["alpha"]["completion_tokens"] == 90
    assert document["sampling"]["A"]["alpha"]["tokens_per_answer"] == pytest.approx(7.5)
    assert document["sampling_tokens"]["A"] == {"problems": 2, "answers": 24, "completion_tokens": 210,
                                                "tokens_per_answer": pytest.approx(8.75)}
    tokens = document["evolution"]["tokens"]
    assert tokens["A"]["tokens_per_answer"] == pytest.approx(40 / 3) and tokens["A"]["max_new_tokens"] == [64]
    assert (tokens["B"]["answers"], tokens["B"]["tokens_per_answer"]) == (54, pytest.approx(10.0))
    assert {policy: arm["evaluations"] for policy, arm in tokens.items()} == \
        {b.policy: b.evaluations for b in results.budgets}
    json.dumps(document)


def test_objectives_reached_per_problem_and_policy(results: ExperimentResults) -> None:
    reach = {(o.problem, o.policy, o.objective): o for o in results.objectives}
    last = reach[("alpha", "B", "test_13")]  # only seed 0 passed every test
    assert (last.threshold, last.seeds, last.reached, last.best) == (1.0, 3, 1, 1.0)
    assert reach[("alpha", "B", "test_06")].reached == 3 and reach[("beta", "B", "test_03")].reached == 1


def test_paired_differences_over_the_problems_both_policies_ran(results: ExperimentResults) -> None:
    cracked = next(d for d in results.differences if d.metric == "cracked_share")
    assert (cracked.policy_a, cracked.policy_b, cracked.problems) == ("A", "B", ("alpha", "beta", "gone"))
    assert cracked.per_problem == pytest.approx((1 - 1 / 3, 2 / 3 - 0, 1 / 3 - 0))
    assert (cracked.wins, cracked.losses, cracked.ties) == (3, 0, 0) and cracked.permutation_exact
    assert cracked.permutation_p == pytest.approx(2 / 8) and cracked.sign_p == pytest.approx(2 / 8)
    assert cracked.mean.n == 3 and cracked.mean.low < np.mean(cracked.per_problem) < cracked.mean.high
    assert cracked.mean.width == pytest.approx(cracked.mean.high - cracked.mean.low)


def test_paired_differences_are_holm_adjusted_over_every_comparison_of_the_report(
        results: ExperimentResults) -> None:
    cracked, best = (next(d for d in results.differences if d.metric == metric)
                     for metric in ("cracked_share", "mean_best"))
    assert (cracked.family, best.family) == (2, 2)  # one pair of policies, two metrics
    raw = [cracked.permutation_p, best.permutation_p]
    assert [cracked.permutation_p_holm, best.permutation_p_holm] == pytest.approx(list(holm(raw)))
    assert [cracked.sign_p_holm, best.sign_p_holm] == pytest.approx(list(holm([cracked.sign_p, best.sign_p])))
    assert cracked.permutation_p_holm >= cracked.permutation_p and cracked.alpha == pytest.approx(0.05)
    assert not cracked.significant  # 3 problems: 2 / 8 at best, never significant
    document = study_json("s", {}, [], [], {}, results, {})["evolution"]
    row = next(d for d in document["differences"] if d["metric"] == "cracked_share")
    assert row["mean"]["width"] == pytest.approx(cracked.mean.width)
    assert row["permutation_p_holm"] == pytest.approx(cracked.permutation_p_holm) and row["family"] == 2
    assert "Holm" in document["differences_method"] and "betting" in document["differences_method"]
    json.dumps(document)  # the study writes it as JSON


def test_files_and_terminal_carry_every_number(results: ExperimentResults, tmp_path: Path) -> None:
    written = write_csvs(results, tmp_path)
    assert {p.name for p in written} == {"table.csv", "cells.csv", "curves.csv", "objectives.csv", "budgets.csv",
                                         "differences.csv"}
    curves = list(csv.DictReader((tmp_path / "curves.csv").open()))
    assert {row["axis"] for row in curves} == {"iterations", "answers", "evaluations", "tokens", "wall_s"}
    table = {(r["problem"], r["policy"]): r for r in csv.DictReader((tmp_path / "table.csv").open())}
    assert table[("beta", "A")]["median_first_iteration_km"] == "4.0" and table[("beta", "A")]["seeds_censored"] == "1"
    write_json(results, tmp_path / "report.json")
    data = json.loads((tmp_path / "report.json").read_text())
    assert len(data["differences"]) == 2 and data["budgets"][0]["evaluations"] == 162
    console = Console(record=True, width=200)
    render_report(results, console)
    text = console.export_text()
    assert "1/3 cracked [0.01, 0.91]" in text and "median first crack > 6 (KM, 2 censored)" in text
    assert "median first crack it 4 (KM, 1 censored)" in text and "162 (3.0/it)" in text
    assert "A - B" in text and "gone: the problem folder does not load now" in text
    cracked = next(d for d in results.differences if d.metric == "cracked_share")
    assert f"{cracked.mean.width:.3f}" in text and f"{cracked.sign_p:.3g} ({cracked.sign_p_holm:.3g})" in text
    assert "betting" in text and "Holm" in text


def test_report_command_rejects_a_bad_score_range_in_one_line(tmp_path: Path, capsys) -> None:
    experiment_file = tmp_path / "x.toml"
    experiment_file.write_text('problems = ["fizzbuzz"]\niterations = 1\n[[policies]]\nname = "p"\n')
    assert main(["report", str(experiment_file), "--score-range", "1,0"]) == 2
    assert "--score-range '1,0': LOW must be below HIGH" in capsys.readouterr().out


def test_a_report_of_some_arms_holds_their_rows_and_their_comparisons_alone(
        experiment: tuple[ProgramStore, ExperimentSpec, Path], results: ExperimentResults) -> None:
    from evolve.config import ConfigError
    from evolve.report.design import only_arms

    store, spec, _ = experiment
    reversed_arms = collect(store, only_arms(spec, ["B", "A"]), pairs="first")
    assert reversed_arms.policies == ("B", "A")
    assert {(d.policy_a, d.policy_b, d.family) for d in reversed_arms.differences} == {("B", "A", 2)}
    whole = {d.metric: d for d in results.differences}
    for difference in reversed_arms.differences:  # B - A is -(A - B), with the same tests
        assert difference.mean.estimate == pytest.approx(-whole[difference.metric].mean.estimate)
        assert difference.permutation_p == pytest.approx(whole[difference.metric].permutation_p)
    alone = collect(store, only_arms(spec, ["A"]))
    assert {row.policy for row in alone.table} == {"A"} and not alone.differences
    assert [row for row in alone.table] == [row for row in results.table if row.policy == "A"]
    assert alone.answers_per_iteration == results.answers_per_iteration == 3
    assert only_arms(spec, ["B"]).answers_per_iteration_of_cells() == 3  # as B's cells ran beside A (3 answers)
    with pytest.raises(ConfigError, match="not among them: C"):
        only_arms(spec, ["A", "C"])
