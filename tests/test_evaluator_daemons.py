"""An evaluator that detaches a daemon (double fork, setsid) holding every pipe of its process: the result is
read at once and the daemon does not outlive the job, in a fresh evaluator process and in a warm one (which keeps
its sandbox fork server)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from evolve.problems.evaluation import evaluate_program
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem, load_problem

# an evaluator that detaches a daemon (double fork, setsid) holding every pipe of its process, the result's too
DETACHING = """\
import os
import time

MARKER = {marker!r}


def marked() -> bool:
    for entry in os.scandir("/proc"):
        try:
            with open(entry.path + "/cmdline", "rb") as handle:
                if MARKER.encode() in handle.read().split(b"\\0"):
                    return True
        except OSError:
            continue
    return False


def evaluate(program_path, sandbox):
    result = sandbox.call(program_path, "f")
    if result.status != "ok":
        raise RuntimeError(result.detail)
    for fd in range(3, 256):  # hand the daemon every pipe of this process
        try:
            os.set_inheritable(fd, True)
        except OSError:
            pass
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", MARKER])
        os._exit(0)
    os.waitpid(child, 0)
    deadline = time.monotonic() + 10
    while not marked():  # the daemon is up before the answer
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon did not start")
        time.sleep(0.01)
    return {{"a": float(result.value)}}
"""


@pytest.fixture
def detaching(tmp_path: Path) -> tuple[Problem, str]:
    from host_processes import sleep_marker

    marker = sleep_marker()
    folder = tmp_path / "detaching"
    folder.mkdir()
    (folder / "problem.toml").write_text('name = "detaching"\ndescription = "f() is scored."\n'
                                         'provenance = "a test fixture"\nobjectives = ["a"]\n')
    (folder / "initial.py").write_text("# EVOLVE-BLOCK-START\ndef f():\n    return 1\n# EVOLVE-BLOCK-END\n")
    (folder / "evaluator.py").write_text(DETACHING.format(marker=marker))
    return load_problem("detaching", tmp_path), marker


def fork_servers_of(pid: int) -> list[int]:
    """The sandbox fork servers among the children of process `pid`."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            with open(f"{entry.path}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"{entry.path}/cmdline", "rb") as handle:
                command = handle.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"_forkserver.py" in command:
            found.append(int(entry.name))
    return found


def test_a_fresh_evaluator_that_detaches_a_daemon_is_answered_at_once_and_leaves_nothing(
        detaching: tuple[Problem, str]) -> None:
    from host_processes import none_left, processes_with_argument

    problem, marker = detaching
    try:
        evaluation = asyncio.run(evaluate_program(problem, "def f():\n    return 3\n", timeout_s=30))
        assert evaluation.ok and evaluation.scores == {"a": 3.0}, evaluation  # not a timeout
        assert none_left(marker), processes_with_argument(marker)
    finally:
        for pid in processes_with_argument(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_warm_evaluator_that_detaches_a_daemon_leaves_nothing_after_each_job_and_keeps_its_fork_server(
        detaching: tuple[Problem, str]) -> None:
    from host_processes import none_left, processes_with_argument

    problem, marker = detaching

    async def three_jobs() -> list[list[int]]:
        servers = []
        async with EvaluatorPool(1) as pool:
            for number in range(3):
                evaluation = await asyncio.wait_for(
                    pool.evaluate(problem, f"def f():\n    return {number}\n", timeout_s=30), 60)
                assert evaluation.ok and evaluation.scores == {"a": float(number)}, evaluation
                assert none_left(marker), processes_with_argument(marker)
                (worker,) = pool.pids()
                servers.append(fork_servers_of(worker))
            assert pool.started == 1  # one warm process served all three
        return servers

    try:
        servers = asyncio.run(three_jobs())
        assert servers[1] and servers[2] == servers[1]  # the fork server the second job started serves the third
        assert none_left(marker)
    finally:
        for pid in processes_with_argument(marker):
            os.kill(pid, signal.SIGKILL)
