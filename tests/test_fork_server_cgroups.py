"""The fork server clones each child straight into its run's cgroup v2 (clone3 with CLONE_INTO_CGROUP), so the
supervisor writes no cgroup.procs for it; where the cgroup is v1, clone3 is turned off or the kernel has none, the
child is forked as before and the supervisor puts it there. Either way the child runs in its cgroup and every
process of the run dies at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_processes import none_left, sleep_marker
from sandbox_helpers import HOSTILE, checked_sandbox_parent

from evolve.sandbox._clone import Forker
from evolve.sandbox.core import Sandbox, SandboxLimits
from evolve.sandbox.processes import cgroup_parents

ROOT = Path(__file__).resolve().parents[1]
LIMITS = SandboxLimits(wall_time_s=20.0, cpu_time_s=1.0, memory_mb=512, max_processes=32, fresh_children_first=0)
WRITABLE = [path for path in cgroup_parents() if os.access(path, os.W_OK)]
V2_PARENTS = [path for path in WRITABLE if (path / "cgroup.controllers").exists()]
V1_PARENTS = [path for path in WRITABLE if not (path / "cgroup.controllers").exists()]
needs_v2 = pytest.mark.skipif(not V2_PARENTS, reason="no writable cgroup v2 tree")
needs_v1 = pytest.mark.skipif(not V1_PARENTS, reason="no writable cgroup v1 pids hierarchy")
WAITS = "import time\n\ndef solve(x):\n    time.sleep(x)\n    return x\n"


class InCgroupV2(Sandbox):
    def _cgroup_parents(self) -> list[Path]:
        return V2_PARENTS


@pytest.fixture(autouse=True)
def sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from checked_sandbox_parent(tmp_path, monkeypatch)


def cgroup_of(pid: int, hierarchy: str) -> str:
    """The cgroup of `pid` in the hierarchy whose controllers are `hierarchy` ("" for cgroup v2)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, where = line.split(":", 2)
        if controllers == hierarchy:
            return where
    raise AssertionError(f"{pid} is in no {hierarchy or 'v2'} cgroup")


def child_and_cgroup(sandbox: Sandbox, program: Path, hierarchy: str) -> tuple[str, str]:
    """(the cgroup a forked child is in, its run's cgroup), seen while the child serves a session."""
    with sandbox.session(program, function="solve") as session:
        assert session.call(0, limit_s=10.0).status == "ok"
        child = session._child
        assert child is not None and child.cgroup is not None
        return cgroup_of(child.process.pid, hierarchy), child.cgroup.path.name


@needs_v2
@pytest.mark.parametrize("clone3", [True, False], ids=["cloned-into-it", "written-to-cgroup.procs"])
def test_a_forked_child_runs_in_its_v2_cgroup_and_its_processes_die(clone3: bool, tmp_path: Path) -> None:
    program = tmp_path / "waits.py"
    program.write_text(WAITS)
    with InCgroupV2(LIMITS) as sandbox:
        server = sandbox._fork_server
        assert server is not None
        server.clone3 = clone3  # read when the server starts, at the first call
        inside, run_cgroup = child_and_cgroup(sandbox, program, "")
        assert inside.rsplit("/", 1)[-1] == run_cgroup
        assert server.forks == 1 and server.placed == (1 if clone3 else 0)
        marker = sleep_marker()
        result = sandbox.call(HOSTILE / "daemon.py", "solve", marker)  # setsid, double fork: found by its cgroup
        assert result.status == "ok" and result.value == {"sleeping": True}, result
        assert none_left(marker)
        assert server.forks == 2 and server.placed == (2 if clone3 else 0)


@needs_v1
def test_a_v1_cgroup_is_joined_by_the_supervisor_as_before(tmp_path: Path) -> None:
    program = tmp_path / "waits.py"
    program.write_text(WAITS)
    with Sandbox(LIMITS) as sandbox:
        inside, run_cgroup = child_and_cgroup(sandbox, program, "pids")
        assert inside.rsplit("/", 1)[-1] == run_cgroup
        assert sandbox._fork_server is not None and sandbox._fork_server.placed == 0


@needs_v1
def test_a_v1_cgroup_makes_the_forker_fall_back_to_fork() -> None:
    """clone3 refuses a cgroup v1 folder (EBADF): the child is forked all the same, not placed, and clone3 stays on
    for later children."""
    folder = os.open(V1_PARENTS[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        forker = Forker(-1)
        pid, in_namespace, placed = forker.fork_child(folder)
        if pid == 0:
            os._exit(7)
        assert (in_namespace, placed, forker.clone3) == (False, False, True)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
    finally:
        os.close(folder)


FORK_WITHOUT_CLONE3 = """
import ctypes, os, sys
from evolve.sandbox import _isolation, _seccomp
from evolve.sandbox._clone import Forker
libc = ctypes.CDLL(None, use_errno=True)
_isolation.no_new_privileges(libc)
assert _seccomp.install(libc)  # the sandbox's own filter: clone3 answers ENOSYS, as on a kernel without it
folder = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
forker = Forker(-1)
pid, in_namespace, placed = forker.fork_child(folder)
if pid == 0:
    os._exit(7)
print(in_namespace, placed, forker.clone3, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@needs_v2
def test_without_clone3_the_forker_falls_back_to_fork_and_stops_trying() -> None:
    done = subprocess.run([sys.executable, "-c", FORK_WITHOUT_CLONE3, str(V2_PARENTS[0])], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "7"], done.stdout
