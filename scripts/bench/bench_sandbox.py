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

--phases (root) says instead where a forked child's own CPU goes: each confinement step, timed inside --runs
forked processes of this one (medians; the read roots opened once beforehand, as the fork server does), and the
kernel work around a child, each alternated --runs times (means, this process's CPU and the machine's from
/proc/stat, which counts kernel threads too): a run's cgroups made and removed, a fork and exit, a fork whose child
also makes a network namespace.

    .venv/bin/python scripts/bench/bench_sandbox.py [--runs 30]
    .venv/bin/python scripts/bench/bench_sandbox.py --phases [--runs 40]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from evolve.sandbox import _isolation
from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult
from evolve.sandbox.processes import RunCgroup, cgroup_parents

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


def confinement_steps(sandbox: Sandbox, opened: dict[str, tuple[int, bool]], workdir: str, report: int) -> None:
    """In a forked process (root): a forked child's confinement, step by step as _child.confine takes them (the
    PID namespace aside, which the fork server made), each step's CPU seconds written to `report`; never returns."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid = 1_234_567
    steps = {
        "job decoded": lambda: json.loads(sandbox._job(False, Path(workdir, "c.py"), "solve", [1], Path(workdir), uid,
                                                       roots=False)),  # a forked child's: the server has the roots
        "network and mount namespaces": lambda: _isolation.enter_namespaces(libc, pid=False),
        "folder tmpfs": lambda: _isolation.private_folder(libc, workdir, 64 << 20, 20_000, uid),
        "interpreter exposed": lambda: _isolation.expose(libc, [*sandbox._expose, str(Path(workdir).parent)]),
        "/proc /sys /dev covered": lambda: _isolation.hide_system(libc, 64 << 20, uid),
        f"Landlock, {len(sandbox._read_roots) + len(sandbox._list_roots)} rules": lambda: _isolation.landlock(
            libc, workdir, list(sandbox._read_roots), sandbox._list_roots, opened, ["/dev/shm"]),
        "seccomp filter": lambda: (_isolation.no_new_privileges(libc), _isolation.refuse_syscalls(libc)),
    }
    spent = {}
    for name, step in steps.items():
        started = time.process_time()
        step()
        spent[name] = time.process_time() - started
    os.write(report, json.dumps(spent).encode())
    os._exit(0)


def child_cpu_s(work: Callable[[], None]) -> float:
    """CPU of one forked process of this one that runs `work` (which must exit it), fork and exit included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        work()
        os._exit(0)
    os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def machine_cpu_s() -> float:
    """CPU spent on this machine so far, every process and kernel thread (/proc/stat, less idle and iowait)."""
    ticks = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def cgroup_life(parents: list[Path]) -> None:
    """A run's cgroups (pids, and memory with its limit) made where a Sandbox would make them, then removed."""
    cgroup = RunCgroup.create(parents, 64, 1 << 29)
    if cgroup is not None:
        cgroup.kill_all_and_remove()


def phases(runs: int) -> None:
    if os.geteuid() != 0:
        raise SystemExit("--phases confines forked processes as the sandbox does as root: run it as root")
    sandbox = Sandbox(SandboxLimits(fork_server=False))
    opened = _isolation.open_paths([*sandbox._read_roots, *sandbox._list_roots])
    spent: list[dict[str, float]] = []
    totals = []
    for _ in range(runs):
        workdir = tempfile.mkdtemp()
        read_end, write_end = os.pipe()
        totals.append(child_cpu_s(lambda: confinement_steps(sandbox, opened, workdir, write_end)))  # noqa: B023
        os.close(write_end)
        spent.append(json.loads(os.read(read_end, 1 << 16)))
        os.close(read_end)
        os.rmdir(workdir)
    print(f"a forked child's confinement (PID namespace aside), {runs} children: median "
          f"{statistics.median(totals) * 1000:.2f} CPU-ms in all, fork and exit included")
    for name in spent[0]:
        print(f"  {name:>32}: {statistics.median(run[name] for run in spent) * 1000:6.2f} CPU-ms")
    libc = ctypes.CDLL(None, use_errno=True)
    parents = cgroup_parents()
    around: dict[str, Callable[[], object]] = {
        "a run's cgroups made and removed": lambda: cgroup_life(parents),
        "fork and exit": lambda: child_cpu_s(lambda: None),
        "fork, network namespace, exit": lambda: child_cpu_s(lambda: libc.unshare(0x40000000)),
    }
    own: dict[str, float] = dict.fromkeys(around, 0.0)
    machine: dict[str, float] = dict.fromkeys(around, 0.0)
    for _ in range(runs):
        for name, work in around.items():
            started_own, started_machine = own_cpu_s(), machine_cpu_s()
            work()
            own[name] += own_cpu_s() - started_own
            machine[name] += machine_cpu_s() - started_machine
    for name in around:
        print(f"{name:>34}: {own[name] / runs * 1000:6.2f} CPU-ms here, {machine[name] / runs * 1000:6.2f} CPU-ms "
              "on the machine (others' work included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--phases", action="store_true", help="where a forked child's own CPU goes (root)")
    args = parser.parse_args()
    runs = args.runs
    if runs < 1:
        raise SystemExit("--runs must be at least 1")
    if args.phases:
        phases(runs)
        return
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
