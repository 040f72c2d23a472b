"""Issue 62's pilot runner (scripts/study/training_pilots.py): the grid becomes configs `evolve train` reads, never
trains on a test problem, says which pilots are done, and judges them from their logs."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from tests.script_modules import SCRIPTS, load_script
from tests.test_training_takes import train_log

GRID = """
[common]
steps = 30
prompts_per_step = 4
group_size = 8
compute_dtype = "float32"

[sets]
train = [{{ file = "{train}" }}]
both = [{{ file = "{train}", take = 1 }}, {{ file = "{ceiling}", take = 2 }}]

[[pilot]]
name = "grpo_a"
algo = "grpo"
lr = 5e-5
entropy_coef = 1e-3
group_size = 12
set = "train"

[[pilot]]
name = "vpo_b"
algo = "vpo"
lr = 1e-5
entropy_coef = 0.0
set = "both"
"""


@pytest.fixture()
def pilots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = load_script("training_pilots")
    monkeypatch.setattr(module, "PILOTS", tmp_path / "pilots")
    monkeypatch.setattr(module, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(module, "TEST_LIST", tmp_path / "test_problems.txt")
    (tmp_path / "pilots").mkdir()
    return module


def grid(tmp_path: Path, train: list[str], ceiling: list[str]) -> Path:
    (tmp_path / "train.txt").write_text("# the train list\n" + "\n".join(train) + "\n")
    (tmp_path / "ceiling.txt").write_text("\n".join(ceiling) + "\n")
    path = tmp_path / "pilots" / "grid.toml"
    path.write_text(GRID.format(train=tmp_path / "train.txt", ceiling=tmp_path / "ceiling.txt"))
    return path


def test_each_pilot_becomes_a_config_evolve_train_reads_with_its_set_and_settings(pilots: ModuleType,
                                                                                 tmp_path: Path) -> None:
    from evolve.rl.train_config import TrainConfig

    path = grid(tmp_path, ["programs/generated/gl_d1_0001", "programs/generated/gl_d1_0002"],
                ["programs/generated/gl_d1_0001", "programs/generated/gl_d1_0009", "programs/generated/gl_d1_0004"])
    pilots.plan(path)
    grpo = TrainConfig.model_validate(tomllib.loads((path.parent / "grpo_a.toml").read_text()))
    assert (grpo.algo, grpo.lr, grpo.entropy_coef, grpo.steps, grpo.group_size) == ("grpo", 5e-5, 1e-3, 30, 12)
    assert grpo.compute_dtype == "float32" and grpo.out == str(tmp_path / "runs" / "grpo_a")
    assert grpo.problems == ("programs/generated/gl_d1_0001", "programs/generated/gl_d1_0002")
    vpo = TrainConfig.model_validate(tomllib.loads((path.parent / "vpo_b.toml").read_text()))
    assert vpo.group_size == 8  # the grid's common group size where a pilot sets none
    assert vpo.problems == ("programs/generated/gl_d1_0001", "programs/generated/gl_d1_0009")  # each file's first few
    assert pilots.grid_pilots(path)[1][1]["name"] == "vpo_b"


def test_a_grid_that_would_train_on_a_test_problem_is_refused(pilots: ModuleType, tmp_path: Path) -> None:
    path = grid(tmp_path, ["programs/generated/gl_d1_0001"], ["programs/generated/gl_d2ee_0003", "x"])
    (tmp_path / "test_problems.txt").write_text("programs/generated/gl_d2ee_0003\n")
    with pytest.raises(SystemExit, match="vpo_b: trains on test problems programs/generated/gl_d2ee_0003"):
        pilots.plan(path)


def test_a_list_not_written_yet_names_the_step_that_writes_it(pilots: ModuleType, tmp_path: Path) -> None:
    path = grid(tmp_path, ["programs/generated/gl_d1_0001"], [])
    (tmp_path / "train.txt").unlink()
    with pytest.raises(SystemExit, match="not written yet.*generated_calibration.py select"):
        pilots.plan(path)


def test_the_committed_grid_builds_valid_pilots_with_distinct_names(pilots: ModuleType,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    committed = SCRIPTS.parent / "experiments/training/pilots/grid.toml"
    data, grid_pilots = pilots.grid_pilots(committed)
    monkeypatch.setattr(pilots, "read_list",
                        lambda path: [f"programs/generated/{Path(path).stem}_{i}" for i in range(20)])
    monkeypatch.setattr(pilots, "by_ease", lambda names: names)  # no calibration store: the lists' own order
    names = [pilot["name"] for pilot in grid_pilots]
    assert len(names) == len(set(names)) and {p["algo"] for p in grid_pilots} == {"grpo", "vpo", "multi-rlvr"}
    for pilot in grid_pilots:
        config = pilots.pilot_config(data["common"], data["sets"], pilot, set())
        assert config.compute_dtype == "float32" and len(config.problems) == 12
        assert config.group_size * config.m == 12  # equal answers per prompt, whatever the algorithm
        visits = config.steps * config.prompts_per_step / len(config.problems)
        assert visits >= 4  # each problem's first and last quarter of visits are distinct visits


def test_a_pilot_is_new_then_resumable_then_finished(pilots: ModuleType, tmp_path: Path) -> None:
    assert pilots.state("grpo_a") == "new"
    (tmp_path / "runs" / "grpo_a" / "resume").mkdir(parents=True)
    assert pilots.state("grpo_a") == "new"  # stopped before its first step ended: nothing to resume
    (tmp_path / "runs" / "grpo_a" / "resume" / "state.pt").write_bytes(b"")
    assert pilots.state("grpo_a") == "resume"
    (tmp_path / "pilots" / "grpo_a").mkdir()
    (tmp_path / "pilots" / "grpo_a" / "train_log.jsonl").write_text("")
    assert pilots.state("grpo_a") == "finished"  # its curves are committed: a fresh machine does not run it again


def test_judge_reads_committed_and_running_pilots_and_names_the_recipe(pilots: ModuleType, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = grid(tmp_path, ["programs/generated/gl_d1_0001"], [])
    (tmp_path / "pilots" / "grpo_a").mkdir()
    (tmp_path / "pilots" / "grpo_a" / "train_log.jsonl").write_text(
        "".join(json.dumps(record) + "\n" for record in train_log()))
    (tmp_path / "runs" / "vpo_b").mkdir(parents=True)
    (tmp_path / "runs" / "vpo_b" / "train_log.jsonl").write_text(
        "".join(json.dumps(record) + "\n" for record in train_log(tokens=(300.0, 20.0))))
    pilots.judge(path)
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("grpo_a", "vpo_b"))}
    assert lines["grpo_a"].endswith("takes") and "x0.92" in lines["grpo_a"]
    assert "collapsed (running here, not committed)" in lines["vpo_b"]
    assert out.rstrip().endswith("the recipe (least KL of the committed pilots that take, p Holm-adjusted over the "
                                 "1 committed): grpo_a")


def test_a_set_asking_for_more_problems_than_its_list_holds_is_refused(pilots: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "short.txt").write_text("programs/generated/gl_d1_0001\n")
    with pytest.raises(SystemExit, match="short.txt: 1 problems, 4 asked for"):
        pilots.set_problems([{"file": str(tmp_path / "short.txt"), "take": 4}])


def test_the_ceiling_list_holds_programs_paths_of_ceiling_problems_on_no_list(pilots: ModuleType, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_calibration_select import pilot_store

    db = pilot_store(tmp_path / "piece_01.db", {
        ("gl_d1_0001", 100): 2, ("gl_d1_0001", 101): 3,  # cracked early in both cells: the ceiling
        ("gl_d1_0002", 100): 2, ("gl_d1_0002", 101): 3,  # the ceiling too, but a list's top-up took it
        ("gl_d1_0003", 100): 5, ("gl_d1_0003", 101): None,  # one cell of two: in band
        ("gl_d1_0004", 100): 1, ("gl_d1_0004", 101): "running"})  # not judged yet
    monkeypatch.setattr(pilots, "finished_stores", lambda: [db])
    monkeypatch.setattr(pilots, "CALIBRATION", tmp_path)
    monkeypatch.setattr(pilots, "TRAIN_LIST", tmp_path / "train_problems.txt")
    (tmp_path / "test_problems.txt").write_text("programs/generated/gl_d1_0002\n")
    pilots.ceiling()
    assert (tmp_path / "ceiling_problems.txt").read_text() == "programs/generated/gl_d1_0001\n"


def test_a_spaced_set_spans_the_calibrations_ease_and_a_leak_is_found_whatever_the_prefix(
        pilots: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_calibration_select import pilot_store

    # eight problems, each cracked in one cell of two, at iterations 10, 20, ... 80: the later, the harder
    cells = {(f"gl_d1_{i:04d}", seed): (10 * i if seed == 100 else None) for i in range(1, 9) for seed in (100, 101)}
    monkeypatch.setattr(pilots, "finished_stores", lambda: [pilot_store(tmp_path / "piece_01.db", cells)])
    listed = tmp_path / "train.txt"
    listed.write_text("".join(f"programs/generated/gl_d1_{i:04d}\n" for i in (1, 5, 2, 6, 3, 7, 4, 8)))
    spaced = pilots.set_problems([{"file": str(listed), "take": 2, "spaced": True}])
    assert spaced == ["programs/generated/gl_d1_0006", "programs/generated/gl_d1_0002"]  # hardest first: 8..1
    assert pilots.set_problems([{"file": str(listed), "take": 2}]) == ["programs/generated/gl_d1_0001",
                                                                       "programs/generated/gl_d1_0005"]
    bare = tmp_path / "bare.txt"
    bare.write_text("generated/gl_d1_0005\n")  # the same problem as the stores name it
    assert pilots.set_problems([{"file": str(listed), "take": 2}, {"file": str(bare)}]) == [
        "programs/generated/gl_d1_0001", "programs/generated/gl_d1_0005"]
    grid_data = {"set": "s", "name": "p", "algo": "grpo"}
    with pytest.raises(SystemExit, match="p: trains on test problems generated/gl_d1_0005"):
        pilots.pilot_config({}, {"s": [{"file": str(bare)}]}, grid_data, {"programs/generated/gl_d1_0005"})


def test_a_pilots_file_restates_the_grids_defaults_and_keeps_nested_settings(pilots: ModuleType,
                                                                              tmp_path: Path) -> None:
    from evolve.rl.train_config import TrainConfig

    listed = tmp_path / "train.txt"
    listed.write_text("programs/generated/gl_d1_0001\n")
    config = pilots.pilot_config({"group_size": 4, "temperature": 1.0, "lora": {"r": 8}},
                                 {"s": [{"file": str(listed)}]}, {"name": "p", "algo": "vpo", "set": "s"}, set())
    text = pilots.config_toml(config, "p")
    assert 'algo = "vpo"' in text and "group_size = 4" in text and "temperature = 1.0" in text  # defaults, restated
    assert TrainConfig.model_validate(tomllib.loads(text)).lora.r == 8
