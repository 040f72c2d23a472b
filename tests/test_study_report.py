"""The study report's arms: each algorithm's checkpoints (ALGO-tSEED, one per training seed) grouped under their arm,
its crack share pooled and per training seed with their spread, and the paired differences between arms (training
seeds pooled per test problem, Holm-adjusted over every pair of arms), in study_report.json, on the page and in the
terminal; results.md from study_report.json, and scripts/study/readme_results.py putting it into a README.

A study-like experiment written through the real store API and judged by real problem folders (`evolve
new-problem`, 14 tests, solved when all pass): policies base, vpo-t0, vpo-t1, grpo-t0, grpo-t1 on six test problems
x two evolution seeds, two iterations. Cracked cells per (policy, problem), out of 2:
  base     p0 1                                    -> share 1/12
  vpo-t0   every problem 2                          -> share 1
  vpo-t1   p0, p1, p2: 1 each                       -> share 1/4
  grpo-t0  p0 1                                     -> share 1/12
  grpo-t1  p1 1; never ran p5                       -> share 1/10 over its 5 problems
Pooled per problem: vpo 3/4 on p0-p2 and 2/4 on p3-p5 (share 0.625); grpo 1/4 on p0 and p1, 0/4 on p2-p4, 0/2 on p5.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from evolve.engine.experiment_spec import ExperimentSpec
from evolve.problems.check import new_problem
from evolve.report.html import report_html
from evolve.report.results import ExperimentResults, collect
from evolve.report.stats import clopper_pearson, holm, mean_interval, paired_difference
from evolve.report.study_arms import arm_report, arms_section_html, claim_text, render_arms
from evolve.report.study_markdown import results_markdown
from evolve.report.study_report import (
    cracked_by_policy,
    study_json,
    training_curves,
    training_section_html,
    with_training_section,
)
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

TESTS = 14
ITERATIONS = 2
SEEDS = (0, 1)
PROBLEMS = tuple(f"p{i}" for i in range(6))
POLICIES = ("base", "vpo-t0", "vpo-t1", "grpo-t0", "grpo-t1")
TRAINING_RUNS = [{"policy": f"{algo}-t{seed}", "algo": algo, "training_seed": seed}
                 for algo in ("vpo", "grpo") for seed in (0, 1)]
FACTS = {"claim": "methods", "training_seeds": [0, 1], "training_runs": TRAINING_RUNS}
# (policy, problem) -> the evolution seeds that crack it
CRACKS: dict[tuple[str, str], tuple[int, ...]] = {
    ("base", "p0"): (0,), **{("vpo-t0", p): SEEDS for p in PROBLEMS},
    ("vpo-t1", "p0"): (1,), ("vpo-t1", "p1"): (0,), ("vpo-t1", "p2"): (1,),
    ("grpo-t0", "p0"): (0,), ("grpo-t1", "p1"): (1,)}
NEVER_RAN = {("grpo-t1", "p5")}
VPO = np.array([0.75, 0.75, 0.75, 0.5, 0.5, 0.5])  # pooled per-problem shares
GRPO = np.array([0.25, 0.25, 0.0, 0.0, 0.0, 0.0])
BASE = np.array([0.5, 0.0, 0.0, 0.0, 0.0, 0.0])


def _child(passed: int, parent_id: int | None, policy: str) -> ChildRecord:
    return ChildRecord(code=f"x = {passed}\n", parent_id=parent_id, island=0, policy=policy, edit="...",
                       scores={f"test_{i:02d}": float(i < passed) for i in range(TESTS)}, scalar=passed / TESTS,
                       solved=passed >= TESTS)


def _write_cell(store: ProgramStore, spec: ExperimentSpec, problem: str, policy: str, seed: int,
                cracks: bool | None = None, stop_at: int = ITERATIONS) -> None:
    """A finished cell of ITERATIONS iterations, one answer each; one that cracks does so at iteration `stop_at` and,
    when that is before the last, stops there (stop_when_solved)."""
    config = spec.cell_config(problem, policy, seed)
    run_id = store.create_run(name=config.run.name, problem=problem, policy=policy, seed=seed,
                              config_json=config.model_dump_json(), iterations_target=ITERATIONS,
                              experiment=spec.name)
    (seed_program,) = store.record_iteration(run_id, 0, [_child(3, None, "")], run_elapsed_s=0.1)
    cracks = seed in CRACKS.get((policy, problem), ()) if cracks is None else cracks
    for iteration in range(1, (stop_at if cracks else ITERATIONS) + 1):
        call = AttemptRecord("policy_call", "stop", prompt="improve it", completion="...", latency_s=0.1,
                             prompt_tokens=50, completion_tokens=20)
        passed = TESTS if cracks and iteration == stop_at else 4
        store.record_iteration(run_id, iteration, [call, _child(passed, seed_program.id, policy)], policy=policy,
                               run_elapsed_s=0.1 + iteration)
    store.set_run_status(run_id, "finished")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> ExperimentResults:
    root = tmp_path_factory.mktemp("study_report")
    programs = root / "programs"
    for name in PROBLEMS:
        new_problem(name, programs)
    spec = ExperimentSpec.model_validate({
        "name": "study", "db": str(root / "study.db"), "problems": list(PROBLEMS), "seeds": list(SEEDS),
        "iterations": ITERATIONS, "run": {"programs_dir": str(programs)},
        "policies": [{"name": name} for name in POLICIES]})
    store = ProgramStore(spec.db)
    store.save_experiment(spec.name, spec.model_dump_json())
    for problem in PROBLEMS:
        for policy in POLICIES:
            if (policy, problem) not in NEVER_RAN:
                for seed in SEEDS:
                    _write_cell(store, spec, problem, policy, seed)
    return collect(store, spec)


@pytest.fixture(scope="module")
def document(results: ExperimentResults) -> dict:
    return json.loads(json.dumps(study_json("study", FACTS, [], [], {}, results, {})))  # as the study writes it


def test_each_arm_pools_its_checkpoints_cells_and_gives_each_training_seeds_share_and_their_spread(
        document: dict) -> None:
    arms = document["arms"]
    assert list(arms) == ["base", "vpo", "grpo"] and document["claim"] == "methods"
    vpo = arms["vpo"]
    assert vpo["trained"] and vpo["policies"] == ["vpo-t0", "vpo-t1"]
    pooled = vpo["pooled"]
    assert pooled["crack_share"] == pytest.approx(0.625) and (pooled["cracked_cells"], pooled["cells"]) == (15, 24)
    assert pooled["per_problem"]["p0"] == {"cracked_cells": 3, "cells": 4}
    betting = mean_interval(VPO)  # the mean over the 6 problems of the pooled shares
    assert (pooled["interval"]["low"], pooled["interval"]["high"], pooled["interval"]["n"]) == \
        (pytest.approx(betting.low), pytest.approx(betting.high), 6)
    assert pooled["interval"]["low"] < 0.625 < pooled["interval"]["high"]
    assert (pooled["cells_interval"]["low"], pooled["cells_interval"]["high"]) == \
        pytest.approx(clopper_pearson(15, 24)) and pooled["cells_interval"]["n"] == 24
    first, second = vpo["per_training_seed"]["0"], vpo["per_training_seed"]["1"]
    assert (first["policy"], first["training_seed"], first["crack_share"], first["cells"]) == ("vpo-t0", 0, 1.0, 12)
    assert (second["policy"], second["crack_share"], second["cracked_cells"]) == ("vpo-t1", 0.25, 3)
    assert second["interval"]["n"] == 6 and second["interval"]["low"] < 0.25 < second["interval"]["high"]
    assert vpo["spread"] == {"training_seeds": 2, "min": 0.25, "max": 1.0, "range": 0.75, "mean": 0.625,
                             "sd": pytest.approx(0.75 / 2 ** 0.5)}
    grpo = arms["grpo"]  # grpo-t1 never ran p5: the pooled p5 rests on grpo-t0's 2 cells
    assert grpo["pooled"]["per_problem"]["p5"] == {"cracked_cells": 0, "cells": 2}
    assert grpo["pooled"]["crack_share"] == pytest.approx(1 / 12) and grpo["pooled"]["cells"] == 22
    assert grpo["per_training_seed"]["1"]["problems"] == 5
    assert grpo["per_training_seed"]["1"]["crack_share"] == pytest.approx(0.1)
    base = arms["base"]
    assert not base["trained"] and base["per_training_seed"] == {} and base["spread"] is None
    assert base["pooled"]["crack_share"] == pytest.approx(1 / 12) and "betting" in document["arms_method"]


def test_without_training_runs_policies_named_algo_tseed_are_grouped_under_their_arm(
        results: ExperimentResults) -> None:
    document = study_json("study", {}, [], [], {}, results, {})
    assert {arm: value["policies"] for arm, value in document["arms"].items()} == {
        "base": ["base"], "vpo": ["vpo-t0", "vpo-t1"], "grpo": ["grpo-t0", "grpo-t1"]}
    assert document["claim"] == "methods"  # every algorithm has 2 checkpoints
    assert document["arms"]["vpo"]["spread"]["range"] == 0.75


def test_arm_differences_pool_training_seeds_per_problem_and_are_holm_adjusted_over_every_pair_of_arms(
        document: dict) -> None:
    differences = {(d["policy_a"], d["policy_b"]): d for d in document["arm_differences"]}
    assert list(differences) == [("base", "vpo"), ("base", "grpo"), ("vpo", "grpo")]
    primary = differences[("vpo", "grpo")]  # the pre-registered endpoint: VPO vs GRPO
    assert primary["metric"] == "pooled_cracked_share" and primary["problems"] == list(PROBLEMS)
    assert primary["per_problem"] == pytest.approx(list(VPO - GRPO))
    expected = paired_difference("pooled_cracked_share", "vpo", "grpo", PROBLEMS, VPO, GRPO)
    assert primary["mean"]["estimate"] == pytest.approx(np.mean(VPO - GRPO))
    assert (primary["mean"]["low"], primary["mean"]["high"]) == pytest.approx((expected.mean.low, expected.mean.high))
    assert primary["mean"]["low"] < primary["mean"]["estimate"] < primary["mean"]["high"] and \
        primary["mean"]["n"] == 6  # 6 problems in [-1, 1]: wide even with vpo ahead on every one
    assert (primary["wins"], primary["losses"], primary["ties"]) == (6, 0, 0)
    assert primary["permutation_p"] == pytest.approx(2 / 2 ** 6) and primary["permutation_exact"]
    assert primary["sign_p"] == pytest.approx(2 / 2 ** 6)
    raw = [differences[pair]["permutation_p"] for pair in differences]
    assert raw == pytest.approx([2 / 64, 1.0, 2 / 64])  # base - grpo: +0.25 on p0, -0.25 on p1, ties elsewhere
    assert [differences[pair]["permutation_p_holm"] for pair in differences] == pytest.approx(list(holm(raw)))
    assert primary["permutation_p_holm"] == pytest.approx(3 / 32) and primary["family"] == 3
    assert not primary["significant"]  # 6 problems and 3 pairs: 3/32 > 0.05
    assert differences[("base", "vpo")]["per_problem"] == pytest.approx(list(BASE - VPO))
    assert "Holm" in document["arm_differences_method"] and "pooled" in document["arm_differences_method"]
    # the per-checkpoint differences stay: every pair of the 5 policies, both metrics
    assert {d["family"] for d in document["evolution"]["differences"]} == {20}


def test_the_page_states_the_claim_and_shows_the_arm_table_and_the_arm_differences(
        results: ExperimentResults) -> None:
    section = arms_section_html(arm_report(results, TRAINING_RUNS, "methods", [0, 1]))
    page = with_training_section("<main><h1>x</h1><footer>f</footer></main>", section)
    assert page.index('id="arms"') < page.index("<footer>")
    assert 'data-claim="methods"' in section and "Claim: methods. Each algorithm was trained from 2 training " \
        "seeds (0, 1)" in section
    vpo = section[section.index('<tr data-arm="vpo">'):]
    vpo = vpo[:vpo.index("</tr>")]
    betting = mean_interval(VPO)
    assert f"0.625 [{betting.low:.3f}, {betting.high:.3f}] n=6 problems" in vpo
    low, high = clopper_pearson(15, 24)
    assert f"15/24 cells [{low:.3f}, {high:.3f}]" in vpo
    assert '<span data-training-seed="0">vpo-t0: 1.000 [' in vpo and '<span data-training-seed="1">vpo-t1: 0.250 [' \
        in vpo
    assert "0.250 - 1.000 (range 0.750), sd 0.530, 2 training seeds" in vpo
    assert '<tr data-arm="base"><th>base</th>' in section and "untrained" in section
    assert '<td class="num" data-arm="grpo">0/2' in section  # p5: grpo-t0's cells only
    primary = section[section.index('data-a="vpo" data-b="grpo"'):]
    primary = primary[:primary.index("</tr>")]
    assert "+0.542" in primary and "(Holm 0.0938)" in primary and "checkpoints pooled" in primary
    assert "Holm-adjusted over the 3 pairs of arms" in section


def test_the_terminal_shows_the_claim_the_arm_table_and_the_arm_differences(results: ExperimentResults) -> None:
    console = Console(record=True, width=260)
    render_arms(arm_report(results, TRAINING_RUNS, "methods", [0, 1]), console)
    text = console.export_text()
    assert "Claim: methods." in text and "spread between training seeds" in text
    assert "0.625 [" in text and "15/24 cells" in text and "vpo-t1: 0.250 [" in text
    assert "0.250 - 1.000 (range 0.750), sd 0.530" in text
    assert "vpo - grpo" in text and "+0.542 [" in text and "0.0312 (0.0938)" in text
    assert "over the 3 pairs of arms" in text


def test_registered_comparisons_are_holm_adjusted_alone_and_the_other_pairs_shown_apart_as_exploratory(
        results: ExperimentResults) -> None:
    report = arm_report(results, TRAINING_RUNS, "methods", [0, 1], comparisons=[("vpo", "grpo"), ("vpo", "base")])
    assert report.registered
    assert [(d.policy_a, d.policy_b) for d in report.differences] == [("vpo", "grpo"), ("vpo", "base")]
    primary, second = report.differences
    assert primary.permutation_p == pytest.approx(2 / 64) and primary.family == 2
    raw = [primary.permutation_p, second.permutation_p]
    assert [primary.permutation_p_holm, second.permutation_p_holm] == pytest.approx(list(holm(raw)))
    assert primary.permutation_p_holm == pytest.approx(2 / 32)  # a family of 2, not the 3 pairs of arms
    assert second.per_problem == pytest.approx(list(VPO - BASE))  # in the direction registered
    (other,) = report.exploratory
    assert (other.policy_a, other.policy_b, other.family) == ("base", "grpo", 1)
    section = arms_section_html(report)
    assert "Holm-adjusted over the 2 registered comparisons" in section
    assert "Other pairs of arms (exploratory, not registered)" in section
    assert section.index("registered comparisons") < section.index('data-a="base" data-b="grpo"')
    console = Console(record=True, width=260)
    render_arms(report, console)
    text = console.export_text()
    assert "over the 2 registered comparisons" in text and "exploratory" in text
    document = study_json("study", FACTS | {"spec": {"comparisons": [["vpo", "grpo"], ["vpo", "base"]]}}, [], [], {},
                          results, {})
    assert document["arm_differences_registered"] and len(document["arm_differences"]) == 2
    assert [(d["policy_a"], d["policy_b"]) for d in document["arm_differences_exploratory"]] == [("base", "grpo")]
    text = results_markdown(document)
    assert "Holm-adjusted over the 2 registered comparisons" in text
    assert "### Other pairs of arms (exploratory, not registered)" in text


def test_a_registered_pair_with_no_common_problem_is_named_in_a_note_and_the_split_design_in_the_claim(
        results: ExperimentResults) -> None:
    runs = [*TRAINING_RUNS, {"policy": "multi-rlvr-t0", "algo": "multi-rlvr", "training_seed": 0}]
    report = arm_report(results, runs, "methods", [0, 1], comparisons=[("vpo", "grpo"), ("multi-rlvr", "grpo")],
                        split=True)
    assert [(d.policy_a, d.policy_b, d.family) for d in report.differences] == [("vpo", "grpo", 2)]
    assert any("not tested; each still counts in the Holm family of 2 with p = 1 (a registered family does not "
               "shrink): multi-rlvr - grpo" in note for note in report.notes)
    (tested,) = report.differences  # adjusted as one of 2: Holm's smallest multiplier is 2
    assert tested.permutation_p_holm == pytest.approx(min(1.0, 2 * tested.permutation_p))
    assert "each checkpoint was evolved on every test problem with its share of the evolution seeds" in \
        claim_text(report)
    assert "every checkpoint was evolved on every test problem x evolution seed" in claim_text(
        arm_report(results, TRAINING_RUNS, "methods", [0, 1]))


def test_one_training_seed_is_a_claim_about_checkpoints_and_an_arm_not_yet_evolved_gets_a_note(
        results: ExperimentResults) -> None:
    single = arm_report(results, TRAINING_RUNS, "checkpoints", [0])
    assert single.claim == "checkpoints" and "compares these checkpoints, not the training methods" in \
        arms_section_html(single)
    runs = [*TRAINING_RUNS, {"policy": "multi-rlvr-t0", "algo": "multi-rlvr", "training_seed": 0}]
    report = arm_report(results, runs, "methods", [0, 1])
    pending = report.arm("multi-rlvr")
    assert pending.pooled.crack_share is None and pending.pooled.cells == 0 and pending.spread is None
    assert any(note.startswith("multi-rlvr: 0 training seeds with cells run") for note in report.notes)
    assert all(d.policy_a != "multi-rlvr" and d.policy_b != "multi-rlvr" for d in report.differences)


def test_the_training_section_names_each_algorithms_training_seeds_instead_of_one_run_per_algorithm() -> None:
    records = [{"step": 1, "reward": 0.2, "kl": 0.0, "diversity": 1.0, "entropy": 1.5, "scored_answers": 1.0,
                "tokens": 90, "seconds": 3.0}]
    curves = [training_curves(name, records, {}) for name in ("vpo-t0", "vpo-t1", "grpo-t0")]
    section = training_section_html(curves, [])
    assert "one run per algorithm" not in section
    assert "vpo: 2 training seeds (vpo-t0, vpo-t1); grpo: 1 training seed (grpo-t0)" in section
    assert "spread between training seeds" in section


def test_results_markdown_gives_the_arms_the_pairs_each_problem_and_only_the_figures_that_exist(
        document: dict) -> None:
    text = results_markdown(document, figures="studies/s/report/figures", present=["cracked_share-iterations.svg"])
    lines = text.splitlines()
    vpo = next(line for line in lines if line.startswith("| `vpo` |"))
    cells = [cell.strip() for cell in vpo.strip("|").split("|")]
    assert cells[1:4] == ["0.625", cells[2], "15/24"] and cells[5] == "6/6"
    assert cells[6] == "t0: 1.000; t1: 0.250" and cells[7] == "0.750"
    low, high = (float(x) for x in cells[2].strip("[]").split(", "))
    assert low < 0.625 < high
    pair = next(d for d in document["arm_differences"] if {d["policy_a"], d["policy_b"]} == {"vpo", "grpo"})
    row = next(line for line in lines if f"`{pair['policy_a']}` − `{pair['policy_b']}`" in line)
    assert f"{pair['wins']}/{pair['losses']}/{pair['ties']}" in row and f"{pair['mean']['width']:.3f}" in row
    assert "Holm-adjusted over the 3 pairs" in text
    p5 = next(line for line in lines if line.startswith("| p5 |"))
    assert "0/2 [0.00, 0.84]" in p5 and p5.count("|") == len(POLICIES) + 2  # grpo-t1 ran p5 with no cell
    assert "![Share of test problems cracked" in text and "(studies/s/report/figures/cracked_share-iterations.svg)" in text
    assert "training-reward.svg" not in text  # not written, so not linked


def test_results_markdown_budget_shows_the_programs_evaluated_beside_the_answers_asked_for() -> None:
    arm = {"completion_tokens": 900, "tokens_per_answer": 30.0, "max_new_tokens": [384]}
    document = {"evolution": {"tokens": {"vpo": arm | {"answers": 30, "evaluations": 12},
                                         "grpo": arm | {"answers": 30, "evaluations": 27},
                                         "old": arm | {"answers": 30}}}}  # a report written before evaluations
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.strip("|").split("|")]
            for line in results_markdown(document).splitlines() if line.startswith("| `")}
    assert rows["`vpo`"][1:3] == ["30", "12 (40%)"] and rows["`grpo`"][2] == "27 (90%)"
    assert rows["`old`"][2] == "–"


def test_results_markdown_sampling_table_says_a_checkpoint_without_evolution_cells_has_none_yet() -> None:
    """An interim report holds checkpoints whose seeds have not run: their problems are "not run", not "0 cracked"."""
    sampled = {"p0": {"n": 30, "c": 1, "pass@1": 0.1}, "p1": {"n": 30, "c": 0, "pass@1": 0.0}}
    cracked = {"vpo-t0": {"problems_cracked": 1, "problems": 2,
                          "per_problem": {"p0": {"cracked_seeds": 1, "seeds_run": 1, "interval": {"low": 0.0, "high": 1.0}},
                                          "p1": {"cracked_seeds": 0, "seeds_run": 1, "interval": {"low": 0.0, "high": 1.0}}}},
               "vpo-t1": {"problems_cracked": 0, "problems": 2,
                          "per_problem": {"p0": {"cracked_seeds": 0, "seeds_run": 0, "interval": None},
                                          "p1": {"cracked_seeds": 0, "seeds_run": 0, "interval": None}}}}
    document = {"sampling": {"vpo-t0": sampled, "vpo-t1": sampled}, "evolution": {"cracked": cracked}}
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.strip("|").split("|")]
            for line in results_markdown(document).splitlines() if line.startswith("| `")}
    assert rows["`vpo-t0`"][1:] == ["30", "0.050", "1/2", "1/2"]
    assert rows["`vpo-t1`"][4] == "– (no cell run yet)"


def _split_study(tmp_path: Path) -> tuple[ExperimentSpec, ProgramStore]:
    """A study-like experiment on p0 and p1, seeds 0-2 run seed by seed, an algorithm's checkpoints splitting its
    seeds (vpo-t0 and grpo-t0: 0 and 2; vpo-t1 and grpo-t1: 1; the base every seed), and its empty store."""
    programs = tmp_path / "programs"
    for name in ("p0", "p1"):
        new_problem(name, programs)
    split = {"vpo-t0": [0, 2], "vpo-t1": [1], "grpo-t0": [0, 2], "grpo-t1": [1]}
    spec = ExperimentSpec.model_validate({
        "name": "study", "db": str(tmp_path / "study.db"), "problems": ["p0", "p1"], "seeds": [0, 1, 2],
        "iterations": ITERATIONS, "run": {"programs_dir": str(programs)}, "arm_seeds": split, "order": "seeds",
        "policies": [{"name": name} for name in POLICIES]})
    store = ProgramStore(spec.db)
    store.save_experiment(spec.name, spec.model_dump_json())
    return spec, store


def test_checkpoints_sharing_their_algorithms_seeds_give_every_arm_one_cell_per_problem_and_seed(
        tmp_path) -> None:
    """[evolution] checkpoint_seeds = "split": vpo-t0 and grpo-t0 evolve seeds 0 and 2, vpo-t1 and grpo-t1 seed 1;
    the base every seed. vpo cracks p0 in all three of its cells, grpo nothing, the base p1 once."""
    spec, store = _split_study(tmp_path)
    for problem, policy, seed in spec.cells():
        cracked = (policy.startswith("vpo") and problem == "p0") or (policy, problem, seed) == ("base", "p1", 1)
        _write_cell(store, spec, problem, policy, seed, cracks=cracked)
    results = collect(store, spec)
    assert len(spec.cells()) == 2 * 3 * 3  # base, vpo and grpo: 2 problems x 3 seeds each
    assert all(row.state == "ok" and row.seeds_planned == row.seeds_run == len(spec.seeds_of(row.policy))
               for row in results.table)  # a seed an arm does not run is no cell "not run"
    assert results.row("p0", "vpo-t0").cracked == 2 and results.row("p0", "vpo-t1").cracked == 1
    report = arm_report(results, TRAINING_RUNS, "methods", (0, 1))
    vpo, base = report.arm("vpo").pooled, report.arm("base").pooled
    assert vpo.per_problem == {"p0": {"cracked_cells": 3, "cells": 3}, "p1": {"cracked_cells": 0, "cells": 3}}
    assert base.per_problem["p1"] == {"cracked_cells": 1, "cells": 3} and vpo.crack_share == 0.5
    primary = next(d for d in report.differences if (d.policy_a, d.policy_b) == ("vpo", "grpo"))
    assert list(primary.per_problem) == [1.0, 0.0]
    assert "only some seeds: vpo-t0 0, 2; vpo-t1 1; grpo-t0 0, 2; grpo-t1 1" in report_html(results)
    assert len([curve for curve in results.curves if curve.policy == "vpo-t1"]) > 0  # its one seed is complete


def test_a_checkpoint_whose_cells_have_not_started_counts_no_problems_in_the_cracked_summary(
        tmp_path: Path) -> None:
    """Seed 0 whole for every arm, nothing else run: vpo-t1 and grpo-t1 (seed 1 only) have 0 problems of 0, the
    others their 2."""
    from evolve.report.cell_status import cell_statuses, whole_parts

    spec, store = _split_study(tmp_path)
    for problem, policy, seed in spec.cells():
        if seed == 0:
            _write_cell(store, spec, problem, policy, seed, cracks=policy.startswith("vpo") and problem == "p0")
    summary = cracked_by_policy(collect(store, spec, parts=whole_parts(spec, cell_statuses(store, spec))))
    assert {policy: (row["problems_cracked"], row["problems"]) for policy, row in summary.items()} == {
        "base": (0, 2), "vpo-t0": (1, 2), "vpo-t1": (0, 0), "grpo-t0": (0, 2), "grpo-t1": (0, 0)}


# ---- scripts/study/readme_results.py: the results between README's markers

README_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "study" / "readme_results.py"


def test_the_results_replace_only_the_text_between_the_markers_with_figures_linked_from_the_readme(
        tmp_path: Path, document: dict) -> None:
    report = tmp_path / "studies" / "s" / "report"
    (report / "figures").mkdir(parents=True)
    (report / "study_report.json").write_text(json.dumps(document))
    (report / "figures" / "cracked_share-iterations.svg").write_text("<svg/>")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Results\n\nHardware: ours.\n<!-- results:start -->\nold\n<!-- results:end -->\nafter\n")
    done = subprocess.run([sys.executable, str(README_SCRIPT), "studies/s/report"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    text = readme.read_text()
    before, inside = text.split("<!-- results:start -->")
    inside, after = inside.split("<!-- results:end -->")
    assert before.endswith("Hardware: ours.\n") and after == "\nafter\n" and "old" not in inside
    assert "### Arms" in inside and "| `vpo` | 0.625 |" in inside
    assert "(studies/s/report/figures/cracked_share-iterations.svg)" in inside
    assert "training-reward.svg" not in inside  # no such file: not linked
    assert "### Cracked per problem" not in inside and "### Wall time" not in inside  # the README's shorter form
    assert "[the whole results](studies/s/report/results.md)" in inside
    assert "### Cracked per problem" in results_markdown(document)  # results.md keeps them


def test_a_readme_without_the_markers_is_refused_and_left_as_it_was(tmp_path: Path, document: dict) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "study_report.json").write_text(json.dumps(document))
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    done = subprocess.run([sys.executable, str(README_SCRIPT), "report", "--readme", str(readme)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "no <!-- results:start --> ... <!-- results:end --> pair" in done.stderr
    assert readme.read_text() == "# x\n"
