"""The sandbox against a corpus of hostile candidates: each fails cleanly, nothing escapes or survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from evolve.sandbox import Sandbox, SandboxLimits

HOSTILE = Path(__file__).parent / "hostile"
LIMITS = SandboxLimits(wall_time_s=3.0, cpu_time_s=2.0, memory_mb=512, max_processes=32, max_output_bytes=200_000)


@pytest.fixture
def sandbox() -> Sandbox:
    return Sandbox(LIMITS)


def run(sandbox: Sandbox, name: str, *args: object):
    return sandbox.call(HOSTILE / f"{name}.py", "solve", *args)


def sandbox_dirs() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("evolve-sandbox-")}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_well_behaved_program_returns_its_value_with_numpy(sandbox: Sandbox) -> None:
    result = run(sandbox, "good_numpy", 4)
    assert result.status == "ok", result
    assert result.value == [0.0, 2.0, 4.0, 6.0]


@pytest.mark.parametrize("name", ["endless_loop", "ignores_sigterm"])
def test_cpu_spinners_are_stopped_as_timeouts(sandbox: Sandbox, name: str) -> None:
    started = time.monotonic()
    result = run(sandbox, name, 1)
    assert result.status == "timeout", result
    assert time.monotonic() - started < LIMITS.wall_time_s + 2


def test_wall_clock_limit_stops_a_sleeper() -> None:
    sleeper = Sandbox(SandboxLimits(wall_time_s=1.0, cpu_time_s=5.0))
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write("import time\ndef solve(x):\n    time.sleep(60)\n")
    try:
        started = time.monotonic()
        result = sleeper.call(handle.name, "solve", 0)
    finally:
        os.unlink(handle.name)
    assert result.status == "timeout" and "wall-clock" in result.detail
    assert time.monotonic() - started < 3


def test_memory_bomb_is_a_memory_failure(sandbox: Sandbox) -> None:
    result = run(sandbox, "memory_bomb", 1)
    assert result.status == "memory", result


def test_fork_bomb_is_capped_and_every_process_dies(sandbox: Sandbox) -> None:
    result = run(sandbox, "fork_bomb", 1)
    assert result.status in ("ok", "timeout", "crash"), result
    if result.status == "ok":
        assert result.value["children"] < LIMITS.max_processes
    time.sleep(0.2)
    leftovers = subprocess.run(["pgrep", "-f", "fork_bomb|candidate.py"], capture_output=True, text=True).stdout
    assert leftovers.strip() == ""


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("sys_exit_zero", "sys.exit(0)"),
        ("sys_exit_at_import", "sys.exit(3)"),
        ("os_exit", "without a result"),
        ("segfault", "SIGSEGV"),
        ("raises", "ValueError: the candidate gave up"),
    ],
)
def test_exits_and_crashes_are_crashes_with_a_reason(sandbox: Sandbox, name: str, detail: str) -> None:
    result = run(sandbox, name, 1)
    assert result.status == "crash", result
    assert detail in result.detail


def test_unserialisable_return_is_bad_output(sandbox: Sandbox) -> None:
    result = run(sandbox, "not_json", 1)
    assert result.status == "bad_output" and "not JSON" in result.detail


def test_writing_outside_its_directory_is_blocked(sandbox: Sandbox, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("original")
    result = run(sandbox, "write_outside", str(target))
    assert result.status == "crash" and "PermissionError" in result.detail
    assert target.read_text() == "original"
    result = run(sandbox, "write_outside", str(tmp_path / "new.txt"))
    assert result.status == "crash" and not (tmp_path / "new.txt").exists()


def test_reading_the_project_is_blocked(sandbox: Sandbox) -> None:
    evaluator = Path(__file__).resolve().parents[1] / "evolve" / "sandbox.py"
    result = run(sandbox, "read_project", str(evaluator))
    assert result.status == "crash" and "PermissionError" in result.detail


def test_flooding_stdout_is_cut_at_the_cap(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = run(sandbox, "flood_stdout", 1)
    assert result.status == "bad_output" and "cap" in result.detail
    assert len(result.stdout) <= LIMITS.max_output_bytes
    assert time.monotonic() - started < LIMITS.wall_time_s + 2


def test_printed_json_cannot_forge_the_result(sandbox: Sandbox) -> None:
    result = run(sandbox, "forged_result", 7)
    assert result.status == "ok" and result.value == 7


def test_grandchild_that_left_the_process_group_is_killed(sandbox: Sandbox) -> None:
    result = run(sandbox, "orphan_grandchild", 1)
    assert result.status == "ok", result
    time.sleep(0.2)
    assert not alive(int(result.value))


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
    driver.write_text("def drive(candidate, payload):\n    return [candidate.solve(x) for x in payload]\n")
    result = Sandbox(LIMITS).run_driver(HOSTILE / "good_numpy.py", driver, [1, 2])
    assert result.status == "ok" and result.value == [[0.0], [0.0, 2.0]]


def test_no_sandbox_directories_are_left_behind(sandbox: Sandbox) -> None:
    before = sandbox_dirs()
    for name in ("good_numpy", "raises", "endless_loop"):
        run(sandbox, name, 2)
    assert sandbox_dirs() == before
