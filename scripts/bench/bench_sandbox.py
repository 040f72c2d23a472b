"""Benchmark: the cost of one Sandbox.call (a whole child process), fresh child against fork server, and of one
timed call in call_each.

Sandbox.call figures compare, interleaved call by call so that a busy machine weighs on each alike:
- fresh: a new `python -I -S -B _child.py` per call (SandboxLimits(fork_server=False));
- fork server: each child forked from the Sandbox's warm server, which preloaded numpy (preload=("numpy",));
- one call per Sandbox: a new Sandbox per call, as an evaluator that makes a Sandbox per evaluation does, fresh
  and with the fork server on: a Sandbox starts its server only at its second child (fresh_children_first=1), so
  these two should cost the same.
Wall: the median of --runs calls (after one warm-up call each), measured here around Sandbox.call, so it includes
the temporary folder, the pids cgroup, the process start or fork, the confinement, the candidate's import and the
clean-up. CPU: every process's CPU (this one, its children, the server and the children it reaped) summed over
the runs and divided by them (the server's share is read from /proc in clock ticks, so it is a mean, not a
median). The call_each figures are the median trusted round trip (SandboxResult.wall_s) of --runs calls served
by one child: the overhead that a per-test time limit includes, for a trivial argument and for a list of
200,000 ints (lis's big tests).

    .venv/bin/python scripts/bench/bench_sandbox.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult

PROGRAMS = {
    "trivial": "def solve(x):\n    return x + 1\n",
    "numpy": "import numpy as np\n\n\ndef solve(x):\n    return float(np.arange(x).sum())\n",
}
FRESH = SandboxLimits(fork_server=False)
FORKED = SandboxLimits(preload=("numpy",), fresh_children_first=0)  # the warm-up call starts the server
FORKED_BY_DEFAULT = SandboxLimits(preload=("numpy",))  # a Sandbox's first child is fresh: one call starts no server
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def server_cpu_s(sandbox: Sandbox) -> float:
    """CPU of the sandbox's fork server and of the children it reaped, 0 where it has none."""
    server = sandbox._fork_server
    pid = server.pid if server is not None else None
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(field) for field in fields[11:15]) * _TICK_S  # utime, stime, cutime, cstime


def own_cpu_s() -> float:
    """CPU of this process and of the children it reaped (fresh sandbox children, stopped servers)."""
    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


class Measured:
    """Wall time of each call and the CPU of all of them, of one way of calling."""

    def __init__(self, call: Callable[[], tuple[SandboxResult, float]]) -> None:
        self.call, self.cpu_s = call, 0.0
        self.walls: list[float] = []

    def once(self, counted: bool) -> None:
        started, cpu = time.perf_counter(), own_cpu_s()
        result, server_cpu = self.call()
        if result.status != "ok":
            raise SystemExit(f"{result.status}: {result.detail}\n{result.stderr}")
        if counted:
            self.walls.append(time.perf_counter() - started)
            self.cpu_s += own_cpu_s() - cpu + server_cpu

    def figures(self) -> tuple[float, float]:
        """(median wall ms, CPU ms per call)."""
        return statistics.median(self.walls) * 1000, self.cpu_s / len(self.walls) * 1000


def kept(sandbox: Sandbox, program: Path) -> Callable[[], tuple[SandboxResult, float]]:
    def call() -> tuple[SandboxResult, float]:
        before = server_cpu_s(sandbox)
        result = sandbox.call(program, "solve", 10)
        return result, server_cpu_s(sandbox) - before
    return call


def one_per_sandbox(limits: SandboxLimits, program: Path) -> Callable[[], tuple[SandboxResult, float]]:
    def call() -> tuple[SandboxResult, float]:
        with Sandbox(limits) as sandbox:
            result = sandbox.call(program, "solve", 10)
        return result, 0.0  # the stopped server was reaped here: its CPU is in this process's RUSAGE_CHILDREN
    return call


def compare_calls(folder: Path, runs: int) -> None:
    with Sandbox(FRESH) as fresh, Sandbox(FORKED) as forked:
        for name, code in PROGRAMS.items():
            program = folder / f"{name}.py"
            program.write_text(code)
            ways = {"fresh": Measured(kept(fresh, program)), "fork server": Measured(kept(forked, program)),
                    "fresh, one call per Sandbox": Measured(one_per_sandbox(FRESH, program)),
                    "fork server, one call per Sandbox": Measured(one_per_sandbox(FORKED_BY_DEFAULT, program))}
            for run in range(runs + 1):
                for way in ways.values():
                    way.once(counted=run > 0)
            figures = {label: way.figures() for label, way in ways.items()}
            for label, (wall_ms, cpu_ms) in figures.items():
                print(f"Sandbox.call, {name:>7} program, {label:<34}: median {wall_ms:6.1f} ms, "
                      f"CPU {cpu_ms:6.1f} ms per call over {runs} runs")
            (fresh_wall, fresh_cpu), (forked_wall, forked_cpu) = figures["fresh"], figures["fork server"]
            print(f"Sandbox.call, {name:>7} program, fresh / fork server: {fresh_wall / forked_wall:.1f}x wall, "
                  f"{fresh_cpu / forked_cpu:.1f}x CPU")


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
    if runs < 1:
        raise SystemExit("--runs must be at least 1")
    with tempfile.TemporaryDirectory() as folder:
        compare_calls(Path(folder), runs)
        program = Path(folder) / "length.py"
        program.write_text("def solve(x):\n    return len(x) if isinstance(x, list) else x\n")
        with Sandbox() as sandbox:
            for label, argument in (("one int", 10), ("200,000 ints", list(range(200_000)))):
                round_trip_ms = median_round_trip_s(sandbox, program, argument, runs) * 1000
                print(f"call_each round trip, {label:>12}: median {round_trip_ms:6.2f} ms over {runs} calls")


if __name__ == "__main__":
    main()
