"""scripts/bench/bench_threads.py at its smallest: one request, four tokens, one round quiet and one beside a spinning
process; a row per setting and condition, and the spinner gone afterwards. No timing is checked."""

from __future__ import annotations

import json
import os
import sys

import pytest
from host_processes import processes_with_argument

from tests.script_modules import load_script


@pytest.mark.slow
def test_every_setting_runs_quiet_and_busy_and_the_busy_job_ends(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench_threads")
    monkeypatch.delenv("EVOLVE_THREADS", raising=False)
    monkeypatch.setattr(sys, "argv", ["bench_threads.py", "--in-flight", "1", "--tokens", "4", "--rounds", "1"])
    bench.main()
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    settings = {"chosen", *bench.thread_candidates(len(os.sched_getaffinity(0)))}
    assert sorted((row["condition"], str(row["threads"])) for row in rows) == sorted(
        (condition, str(setting)) for condition in ("quiet", "busy") for setting in settings)
    assert all(row["tokens"] == 4 for row in rows)
    assert processes_with_argument(bench.SPIN) == []
    assert "x best fixed" in out


def test_a_fixed_thread_count_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_script("bench_threads")
    monkeypatch.setenv("EVOLVE_THREADS", "1")
    monkeypatch.setattr(sys, "argv", ["bench_threads.py"])
    with pytest.raises(SystemExit, match="EVOLVE_THREADS"):
        bench.main()
