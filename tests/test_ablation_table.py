"""scripts/study/ablation_table.py: docs/search.md's ablation rows from a report's paired differences, the default
search's side positive whichever side of the pair it was."""

from __future__ import annotations

import pytest

from tests.script_modules import load_script


def difference(a: str, b: str, metric: str, estimate: float, low: float, high: float, wins: int, losses: int,
               p: float) -> dict[str, object]:
    return {"metric": metric, "policy_a": a, "policy_b": b, "problems": ["x", "y", "z", "w"],
            "mean": {"estimate": estimate, "low": low, "high": high}, "wins": wins, "losses": losses, "ties": 1,
            "permutation_p_holm": p, "significant": p <= 0.05}


def test_each_arm_is_one_row_with_the_default_ahead_as_a_positive_difference() -> None:
    table = load_script("ablation_table")
    report = {"policies": ["default", "sampling", "lexicase"], "differences": [
        difference("default", "sampling", "cracked_share", 0.25, 0.05, 0.45, 3, 0, 0.02),
        difference("default", "sampling", "mean_best", 0.1, -0.1, 0.3, 2, 1, 0.4),
        difference("lexicase", "default", "cracked_share", 0.2, 0.1, 0.3, 3, 0, 0.01),  # the arm first: turned
        difference("sampling", "lexicase", "cracked_share", 0.0, -0.1, 0.1, 0, 0, 1.0),  # no default: left out
    ]}
    lines = table.rows(report, "default")
    assert len(lines) == 2 + 2
    assert lines[2] == ("| sampling | 4 | +0.250 [+0.050, +0.450], 3/0/1, 0.02 (significant) | "
                        "+0.100 [-0.100, +0.300], 2/1/1, 0.4 |")
    assert lines[3] == "| lexicase | 4 | -0.200 [-0.300, -0.100], 0/3/1, 0.01 (significant) | - |"
    with pytest.raises(SystemExit, match="no difference with the arm 'base'"):
        table.rows(report, "base")
