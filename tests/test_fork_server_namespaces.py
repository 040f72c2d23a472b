"""The fork server's children as PID-namespace inits: as root each child is forked straight into a PID namespace of
its own and forks only the candidate's process; where that is off (or refused) each child makes its own namespace,
as a fresh child does. Both ways, the candidate is pid 2, ends as the supervisor sees it, and stays confined."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_processes import alive, none_left, sleep_marker
from sandbox_helpers import HOSTILE, checked_sandbox_parent

from evolve.sandbox.core import Sandbox, SandboxLimits
from evolve.sandbox.forkserver import ForkServer

LIMITS = SandboxLimits(wall_time_s=20.0, cpu_time_s=1.0, memory_mb=512, max_processes=32, fresh_children_first=0)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root forks children into PID namespaces of their own")

CANDIDATE = """
import os
import signal
import time

def ids(x):
    return [os.getpid(), os.getppid()]

def wait(x):
    time.sleep(x)
    return x

def exit_code(x):
    os._exit(x)

def killed(x):
    os.kill(os.getpid(), signal.SIGSEGV)

def spin(x):
    while True:
        pass
"""


@pytest.fixture(autouse=True)
def sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from checked_sandbox_parent(tmp_path, monkeypatch)


@pytest.fixture(params=[True, False], ids=["server-made-namespace", "child-made-namespace"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with Sandbox(LIMITS) as made:
        assert made._fork_server is not None
        made._fork_server.pid_namespaces = request.param  # read when its server starts, at the first call
        yield made


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "candidate.py"
    path.write_text(CANDIDATE)
    return path


def namespace_pids(pid: int) -> list[int]:
    """The pid of `pid` in each PID namespace it is in, outermost first (/proc's NSpid)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(field) for field in line.split()[1:]]
    raise AssertionError(f"no NSpid for {pid}")


def children_of(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_the_candidate_is_pid_two_under_its_namespaces_init(sandbox: Sandbox, program: Path) -> None:
    result = sandbox.call(program, "ids", 0)
    assert result.status == "ok" and result.value == [2, 1], result
    assert sandbox._fork_server is not None and sandbox._fork_server.forks == 1


@as_root
def test_as_root_the_servers_child_is_the_init_and_forks_only_the_candidate(sandbox: Sandbox, program: Path) -> None:
    server = sandbox._fork_server
    assert server is not None
    with sandbox.session(program, function="wait") as session:
        assert session.call(0, limit_s=10.0).status == "ok"  # the child is up, its candidate imported
        assert session._child is not None
        child = session._child.process.pid
        below = children_of(child)
        if server.pid_namespaces:  # server -> init (pid 1) -> candidate (pid 2)
            assert namespace_pids(child)[1:] == [1]
            assert len(below) == 1 and namespace_pids(below[0])[1:] == [2] and children_of(below[0]) == []
        else:  # server -> outer process -> init (pid 1) -> candidate (pid 2)
            assert len(namespace_pids(child)) == len(namespace_pids(os.getpid()))
            assert len(below) == 1 and namespace_pids(below[0])[1:] == [1]
            assert [namespace_pids(pid)[1:] for pid in children_of(below[0])] == [[2]]


def test_the_supervisor_sees_the_candidates_end_as_it_was(sandbox: Sandbox, program: Path) -> None:
    """The init ends as its pid 2 did: the same exit code, the same signal; CPU past the limit is a timeout."""
    exited = sandbox.call(program, "exit_code", 3)
    assert exited.status == "crash" and exited.detail == "exit code 3 without a result", exited
    killed = sandbox.call(program, "killed", 0)
    assert killed.status == "crash" and killed.detail == "killed by SIGSEGV", killed
    spun = sandbox.call(program, "spin", 0)
    assert spun.status == "timeout" and "CPU limit" in spun.detail, spun
    assert sandbox.call(program, "ids", 0).value == [2, 1]


def test_a_candidate_killed_at_the_wall_clock_leaves_no_process(sandbox: Sandbox, program: Path) -> None:
    sandbox.limits = SandboxLimits(wall_time_s=0.5, cpu_time_s=5.0, fresh_children_first=0)
    started = time.monotonic()
    result = sandbox.call(program, "wait", 30)
    assert result.status == "timeout" and time.monotonic() - started < 15, result
    server = sandbox._fork_server
    assert server is not None and server.pid is not None
    assert children_of(server.pid) == []  # the child was reaped; its namespace's processes died with its init


@pytest.mark.parametrize("name", ["orphan_grandchild", "daemon"])
def test_processes_that_left_the_group_die_either_way(sandbox: Sandbox, name: str) -> None:
    marker = sleep_marker()
    result = sandbox.call(HOSTILE / f"{name}.py", "solve", marker)
    assert result.status == "ok" and result.value == {"sleeping": True}, result
    assert none_left(marker)


def test_a_fork_bomb_is_capped_either_way(sandbox: Sandbox) -> None:
    result = sandbox.call(HOSTILE / "fork_bomb.py", "solve", 1)
    assert result.status in ("ok", "timeout"), result
    if result.status == "ok":
        assert result.value["children"] < LIMITS.max_processes
    # the autouse fixture then checks that none of the spinning children survived


def test_the_server_and_its_processes_stay_out_of_reach_either_way(sandbox: Sandbox) -> None:
    assert sandbox.call(HOSTILE / "good_numpy.py", "solve", 1).status == "ok"
    server = sandbox._fork_server
    assert server is not None and server.pid is not None
    hostile = sandbox.call(HOSTILE / "other_process.py", "solve", server.pid)  # its limits, priority, CPUs, a kill
    assert hostile.status == "ok" and "done" not in hostile.value.values(), hostile
    assert hostile.value["pid"] == 2 and hostile.value["parent"] == 1
    seen = sandbox.call(HOSTILE / "read_proc_cmdline.py", "solve", "_forkserver.py")
    assert seen.status == "ok" and seen.value["found"] == [], seen
    assert alive(server.pid) and sandbox.call(HOSTILE / "good_numpy.py", "solve", 1).status == "ok"


def test_forkserver_defaults_to_namespaces_made_by_the_server() -> None:
    assert ForkServer.pid_namespaces is True
