"""The study's last stage: the experiment report of its evolution, the arms (each algorithm pooled over its
training seeds, with their spread), the training curves and the plain samples, as STUDY/report/ (report.html,
study_report.json, results.md, the CSVs and figures/, every chart as a standalone SVG)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from evolve.study.config import SAMPLING_ARM, StudySpec
from evolve.study.evolution_stage import evolution_stores
from evolve.study.plan import StudyPaths, experiment_spec, sampling_plans


def write_study_report(spec: StudySpec, paths: StudyPaths, store: Any, train_configs: dict[str, Any],
                       seconds: dict[str, float], console: Console, interim: bool = False) -> Path:
    """Write STUDY/report/ from the study's store (a ProgramStore), its training logs (train_configs: TrainConfig
    by policy name) and the seconds spent per stage; print the report on `console`; the path of
    study_report.json. `interim`: the study is under way; only the (piece, seed) parts every arm has finished count."""
    from evolve.problems.problem import load_problem
    from evolve.report.arm_curves import arm_curves, arm_curves_html
    from evolve.report.cell_status import cell_statuses_in, whole_parts
    from evolve.report.figures import FIGURES_DIR
    from evolve.report.html import report_html
    from evolve.report.report_files import write_report
    from evolve.report.results import collect
    from evolve.report.reward_change import reward_change
    from evolve.report.sampling_curves import diversity, k_curves, sampling_section_html
    from evolve.report.study_arms import arm_report, arms_section_html, render_arms
    from evolve.report.study_markdown import redone_lines, results_markdown
    from evolve.report.study_report import (
        read_training_log,
        study_json,
        training_curves,
        training_section_html,
        with_training_section,
    )
    from evolve.report.terminal import render_report
    from evolve.store.program_store import ProgramStore

    experiment = experiment_spec(spec, paths)
    study_store = ProgramStore(paths.db, mode="read") if experiment.pieces == 1 else None  # else the pieces' own
    with evolution_stores(experiment, study_store) as stores:
        parts = whole_parts(experiment, cell_statuses_in(stores, experiment),
                            whole_pieces=spec.evolution.checkpoint_seeds == "split") if interim else None
        results = collect(stores, experiment, parts=parts)
    if study_store is not None:
        study_store.close()
    redone = redone_cells(paths)
    results = replace(results, notes=(*results.notes, *redone_lines(redone)))  # the page's notes name them too
    render_report(results, console)
    problems = [load_problem(name, Path(spec.programs_dir)) for name in spec.training.problems]
    objectives = {problem.name: problem.objectives for problem in problems}
    logs = {name: read_training_log(Path(config.out) / "train_log.jsonl") for name, config in train_configs.items()}
    curves = [training_curves(name, records, objectives) for name, records in logs.items()]
    changes = [reward_change(name, records) for name, records in logs.items()]
    budgets = [asdict(b) | {"answers_per_step": b.answers_per_step, "total_answers": b.total_answers,
                            "total_completions": b.total_completions} for b in spec.budgets()]
    facts = {"description": spec.description, "base": spec.base, "folder": str(paths.folder),
             "db": paths.db, "train_problems": list(spec.training.problems),
             "test_problems": list(spec.test_problems), "claim": spec.claim,
             "training_seeds": list(spec.training.seeds),
             "training_runs": [{"policy": run.name, "algo": run.algo, "training_seed": run.seed}
                               for run in spec.training_runs()],
             "spec": spec.model_dump(mode="json"),
             "interim": _interim(results, parts, experiment.pieces) if parts is not None else None,
             "redone": redone}
    arms = arm_report(results, facts["training_runs"], spec.claim, spec.training.seeds,
                      comparisons=spec.comparisons, split=spec.evolution.checkpoint_seeds == "split")
    render_arms(arms, console)
    arm_names = [arm.arm for arm in arms.arms]
    by_arm = arm_curves(results, {policy: arm.arm for arm in arms.arms for policy in arm.policies})
    samples = sampled_results(spec, paths, store)
    sampling = sampling_section_html(k_curves(samples, results.confidence, results.score_range), diversity(samples),
                                     results.confidence)
    page = with_training_section(report_html(results, kind="Study"),
                                 arms_section_html(arms) + arm_curves_html(by_arm, arm_names, results.confidence,
                                                                 SAMPLING_ARM if spec.evolution.sampling_arm else None)
                                 + sampling + training_section_html(curves, budgets, changes))
    files = write_report(results, paths.report, page=page)
    figures = sorted((paths.report / FIGURES_DIR).glob("*.svg"))
    document = study_json(spec.name, facts, budgets, curves, samples, results, seconds, arms=arms, changes=changes)
    document["arm_curves"] = [asdict(curve) for curve in by_arm]
    path = paths.report / "study_report.json"
    path.write_text(json.dumps(document, indent=1) + "\n")
    markdown = paths.report / "results.md"
    markdown.write_text(results_markdown(json.loads(path.read_text()), present=[f.name for f in figures]))
    console.print("wrote " + ", ".join(str(file) for file in (*files[:-1], path, markdown))
                  + f" and {len(figures)} charts in {files[-1]}", highlight=False)
    return path


def _interim(results: Any, parts: tuple[tuple[int, int], ...], pieces: int) -> dict[str, Any]:
    """results: ExperimentResults of the whole (piece, seed) parts only."""
    counted = [cell for cell in results.cells if cell.status == "finished"]
    return {"seeds": sorted({cell.seed for cell in counted}), "parts": [list(part) for part in parts],
            "pieces": pieces, "cells_counted": len(counted), "cells": len(results.cells)}


def redone_cells(paths: StudyPaths) -> list[dict[str, Any]]:
    """The evolution cells run again (`evolve study --redo`), as the study's state file records them."""
    from evolve.study.state import StudyState

    return StudyState(paths, read_only=True).redone


def sampled_results(spec: StudySpec, paths: StudyPaths, store: Any) -> dict[str, list[Any]]:
    """Per policy, the ProblemSample of each test problem whose sampling finished."""
    from evolve.engine.sampling import problem_sample

    results: dict[str, list[Any]] = {}
    for policy, plans in sampling_plans(spec, paths, store).items():
        results[policy] = [problem_sample(store, plan, plan.run_id, spec.sampling.answers)
                           for plan in plans if plan.finished and plan.run_id is not None]
    return results
