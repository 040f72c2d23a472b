"""scripts/study/store_pack.py: a store packed while a run writes to it is one consistent state, and unpacking never
replaces a local store that holds as much (what pilot.sh and study.sh rely on between machines)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from evolve.store.program_store import AttemptRecord, ProgramStore

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "study" / "store_pack.py"


def script_module(name: str) -> ModuleType:
    """scripts/NAME.py as a module, importing its neighbours as it does when run as a script."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


store_pack = script_module("store_pack")


def _answer(store: ProgramStore, run_id: int, iteration: int) -> None:
    store.record_iteration(run_id, iteration, [AttemptRecord("policy_call", "stop", prompt="p", completion="c",
                                                             latency_s=0.1, prompt_tokens=5, completion_tokens=3)])


def test_a_store_packed_while_open_unpacks_whole_and_only_over_a_store_holding_less(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    store = ProgramStore(str(db))
    run_id = store.create_run(name="r", problem="p", policy="x", seed=0, config_json="{}", iterations_target=9)
    for iteration in range(1, 4):
        _answer(store, run_id, iteration)  # committed into the WAL, the store still open
    packed = tmp_path / "live.db.xz"
    store_pack.pack(db, packed)
    _answer(store, run_id, 4)  # the run goes on after the snapshot

    fresh = tmp_path / "fresh" / "live.db"
    fresh.parent.mkdir()
    assert store_pack.unpack(packed, fresh) and store_pack.attempts(fresh) == 3  # a fresh machine: the snapshot
    assert not store_pack.unpack(packed, db) and store_pack.attempts(db) == 4  # the live store holds more: kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "live.db", "live.db-shm", "live.db-wal",
                                                         "live.db.xz"]  # no staging file left

    behind = tmp_path / "behind.db"
    older = ProgramStore(str(behind))
    older_run = older.create_run(name="r", problem="p", policy="x", seed=0, config_json="{}", iterations_target=9)
    _answer(older, older_run, 1)
    assert store_pack.unpack(packed, behind) and store_pack.attempts(behind) == 3  # the packed one holds more
    assert [run.name for run in ProgramStore(str(behind), mode="read").list_runs()] == ["r"]


def test_the_pilot_status_counts_answers_cells_and_the_most_left(tmp_path: Path) -> None:
    import subprocess

    db = tmp_path / "pilot.db"
    store = ProgramStore(str(db))
    done = store.create_run(name="a", problem="p", policy="x", seed=0, config_json="{}", iterations_target=100)
    for iteration in range(1, 3):
        _answer(store, done, iteration)
    store.set_run_status(done, "finished")
    going = store.create_run(name="b", problem="q", policy="x", seed=0, config_json="{}", iterations_target=100)
    _answer(store, going, 1)
    design = tmp_path / "pilot.toml"
    design.write_text('problems = ["p", "q"]\nseeds = [100, 101]\n')
    out = subprocess.run([sys.executable, str(SCRIPT.parent / "pilot_status.py"), str(db), str(design)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "3 answers in 0.0 hours of running; cells: 1 finished, 1 running"
    assert out[1].startswith("3 of 4 cells unfinished: at most 899 answers left; ")  # 3 x 300 less the running 1


def test_the_pilots_pace_is_measured_since_its_last_pause_not_across_it() -> None:
    status = script_module("pilot_status")
    steady = [minute / 2 for minute in range(21)]  # 2 answers a minute for 10 minutes
    assert status.answers_a_minute(steady) == 2.0
    assert status.answers_a_minute([-20.0, -19.5, *steady]) == 2.0  # the last piece, not the one before the stop
    assert status.answers_a_minute([]) == 0.0 and status.answers_a_minute([3.0]) == 0.0
    burst = [-20.0, -19.5, 0.0, 0.0, 0.0, 0.01, 0.02]  # a resumed piece's first seconds: no pace yet, not 300 a minute
    assert status.answers_a_minute(burst) == 0.0


def test_the_pilots_running_time_leaves_out_the_stops_between_pieces() -> None:
    status = script_module("pilot_status")
    piece = [minute / 2 for minute in range(21)]  # 10 minutes of answers
    assert status.active_hours(piece) == 10 / 60
    assert status.active_hours([*piece, *(600 + minute for minute in piece)]) == 20 / 60  # a 10-hour stop between
    assert status.active_hours([]) == 0.0
