"""What scripts/study/pilot.sh says of the calibration pilot's store: answers so far and cells by status; given the
pilot's design (pilot.toml), also the cells unfinished, the most answers left and the hours at the last half hour's
pace (since the pilot's last pause).

    pilot_status.py DB [PILOT_TOML]
"""

from __future__ import annotations

import sqlite3
import sys
import tomllib
from pathlib import Path

from store_pack import ANSWER_KINDS, attempts

ANSWERS_PER_CELL = 300  # 100 iterations x 3 answers, unless the cell cracks sooner
PAUSE_MINUTES = 5.0  # a longer gap between stored answers: the pilot was stopped
SPAN_MINUTES = 5.0  # a pace measured over less time since the last pause is not given (a resumed piece's first
# answers come in a burst: cells resumed together commit their interrupted iterations at once)


def answers_a_minute(minutes: list[float], pause: float = PAUSE_MINUTES) -> float:
    """The pace of answers stored at these sorted times (minutes), counted after the last gap longer than `pause`
    (a piece that started a while ago is not measured across the stop before it); 0 when that is under
    SPAN_MINUTES."""
    start = len(minutes) - 1
    while start > 0 and minutes[start] - minutes[start - 1] <= pause:
        start -= 1
    span = minutes[-1] - minutes[start] if minutes else 0.0
    return (len(minutes) - start - 1) / span if span >= SPAN_MINUTES else 0.0


def active_hours(minutes: list[float], pause: float = PAUSE_MINUTES) -> float:
    """Hours the pilot ran, from the sorted times (minutes) its answers were stored: the gaps between answers summed,
    a gap longer than `pause` (a stop between pieces) left out."""
    return sum(gap for gap in (b - a for a, b in zip(minutes, minutes[1:], strict=False)) if gap <= pause) / 60


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    db = Path(argv[0])
    store = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    status = dict(store.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
    stored = [row[0] for row in store.execute(
        f"SELECT (julianday(created_at) - julianday('2000-01-01')) * 1440 FROM attempts WHERE {ANSWER_KINDS} "
        "ORDER BY created_at")]
    print(f"{attempts(db)} answers in {active_hours(stored):.1f} hours of running; cells: "
          + ", ".join(f"{n} {name}" for name, n in sorted(status.items())))
    if len(argv) == 2:
        design = tomllib.loads(Path(argv[1]).read_text())
        planned = len(design["problems"]) * len(design["seeds"])
        unfinished = planned - status.get("finished", 0)
        spent = store.execute(
            "SELECT COALESCE(SUM(a.n), 0) FROM runs r JOIN (SELECT run_id, COUNT(*) n FROM attempts "
            f"WHERE {ANSWER_KINDS} GROUP BY run_id) a ON a.run_id = r.id WHERE r.status != 'finished'").fetchone()[0]
        recent = [row[0] for row in store.execute(
            f"SELECT (julianday(created_at) - julianday('2000-01-01')) * 1440 FROM attempts WHERE {ANSWER_KINDS} "
            "AND created_at >= (SELECT datetime(MAX(created_at), '-30 minutes') FROM attempts) ORDER BY created_at")]
        left = unfinished * ANSWERS_PER_CELL - spent
        pace = answers_a_minute(recent)
        print(f"{unfinished} of {planned} cells unfinished: at most {left} answers left; "
              + (f"{pace:.0f} answers a minute over the last half hour stored (since its last pause), so at most "
                 f"{left / pace / 60:.1f} hours at that pace" if pace else
                 f"no pace yet (under {SPAN_MINUTES:.0f} minutes of answers since its last pause)"))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
