"""Benchmark: the cost of one Sandbox.call (a whole child process) for a trivial program and one importing numpy.

Each figure is the median wall time, measured in this process around `Sandbox.call`, over --runs calls
(after one warm-up call), so it includes the temporary directory, the pids cgroup, the process start,
the confinement, the import of the candidate and the clean-up.

    .venv/bin/python scripts/bench_sandbox.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from evolve.sandbox import Sandbox

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


if __name__ == "__main__":
    main()
