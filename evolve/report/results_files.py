"""An experiment report's files: report.json (every number, as the dataclasses hold them) and flat CSV tables."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from evolve.report.results import ExperimentResults


def write_json(results: ExperimentResults, path: Path) -> None:
    path.write_text(json.dumps(asdict(results), separators=(",", ":")) + "\n")  # compact: a study's is ~10 MB


def write_csvs(results: ExperimentResults, folder: Path) -> list[Path]:
    """table, cells, curves (long format, every axis), objectives, budgets (with tokens per answer and the
    per-answer caps, space-separated for an ensemble's members) and differences (with the interval's width, the
    Holm-adjusted p-values, the family they were adjusted over and the verdict): every number."""
    level = f"{results.confidence:.0%}"
    files = {
        "table.csv": (["problem", "policy", "state", "seeds_run", "seeds_planned", "cracked", "cracked_share",
                       f"cracked_low_{level}", f"cracked_high_{level}", "median_first_iteration_km",
                       "seeds_censored", "censored_at_most", "best_scalar", "mean_best_scalar",
                       f"mean_best_low_{level}", f"mean_best_high_{level}", "mean_best_out_of_range",
                       "policy_calls", "policy_errors"], _table_rows(results)),
        "cells.csv": (["problem", "policy", "seed", "run_id", "status", "rule", "iterations_done", "iterations_target",
                       "first_solved_iteration", "best_scalar", "policy_calls", "policy_errors", "policy_failed",
                       "evaluations", "completion_tokens", "answers", "prompt_tokens", "wall_s"],
                      ([c.problem, c.policy, c.seed, c.run_id, c.status, c.rule, c.iterations_done,
                        c.iterations_target, c.first_solved_iteration, c.best_scalar, c.policy_calls, c.policy_errors,
                        c.policy_failed, c.evaluations, c.completion_tokens, c.answers, c.prompt_tokens, c.wall_s]
                       for c in results.cells)),
        "curves.csv": (["policy", "metric", "problem", "axis", "x", "mean", "low", "high", "seeds", "problems"],
                       ([c.policy, c.metric, c.problem or "(all)", c.axis, *point, c.seeds, c.problems]
                        for c in results.curves + results.problem_curves
                        for point in zip(c.x, c.mean, c.low, c.high, strict=True))),
        "objectives.csv": (["problem", "policy", "objective", "threshold", "seeds", "seeds_reached", "best",
                            "mean_best"],
                           ([o.problem, o.policy, o.objective, o.threshold, o.seeds, o.reached, o.best, o.mean_best]
                            for o in results.objectives)),
        "budgets.csv": (["policy", "cells", "iterations", "evaluations", "completion_tokens", "answers",
                         "tokens_per_answer", "max_new_tokens", "prompt_tokens", "policy_calls", "policy_errors",
                         "wall_s"],
                        ([b.policy, b.cells, b.iterations, b.evaluations, b.completion_tokens, b.answers,
                          b.tokens_per_answer, " ".join(map(str, b.max_new_tokens)), b.prompt_tokens, b.policy_calls,
                          b.policy_errors, b.wall_s] for b in results.budgets)),
        "differences.csv": (["metric", "policy_a", "policy_b", "problems", "mean_difference", f"low_{level}",
                             f"high_{level}", f"width_{level}", "wins", "losses", "ties", "sign_test_p",
                             "sign_test_p_holm", "permutation_p", "permutation_p_holm", "permutation_exact", "family",
                             "significant", "per_problem"],
                            ([d.metric, d.policy_a, d.policy_b, len(d.problems), d.mean.estimate, d.mean.low,
                              d.mean.high, d.mean.width, d.wins, d.losses, d.ties, d.sign_p, d.sign_p_holm,
                              d.permutation_p, d.permutation_p_holm, d.permutation_exact, d.family, d.significant,
                              " ".join(f"{p}={v:.6g}" for p, v in zip(d.problems, d.per_problem, strict=True))]
                             for d in results.differences)),
    }
    written = []
    for name, (header, rows) in files.items():
        path = folder / name
        _write(path, header, rows)
        written.append(path)
    return written


def _table_rows(results: ExperimentResults) -> Iterable[list[object]]:
    for row in results.table:
        cracked, band, km = row.cracked_interval, row.mean_best_scalar, row.first_crack
        yield [row.problem, row.policy, row.state, row.seeds_run, row.seeds_planned, row.cracked,
               *(getattr(cracked, k, None) for k in ("estimate", "low", "high")),
               row.median_first_iteration, km.censored if km else None, km.longest_budget if km else None,
               row.best_scalar, *(getattr(band, k, None) for k in ("estimate", "low", "high", "out_of_range")),
               row.policy_calls, row.policy_errors]


def _write(path: Path, header: list[str], rows: Iterable[list[object]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([["" if value is None else value for value in row] for row in rows])
