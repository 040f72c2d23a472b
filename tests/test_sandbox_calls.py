"""The sandbox's calls that share one child: `call_each` and `run_driver_each` (each call timed and limited from
the trusted side, a crash or an overrun costing only its own call) and interactive sessions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sandbox_helpers import HOSTILE, run

from evolve.sandbox.core import Sandbox, SandboxLimits

pytestmark = pytest.mark.usefixtures("sandbox_parent")  # tests/conftest.py: a checked folder per test


def test_each_call_gets_its_own_value_and_a_trusted_round_trip_time(sandbox: Sandbox, tmp_path: Path) -> None:
    program = tmp_path / "double.py"
    program.write_text("def double(x):\n    print('called', x)\n    return 2 * x\n")
    results = sandbox.call_each(program, "double", [[1], [2], [3]], [1.0, 1.0, 1.0])
    assert [(result.status, result.value, result.stdout) for result in results] == [
        ("ok", 2, "called 1\n"), ("ok", 4, "called 2\n"), ("ok", 6, "called 3\n")]
    assert all(0 < result.wall_s < 60 for result in results)  # measured, whatever the machine's load


def test_a_call_past_its_limit_is_stopped_and_the_next_call_runs_in_a_fresh_child(sandbox: Sandbox) -> None:
    results = sandbox.call_each(HOSTILE / "endless_loop.py", "solve", [[1], [2]], [0.3, 0.3])
    assert [result.status for result in results] == ["timeout", "timeout"]
    # stopped at each call's limit, not the run's CPU limit (1 s): the detail names the limit that stopped it
    assert all("time limit of 0.3s" in result.detail and result.wall_s >= 0.3 for result in results)


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


def test_time_scale_multiplies_each_calls_limit_and_the_runs_wall_and_cpu_limits(tmp_path: Path) -> None:
    program = tmp_path / "sleeper.py"
    program.write_text("import time\n\ndef f(x):\n    time.sleep(x)\n    return x\n")
    calls, limits = [[0.5]], [0.2]  # half a second asleep: over its 0.2 s limit, under 20 times it
    assert Sandbox(SandboxLimits()).call_each(program, "f", calls, limits)[0].status == "timeout"
    scaled = Sandbox(SandboxLimits(wall_time_s=4.0, cpu_time_s=2.0, time_scale=20.0))
    assert (scaled.limits.wall_time_s, scaled.limits.cpu_time_s) == (80.0, 40.0)
    assert [(result.status, result.value) for result in scaled.call_each(program, "f", calls, limits)] == [("ok", 0.5)]
    assert Sandbox(scaled.limits).limits == scaled.limits  # the limits in force are not scaled twice


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
