"""Issue 60's calibration forecast: how many more hours of running until the registered target is in band, from what
the pieces run so far say (each level's answers per judged problem and in-band share, and the pace), walked along
the pieces' run order. `generated_calibration.py forecast` prints it; `generated_calibration.sh status` too."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from calibration_select import query
from generated_calibration import TEST_SIZE, TRAIN_SIZE, finished_stores, judged, level_of
from generated_pool import all_pieces, ordered_pieces
from store_pack import ANSWER_KINDS


def answers_by_problem(store: Path) -> dict[str, int]:
    """Policy answers each problem's cells have taken so far in `store`."""
    rows = query(store, "SELECT c.problem, COUNT(*) FROM experiment_cells c JOIN attempts a ON a.run_id = c.run_id "
                        f"WHERE a.{ANSWER_KINDS} GROUP BY c.problem")
    return {problem.removeprefix("programs/"): int(count) for problem, count in rows}


@dataclass(frozen=True)
class Forecast:
    """What the pieces run so far say of the rest: per level, answers per problem and in-band share (problems with a
    verdict), the pace, and the answers (hours) until `target` are in band along the run order."""

    per_level: dict[str, tuple[float, float, int]]  # level -> (answers per problem, in-band share, problems judged)
    answers_a_minute: float
    answers_to_target: float | None  # None: the pool as run so far would not reach the target
    in_band_now: int
    grown_problems: int = 0  # problems of the last level the pool would have to grow by (the registered rule's level)


def forecast(verdicts: dict[str, bool], spent: dict[str, int], order: list[list[str]], answers_a_minute: float,
             target: int) -> Forecast:
    """Walk the problems without a verdict in run order (`order`: each piece's problems), each expected to take its
    level's mean answers per judged problem (less what it has taken) and to be in band at its level's share."""
    per_level: dict[str, tuple[float, float, int]] = {}
    for level in dict.fromkeys(level_of(problem) for piece in order for problem in piece):
        judged = [problem for problem in verdicts if level_of(problem) == level]
        if judged:
            per_level[level] = (sum(spent.get(p, 0) for p in judged) / len(judged),
                                sum(verdicts[p] for p in judged) / len(judged), len(judged))
    expected, answers = float(sum(verdicts.values())), 0.0
    for problem in (problem for piece in order for problem in piece if problem not in verdicts):
        if expected >= target:
            break
        if level_of(problem) not in per_level:
            return Forecast(per_level, answers_a_minute, None, sum(verdicts.values()))
        mean, share, _ = per_level[level_of(problem)]
        answers += max(0.0, mean - spent.get(problem, 0))
        expected += share
    grown = 0
    if expected < target and order:  # the growth rule adds problems of the pool's last level (2ee), at its rates
        mean, share, _ = per_level.get(level_of(order[-1][-1]), (0.0, 0.0, 0))
        if share > 0:
            grown = math.ceil((target - expected) / share - 1e-9)
            answers += grown * mean
            expected = target
    reached = answers if expected >= target else None
    return Forecast(per_level, answers_a_minute, reached, sum(verdicts.values()), grown)


def running_minutes(times: list[float]) -> float:
    """Minutes the machine ran pieces, from the times (minutes) every piece's answers were stored: the gaps between
    answers of all pieces together (pilot_status.active_hours), so two pieces that ran at once count their minutes
    once."""
    from pilot_status import active_hours

    return active_hours(sorted(times)) * 60


def recent_pace(times: list[float], hours: float = 3.0) -> tuple[float, float]:
    """(answers a minute, minutes) over the last `hours` of running (the pieces' layout of late, not the history's
    mix: one piece at a time, then two at once)."""
    ordered = sorted(times)
    low, high = 0, len(ordered)  # the earliest start whose running time to the end is within `hours`
    while low < high:
        middle = (low + high) // 2
        if running_minutes(ordered[middle:]) <= hours * 60:
            high = middle
        else:
            low = middle + 1
    minutes = running_minutes(ordered[low:])
    return ((len(ordered) - low - 1) / minutes if minutes else 0.0), minutes


def forecast_step(target: int = TEST_SIZE + TRAIN_SIZE) -> None:
    """Print the forecast: how many more hours of running until `target` problems are in band."""
    stores = finished_stores()
    verdicts = judged()
    spent: dict[str, int] = {}
    times: list[float] = []  # every piece's answers together: pieces that ran at once share the machine's minutes
    for store in stores:
        spent |= answers_by_problem(store)
        times += [row[0] for row in query(store, "SELECT (julianday(created_at) - julianday('2000-01-01')) * 1440 "
                                                 f"FROM attempts WHERE {ANSWER_KINDS}")]
    minutes, answers = running_minutes(times), len(times)
    pace = answers / minutes if minutes else 0.0
    cut = all_pieces()
    order = [[name.removeprefix("programs/") for name in cut[number - 1]] for number in ordered_pieces()]
    result = forecast(verdicts, spent, order, pace, target)
    for level, (mean, share, problems) in result.per_level.items():
        print(f"level {level}: {problems} problems judged, {mean:.0f} answers a problem, {share:.0%} in band")
    print(f"{answers} answers in {minutes / 60:.1f} hours of running: {pace:.0f} answers a minute")
    if result.answers_to_target is None or not pace:
        print(f"{result.in_band_now} in band; no forecast to {target} yet (a level not judged yet, or none of the "
              "last level in band)")
    else:
        print(f"{result.in_band_now} in band; about {result.answers_to_target:,.0f} more answers to {target}: "
              f"{result.answers_to_target / pace / 60:.1f} hours of running at that pace"
              + (f", the pool grown by about {result.grown_problems} problems of its last level (the registered "
                 "growth rule)" if result.grown_problems else ""))
        late, late_minutes = recent_pace(times)
        if late:
            print(f"at the pace of the last {late_minutes / 60:.1f} hours of running ({late:.0f} answers a minute): "
                  f"{result.answers_to_target / late / 60:.1f} hours")
