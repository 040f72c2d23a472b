"""Records when each iteration of a real run starts and commits (from its events), as the trace
tests/test_eta.py replays to check the ETA against what really happened.

    .venv/bin/python scripts/bench/record_run_trace.py tests/traces/default_run.json [--set run.iterations=40 ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import evolve
from evolve.cli.common import parse_setting
from evolve.engine.events import Event, IterationCommitted, IterationStarted, RunStarted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--config", default="evolve.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    marks: list[dict[str, object]] = []
    workers = [0]

    def record(event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, RunStarted):
            marks.append({"t": now, "event": "run_started"})
        elif isinstance(event, IterationStarted):
            workers[0] = event.stats.workers
            marks.append({"t": now, "event": "started", "iteration": event.iteration})
        elif isinstance(event, IterationCommitted):
            marks.append({"t": now, "event": "committed", "iteration": event.iteration})

    overrides: dict[str, object] = {}
    for item in args.set:
        overrides.update(parse_setting(item))
    with tempfile.TemporaryDirectory() as folder:
        overrides.setdefault("run.db", str(Path(folder) / "trace.db"))
        outcome = evolve.run(args.config, overrides=overrides, on_event=record)
    start = marks[0]["t"]
    trace = {"config": args.config, "overrides": {k: v for k, v in overrides.items() if k != "run.db"},
             "status": outcome.status, "iterations": outcome.stats.iterations_target, "workers": workers[0],
             "marks": [{**mark, "t": round(float(mark["t"]) - float(start), 3)} for mark in marks]}
    args.out.write_text(json.dumps(trace, indent=0) + "\n")
    print(f"{args.out}: {len(marks)} marks over {trace['marks'][-1]['t']:.1f} s, {outcome.status}")


if __name__ == "__main__":
    main()
