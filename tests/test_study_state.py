"""evolve/study/state.py: study_state.json sums the seconds per stage over invocations, and `--status` beside a
running study counts the stages under way up to now, but not what a dead process or another machine left there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.study.plan import StudyPaths
from evolve.study.state import StudyError, StudyState, is_alive, this_process


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _paths(tmp_path: Path) -> StudyPaths:
    folder = tmp_path / "study"
    return StudyPaths(folder, str(folder / "study.db"))


def test_a_reader_counts_the_stage_under_way_up_to_now(tmp_path: Path) -> None:
    paths, clock = _paths(tmp_path), FakeClock()
    writer = StudyState(paths, clock=clock)
    writer.data["seconds"] = {"train": 500.0}
    with writer.timed("train"), writer.timed("train/vpo-t1"):
        clock.now += 120
        reader = StudyState(paths, read_only=True, clock=clock)
        assert reader.seconds == {"train": 500.0}
        live = reader.seconds_now()
        assert live["train"] == pytest.approx(620.0) and live["train/vpo-t1"] == pytest.approx(120.0)
        assert writer.seconds_now()["train"] == pytest.approx(620.0)
    done = json.loads(paths.state.read_text())
    assert "running" not in done and set(done["seconds"]) == {"train", "train/vpo-t1"}
    assert StudyState(paths, read_only=True, clock=clock).seconds_now() == done["seconds"]


def test_what_a_dead_process_left_under_way_is_not_counted(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    paths.folder.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    owner = this_process() | {"pid": int(dead.stdout)}
    paths.state.write_text(json.dumps({"db": paths.db, "seconds": {"train": 10.0},
                                       "running": {"owner": owner, "since": {"train": 0.0}}}))
    assert not is_alive(owner)
    assert StudyState(paths, read_only=True).seconds_now() == {"train": 10.0}


def test_what_another_machine_left_under_way_is_not_counted(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    paths.folder.mkdir()
    owner = this_process() | {"host": "another-machine"}  # this pid is alive here, but names a process there
    paths.state.write_text(json.dumps({"db": paths.db, "seconds": {},
                                       "running": {"owner": owner, "since": {"evolve": 0.0}}}))
    assert StudyState(paths, read_only=True).seconds_now() == {}


def test_a_new_invocation_drops_what_a_killed_one_left_under_way(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    paths.folder.mkdir()
    paths.state.write_text(json.dumps({"db": paths.db, "seconds": {"train": 10.0},
                                       "running": {"owner": {"pid": -1}, "since": {"train": 0.0}}}))
    state = StudyState(paths)
    with state.timed("sample"):
        running = json.loads(paths.state.read_text())["running"]
        assert running["owner"]["pid"] == this_process()["pid"] and set(running["since"]) == {"sample"}
    assert json.loads(paths.state.read_text())["seconds"]["train"] == 10.0


def test_an_interrupted_stage_keeps_its_seconds_and_leaves_nothing_under_way(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    state = StudyState(paths)
    with pytest.raises(KeyboardInterrupt), state.timed("train"):
        raise KeyboardInterrupt
    data = json.loads(paths.state.read_text())
    assert "train" in data["seconds"] and "running" not in data


def test_a_study_run_with_another_store_is_refused(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    StudyState(paths)
    with pytest.raises(StudyError, match="run it with --db"):
        StudyState(StudyPaths(paths.folder, str(tmp_path / "other.db")))
