"""The run's ETA against what really happened: recorded traces of real runs (scripts/bench/record_run_trace.py: when each
iteration started and committed) replayed through RunStats, the ETA asked at every commit once 10% of the budget is
done, and compared with the time the run really still took."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.engine.run_stats import RunStats
from evolve.report.pace import eta, pace, waiting_on

TRACES = Path(__file__).parent / "traces"


def replay(trace: dict) -> list[tuple[int, float, float | None]]:
    """(iterations done, seconds the run really had left, the ETA shown) at every commit."""
    stats = RunStats(iterations_target=trace["iterations"], started_at=0.0, workers=trace["workers"])
    end = trace["marks"][-1]["t"]
    seen: list[tuple[int, float, float | None]] = []
    for mark in trace["marks"]:
        if mark["event"] == "started":
            stats.iteration_started(mark["iteration"], mark["t"])
        elif mark["event"] == "committed":
            stats.iteration_ended(mark["iteration"], mark["t"], committed=True)
            stats.iterations_done += 1
            seen.append((stats.iterations_done, end - mark["t"], eta(stats, mark["t"])))
    return seen


@pytest.mark.parametrize("name", sorted(path.name for path in TRACES.glob("*.json")))
def test_the_eta_is_within_30_percent_of_the_truth_once_a_tenth_of_the_run_is_done(name: str) -> None:
    """Within 30% at every commit from a tenth of the budget on while more iterations remain than run at once; in
    the last stretch, when every remaining iteration is in flight and how long the slowest takes is anyone's guess,
    within 30% of the run's whole duration."""
    trace = json.loads((TRACES / name).read_text())
    assert trace["status"] == "finished" and trace["iterations"] >= 20
    seen = replay(trace)
    assert len(seen) == trace["iterations"]
    duration = seen[0][1]
    steady = [(done, truth, shown) for done, truth, shown in seen
              if done >= trace["iterations"] / 10 and trace["iterations"] - done > trace["workers"]]
    last = [(done, truth, shown) for done, truth, shown in seen if trace["iterations"] - done <= trace["workers"]]
    assert len(steady) >= 5 and last
    off = [(done, round(truth, 1), shown and round(shown, 1)) for done, truth, shown in steady
           if shown is None or abs(shown - truth) > 0.3 * truth]
    off += [(done, round(truth, 1), shown and round(shown, 1)) for done, truth, shown in last
            if shown is None or abs(shown - truth) > 0.3 * duration]
    assert off == [], f"ETA off (iterations done, truth s, shown s): {off}"


def test_the_old_estimate_from_the_whole_elapsed_time_misses_on_the_same_trace() -> None:
    """What the ETA replaced: remaining x elapsed / done counts the pipeline filling up as if it were the pace."""
    trace = json.loads((TRACES / "default_run.json").read_text())
    end, target = trace["marks"][-1]["t"], trace["iterations"]
    commits = [mark["t"] for mark in trace["marks"] if mark["event"] == "committed"]
    tenth = commits[target // 10 - 1]
    old = (target - target // 10) * tenth / (target // 10)
    assert abs(old - (end - tenth)) > 0.3 * (end - tenth)


def test_no_eta_before_the_first_commit_and_none_left_at_the_end() -> None:
    stats = RunStats(iterations_target=4, started_at=0.0, workers=2)
    stats.iteration_started(1, 0.0)
    stats.iteration_started(2, 0.0)
    assert pace(stats, now=5.0).eta_s is None
    stats.iteration_ended(1, 10.0, committed=True)
    stats.iterations_done = 1
    # 10 s committed; 10 s more in flight: the estimate is sqrt(10 x 20) s an iteration, 3 left on 2 workers
    assert eta(stats, 10.0) == pytest.approx(3 * (200 ** 0.5) / 2)
    stats.iteration_started(3, 10.0)
    stats.iteration_ended(2, 20.0, committed=False)  # dropped: its time does not count
    assert stats.iterations_timed == 1
    stats.iterations_done = stats.iterations_target
    assert eta(stats, 20.0) == 0.0


def test_a_request_still_generating_shows_the_tokens_so_far() -> None:
    generated = [0]
    stats = RunStats(iterations_target=8, in_flight=3, live_tokens=lambda: generated[0])
    assert waiting_on(stats) == "waiting for the first completion (3 requests in flight, 0 tokens generated so far)"
    generated[0] = 412
    assert "412 tokens generated so far" in waiting_on(stats)


def test_an_experiment_eta_counts_running_cells_and_whole_budgets_for_cells_not_started() -> None:
    import io

    from rich.console import Console

    from evolve.engine.cells import CellProgress
    from evolve.report.progress import ExperimentView

    def cell_at(done: int) -> RunStats:
        stats = RunStats(iterations_target=10, workers=1)
        stats.iteration_started(1, 0.0)
        stats.iteration_ended(1, 2.0, committed=True)  # 2 s an iteration
        stats.iterations_done = done
        return stats

    cells = [CellProgress(("a", "p", 0), 1, "running", cell_at(5)), CellProgress(("b", "p", 0), 2, "running",
                                                                                    cell_at(8)),
             CellProgress(("c", "p", 0)), CellProgress(("d", "p", 0)), CellProgress(("e", "p", 0), 3, "finished")]
    view = ExperimentView("x", cells, Console(file=io.StringIO()), live=False, parallel_cells=2)
    # running: 10 s and 4 s left; two cells not started: 20 s each; 2 at a time: (10 + 4 + 40) / 2 = 27 s
    assert view._eta() == pytest.approx(27.0, abs=0.5)
