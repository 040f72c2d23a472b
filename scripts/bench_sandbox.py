"""Benchmark: the cost of one Sandbox.call (a whole child process), and of one timed call in call_each.

Sandbox.call figures are the median wall time, measured in this process around `Sandbox.call`, over --runs
calls (after one warm-up call), so they include the temporary directory, the pids cgroup, the process start,
the confinement, the import of the candidate and the clean-up. The call_each figures are the median trusted
round trip (SandboxResult.wall_s) of --runs calls served by one child: the overhead that a per-test time limit
includes, for a trivial argument and for a list of 200,000 ints (lis's big tests).

    .venv/bin/python scripts/bench_sandbox.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from evolve.sandbox.core import Sandbox

PROGRAMS = {
    "trivial": "def solve(x):\n    return x + 1\n",
    "numpy": "import numpy as np\n\n\ndef solve(x):\n    return float(np.arange(x).sum())\n",
}


def median_call_s(sandbox: Sandbox, program: Path, runs: int) -> float:
    """Median wall time of `runs` calls of solve(10) on `program`; every call must succeed."""
    timings = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        result = sandbox.call(program, "solve", 10)
        timings.append(time.perf_counter() - started)
        if result.status != "ok":
            raise SystemExit(f"{program.name}: {result.status}: {result.detail}\n{result.stderr}")
    return statistics.median(timings[1:])


def median_round_trip_s(sandbox: Sandbox, program: Path, argument: object, runs: int) -> float:
    """Median trusted round trip of `runs` calls of solve(argument) served by one child."""
    results = sandbox.call_each(program, "solve", [[argument]] * runs, [10.0] * runs)
    failed = [result for result in results if not result.ok]
    if failed:
        raise SystemExit(f"{program.name}: {failed[0].status}: {failed[0].detail}")
    return statistics.median(result.wall_s for result in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    sandbox = Sandbox()
    with tempfile.TemporaryDirectory() as folder:
        for name, code in PROGRAMS.items():
            program = Path(folder) / f"{name}.py"
            program.write_text(code)
            print(f"Sandbox.call, {name:>7} program: median {median_call_s(sandbox, program, runs) * 1000:6.1f} ms"
                  f" over {runs} runs")
        program = Path(folder) / "length.py"
        program.write_text("def solve(x):\n    return len(x) if isinstance(x, list) else x\n")
        for label, argument in (("one int", 10), ("200,000 ints", list(range(200_000)))):
            round_trip_ms = median_round_trip_s(sandbox, program, argument, runs) * 1000
            print(f"call_each round trip, {label:>12}: median {round_trip_ms:6.2f} ms over {runs} calls")


if __name__ == "__main__":
    main()
