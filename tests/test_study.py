"""`evolve study FILE`: the study file's checks (held-out test problems, equal training budgets counted in answers,
at least 2 training seeds for a study of methods, one line per mistake), the training section of its report, the
crack share per arm and training seed, and a tiny real study with SmolLM2 (2 algorithms x 2 training seeds) stopped
after its training stage and resumed without redoing or doubling anything."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evolve.config import ConfigError
from evolve.study.plan import load_study

ROOT = Path(__file__).resolve().parents[1]

STUDY = f"""
description = "tiny"
programs_dir = "{ROOT / 'programs'}"
test_problems = ["run_length"]

[training]
algorithms = ["vpo", "grpo", "multi-rlvr"]
problems = ["fizzbuzz"]
steps = 1
answers_per_prompt = 6
answers = 3

[training.settings]
max_new_tokens = 32
lr = 1e-4
threads = 1

[sampling]
answers = 2

[evolution]
iterations = 1
seeds = [0]
answers_per_iteration = 3
parallel_cells = 1

[evolution.run]
concurrency = 2
eval_workers = 2

[policy]
backend = "llamacpp"
max_new_tokens = 32
threads = 1
"""


def write(tmp_path: Path, text: str, name: str = "tiny.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_equal_budgets_give_each_algorithm_answers_per_prompt_over_m_completions(tmp_path: Path) -> None:
    from evolve.study.plan import train_configs

    spec = load_study(write(tmp_path, STUDY))
    budgets = {b.algo: b for b in spec.budgets()}
    assert {algo: (b.m, b.group_size) for algo, b in budgets.items()} == {"vpo": (3, 2), "grpo": (1, 6),
                                                                           "multi-rlvr": (3, 2)}
    assert {b.total_answers for b in budgets.values()} == {6}
    configs = train_configs(spec, tmp_path / "study")
    for name, config in configs.items():
        assert config.group_size * config.m == 6 and config.steps == 1 and config.prompts_per_step == 1
        assert config.out == str(tmp_path / "study" / "checkpoints" / name)
        assert config.lr == 1e-4 and config.max_new_tokens == 32  # [training.settings] passed through
    assert spec.policy_answers() == {"base": 1, "vpo-t0": 3, "vpo-t1": 3, "grpo-t0": 1, "grpo-t1": 1,
                                     "multi-rlvr-t0": 3, "multi-rlvr-t1": 3}


def test_each_algorithm_trains_one_checkpoint_per_training_seed_and_each_is_evolved_everywhere(
        tmp_path: Path) -> None:
    from evolve.study.plan import StudyPaths, experiment_spec, train_configs

    text = STUDY.replace("answers = 3\n", "answers = 3\nseeds = [3, 5, 8]\n").replace("seeds = [0]", "seeds = [0, 1]")
    spec = load_study(write(tmp_path, text))
    configs = train_configs(spec, tmp_path / "study")
    assert {name: (config.algo, config.seed) for name, config in configs.items()} == {
        f"{algo}-t{seed}": (algo, seed) for algo in ("vpo", "grpo", "multi-rlvr") for seed in (3, 5, 8)}
    assert len({config.out for config in configs.values()}) == 9
    experiment = experiment_spec(spec, StudyPaths.of(spec, tmp_path / "study"))
    assert len(experiment.cells()) == 10 * 2  # (base + 9 checkpoints) x 1 test problem x 2 evolution seeds
    assert experiment.policy("grpo-t5").model == str(tmp_path / "study" / "checkpoints" / "grpo-t5" / "final")
    assert spec.arms()["vpo"] == [(3, "vpo-t3"), (5, "vpo-t5"), (8, "vpo-t8")]
    one = load_study(write(tmp_path, STUDY.replace("answers = 3\n", "answers = 3\nseeds = [4]\n")
                           .replace('description = "tiny"', 'description = "tiny"\nclaim = "checkpoints"')))
    assert list(train_configs(one, tmp_path / "one")) == ["vpo-t4", "grpo-t4", "multi-rlvr-t4"]


def test_split_checkpoint_seeds_give_each_algorithms_seeds_to_its_checkpoints_in_turn(tmp_path: Path) -> None:
    from evolve.study.plan import StudyPaths, experiment_spec

    text = STUDY.replace("seeds = [0]", "seeds = [0, 1, 2, 3, 4]\ncheckpoint_seeds = \"split\"")
    spec = load_study(write(tmp_path, text))
    experiment = experiment_spec(spec, StudyPaths.of(spec, tmp_path / "study"))
    for algo in ("vpo", "grpo", "multi-rlvr"):
        assert (experiment.seeds_of(f"{algo}-t0"), experiment.seeds_of(f"{algo}-t1")) == ((0, 2, 4), (1, 3))
    assert experiment.seeds_of("base") == (0, 1, 2, 3, 4)
    assert len(experiment.cells()) == (1 + 3) * 5  # every arm one cell per test problem and seed
    assert len(experiment_spec(load_study(write(tmp_path, STUDY.replace("seeds = [0]", "seeds = [0, 1, 2, 3, 4]"))),
                               StudyPaths.of(spec, tmp_path / "all")).cells()) == (1 + 6) * 5


def test_a_studys_cells_run_seed_by_seed_so_a_study_cut_short_has_paired_every_arm(tmp_path: Path) -> None:
    from evolve.study.plan import StudyPaths, experiment_spec

    text = STUDY.replace("seeds = [0]", "seeds = [0, 1, 2]\ncheckpoint_seeds = \"split\"")
    spec = load_study(write(tmp_path, text))
    cells = experiment_spec(spec, StudyPaths.of(spec, tmp_path / "study")).cells()
    first_seed = cells[:cells.index(next(cell for cell in cells if cell[2] == 1))]
    assert {arm for _problem, arm, _seed in first_seed} == {"base", "vpo-t0", "grpo-t0", "multi-rlvr-t0"}
    assert [seed for _problem, _arm, seed in cells] == sorted(seed for _problem, _arm, seed in cells)


@pytest.mark.parametrize(("change", "expected"), [
    (("seeds = [0]", "seeds = [0]\ncheckpoint_seeds = \"split\""),
     "evolution.checkpoint_seeds = \"split\" shares 1 evolution seed among 2 training seeds: some checkpoint would "
     "get none; give at least 2 evolution seeds"),
    (("seeds = [0]", "seeds = [0]\ncheckpoint_seeds = \"half\""), "invalid value for 'evolution.checkpoint_seeds'"),
    (("test_problems = [\"run_length\"]", "test_problems = [\"run_length\", \"fizzbuzz\"]"),
     "training.problems and test_problems must not overlap (the test problems are held out); in both: fizzbuzz"),
    (("test_problems = [\"run_length\"]", f"test_problems = [\"{ROOT / 'programs' / 'fizzbuzz'}\"]"),
     "must not overlap"),
    (("answers_per_prompt = 6", "answers_per_prompt = 4"),
     "training.answers_per_prompt = 4 must be a multiple of m = 3 (vpo)"),
    (("answers_per_prompt = 6", "answers_per_prompt = 3"), "at least 2 * m"),
    (("steps = 1", "stepz = 1"), "unknown key 'training.stepz'"),
    (("lr = 1e-4", "group_size = 4"), "training.settings may not set group_size"),
    (("lr = 1e-4", "lr = -1.0"), "training.settings (vpo): invalid value for 'lr'"),
    (("lr = 1e-4", "lorra = 1"), "training.settings (vpo): unknown key 'lorra'"),
    (("backend = \"llamacpp\"", "backend = \"hf\"\nmodel = \"x\""), "[policy] may not set model"),
    (("backend = \"llamacpp\"", "backend = \"gpu\""), "policy.backend 'gpu' is none of hf, llamacpp, vllm, openai"),
    (("backend = \"llamacpp\"", "backend = \"vllm\""), "policy.threads is an hf or llamacpp setting; this policy's backend is vllm"),
    (("answers_per_iteration = 3", "answers_per_iteration = 2"),
     "evolution.answers_per_iteration = 2 is not a multiple of policy 'vpo''s m = 3"),
    (("algorithms = [\"vpo\", \"grpo\", \"multi-rlvr\"]", "algorithms = [\"vpo\", \"ppo\"]"),
     "invalid value for 'training.algorithms.1'"),
    (("answers = 3\n", "answers = 3\nseeds = [0]\n"),
     "training.seeds = [0] trains one checkpoint per algorithm, so the study would compare those checkpoints, not the "
     "methods; give at least 2 training seeds (e.g. [0, 1]), or set claim = \"checkpoints\""),
    (("answers = 3\n", "answers = 3\nseed = 0\n"), "training.seed is now training.seeds = [0, ...]"),
    (("answers = 3\n", "answers = 3\nseeds = [1, 1]\n"), "training.seeds must be distinct; repeated: 1"),
    (('description = "tiny"', 'description = "tiny"\nclaim = "methodz"'), "invalid value for 'claim'"),
])
def test_each_mistake_in_a_study_file_is_one_line(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    old, new = change
    assert old in STUDY
    path = write(tmp_path, STUDY.replace(old, new, 1))
    with pytest.raises(ConfigError) as caught:
        load_study(path)
    message = str(caught.value)
    assert expected in message and "\n" not in message and message.startswith(str(path))


def test_the_command_prints_a_bad_study_file_as_one_line_and_exits_2(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path = write(tmp_path, STUDY.replace("iterations = 1", "iterations = 0"))
    assert main(["study", str(path), "--out", str(tmp_path / "s")]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("config error:") and "evolution.iterations" in out and len(out.splitlines()) == 1
    assert main(["study", str(tmp_path / "missing.toml")]) == 2
    assert "file not found" in capsys.readouterr().out


def test_a_fresh_study_has_every_stage_to_do_and_keeps_to_its_store(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path = write(tmp_path, STUDY)
    folder = tmp_path / "study"
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    out = capsys.readouterr().out
    for line in ("1. train   to do    0/6 training runs (3 algorithms x 2 training seeds): vpo-t0 0/1 steps, vpo-t1 "
                 "0/1 steps, grpo-t0 0/1 steps, grpo-t1 0/1 steps, multi-rlvr-t0 0/1 steps, multi-rlvr-t1 0/1 steps",
                 "2. sample  to do    0/7 (policy, problem) runs of 2 answers",
                 "3. evolve  to do    0/7 cells finished (0 started)", "4. report  to do",
                 "left: no pace yet for train, sample, evolve"):
        assert line in out
    assert not folder.exists()  # --status only reads: no folder, state file or store is made
    folder.mkdir()
    (folder / "study_state.json").write_text(json.dumps({"db": str(folder / "study.db"), "seconds": {}}))  # as a run
    assert main(["study", str(path), "--out", str(folder), "--db", str(tmp_path / "other.db"), "--status"]) == 1
    assert f"this study's store is {folder / 'study.db'}" in capsys.readouterr().out
    assert main(["study", str(path), "--out", str(folder), "--report-so-far"]) == 1
    out = capsys.readouterr().out
    assert "no interim report before its training and sampling are done" in out and len(out.splitlines()) == 1
    assert not (folder / "report").exists()


def test_a_study_moved_from_where_it_started_says_where_to_put_it_back(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path = write(tmp_path, STUDY)
    folder = tmp_path / "elsewhere" / "study"  # a lease's pack unpacked here; it ran in tmp_path/stage/study
    folder.mkdir(parents=True)
    (folder / "study.db").touch()
    started = tmp_path / "stage" / "study"
    (folder / "study_state.json").write_text(json.dumps({"db": str(started / "study.db"), "seconds": {}}))
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 1
    assert f"this study was moved from {started}" in capsys.readouterr().out


def test_the_time_left_of_a_stage_follows_the_pace_it_has_kept() -> None:
    from evolve.study.pipeline import format_duration, time_left

    assert time_left(600.0, 0.25) == pytest.approx(1800.0)  # a quarter done in 10 min: 30 min to go
    assert time_left(None, 0.5) is None and time_left(600.0, 0.0) is None and time_left(600.0, 1.0) is None
    assert (format_duration(1800.0), format_duration(5400.0), format_duration(20.0)) == ("30 min", "1 h 30 min",
                                                                                         "1 min")


def test_training_time_left_is_the_steps_to_go_at_the_median_of_the_latest_steps(tmp_path: Path) -> None:
    import os
    from types import SimpleNamespace

    from evolve.study.training_stage import training_seconds_left

    def run(name: str, seconds: list[float], steps: int = 10, written: float = 0.0) -> SimpleNamespace:
        out = tmp_path / name
        out.mkdir()
        log = out / "train_log.jsonl"
        log.write_text("".join(json.dumps({"step": i + 1, "seconds": s}) + "\n" for i, s in enumerate(seconds))
                       + '{"step": 99, "seco')  # a torn last line, as a kill mid-write leaves it
        os.utime(log, (written, written))
        return SimpleNamespace(out=str(out), steps=steps)

    assert training_seconds_left([run("fresh", [])]) is None
    # a finished run (older log) and one under way: its slow first steps and the older run's pace do not count
    done = run("vpo-t0", [900.0] * 10, written=1_000.0)
    under_way = run("vpo-t1", [1500.0, 700.0, 400.0, 380.0, 420.0, 390.0, 410.0, 400.0], written=2_000.0)
    todo = run("grpo-t0", [], written=3_000.0)
    seconds, steps_timed = training_seconds_left([done, under_way, todo])  # type: ignore[misc]
    assert (seconds, steps_timed) == (pytest.approx((2 + 10) * 400.0), 5)
    started = run("grpo-t1", [600.0, 500.0], written=4_000.0)
    assert training_seconds_left([started]) == (pytest.approx(8 * 550.0), 2)


def test_the_status_says_how_many_steps_the_training_pace_is_the_median_of(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from evolve.policies.provenance import TRAIN_CONFIG_FILE
    from evolve.rl.checkpoints import STATE_FILE
    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths

    path = write(tmp_path, STUDY.replace("steps = 1\n", "steps = 10\n"))
    spec = load_study(path)
    text = io.StringIO()
    reader = Study(spec, StudyPaths.of(spec, tmp_path / "study"), Console(file=text, width=300), source=str(path),
                   read_only=True)
    config = reader.train_configs["vpo-t0"]  # two steps in, as a stopped piece leaves it
    out = Path(config.out)
    (out / STATE_FILE).parent.mkdir(parents=True)
    (out / STATE_FILE).touch()
    (out / TRAIN_CONFIG_FILE).write_text(config.model_dump_json())
    (out / "train_log.jsonl").write_text("".join(json.dumps({"step": i, "seconds": s}) + "\n"
                                                 for i, s in ((1, 600.0), (2, 500.0))))
    reader.print_statuses(reader.statuses())
    printed = text.getvalue()
    # 58 steps to go (vpo-t0 8, five runs 10 each) at 550 s
    assert "vpo-t0 2/10 steps, vpo-t1 0/10 steps" in printed, printed
    assert "about 8 h 52 min left at the median of the latest 2 steps" in printed, printed


def test_a_study_refuses_a_base_trained_on_its_test_problems_or_unverified_before_training(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from evolve.policies.provenance import TrainingProvenance, stamp_checkpoint
    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths

    base = tmp_path / "sft"  # a checkpoint folder as `evolve train` stamps it (the guard reads, never loads it)
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "llama"}')
    (base / "model.safetensors").write_bytes(b"weights")
    stamp_checkpoint(base, TrainingProvenance(problems=("run_length",), algo="grpo", steps=3))
    path = write(tmp_path, STUDY.replace('description = "tiny"', f'description = "tiny"\nbase = "{base}"'))
    folder = tmp_path / "study"
    assert main(["study", str(path), "--out", str(folder)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"study tiny: its base {base} was trained on test problems of study tiny: run_length" in out
    assert not (folder / "checkpoints").exists()

    stamp_checkpoint(base, TrainingProvenance(problems=("lis",), algo="grpo", steps=3))
    (base / "evolve_training.json").unlink()
    assert main(["study", str(path), "--out", str(folder)]) == 2
    assert "is unverified: it has no evolve_training.json" in " ".join(capsys.readouterr().out.split())
    allowed = load_study(write(tmp_path, STUDY.replace('description = "tiny"', f'description = "tiny"\nbase = '
                                                       f'"{base}"\nallow_unverified_checkpoint = true'), "ok.toml"))
    Study(allowed, StudyPaths.of(allowed, folder)).refuse_a_base_trained_on_tests()


def test_training_curves_and_their_section_come_from_the_step_records() -> None:
    from evolve.report.study_report import training_curves, training_section_html, with_training_section

    records = [{"step": 1, "reward": 0.2, "kl": 0.0, "diversity": 1.0, "entropy": 1.5, "scored_answers": 0.5,
                "tokens": 90, "seconds": 3.0, "reward_objectives": {"fizzbuzz": [0.0, 1.0]}},
               {"step": 2, "reward": 0.6, "kl": 0.01, "diversity": 0.5, "entropy": 1.2, "scored_answers": 1.0,
                "tokens": 80, "seconds": 2.0, "reward_objectives": {"lis": [0.5]}}]
    curves = training_curves("vpo", records, {"fizzbuzz": ("t0", "t1"), "lis": ("a",)})
    assert curves.steps == (1, 2) and curves.reward == (0.2, 0.6) and curves.kl == (0.0, 0.01)
    assert curves.reward_objectives["fizzbuzz"]["t1"][0] == 1.0 and math.isnan(curves.reward_objectives["fizzbuzz"]
                                                                               ["t1"][1])
    budget = {"algo": "vpo", "m": 3, "group_size": 2, "answers_per_prompt": 6, "prompts_per_step": 1, "steps": 2,
              "total_answers": 12}
    section = training_section_html([curves], [budget])
    for name in ("reward", "kl", "diversity", "entropy"):
        assert f'data-training="{name}"' in section
    assert "<td>fizzbuzz</td><td>t1</td>" in section and "1.000 &rarr; &ndash;" not in section
    page = with_training_section("<main><h1>x</h1><footer>f</footer></main>", section)
    assert page.index('id="training"') < page.index("<footer>")


@pytest.mark.slow
def test_a_tiny_real_study_stopped_after_training_resumes_without_redoing_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from evolve.policies.provenance import inspect_checkpoint
    from evolve.store.program_store import ProgramStore

    text = STUDY.replace('algorithms = ["vpo", "grpo", "multi-rlvr"]', 'algorithms = ["vpo", "grpo"]')
    text = text.replace("answers_per_prompt = 6", "answers_per_prompt = 4").replace("answers = 3\n", "answers = 2\n")
    text = text.replace("answers_per_iteration = 3", "answers_per_iteration = 2")
    path = write(tmp_path, text)
    folder = tmp_path / "study"
    command = ["study", str(path), "--out", str(folder)]
    names = ("vpo-t0", "vpo-t1", "grpo-t0", "grpo-t1")  # 2 algorithms x the default training seeds [0, 1]
    assert main([*command, "--until", "train"]) == 0
    out = capsys.readouterr().out
    assert "train vpo (training seed 1) -> vpo-t1: starting; 2 completions x m = 2 = 4 answers per prompt" in out
    assert "4 completions x m = 1 = 4 answers" in out
    finals = {name: folder / "checkpoints" / name / "final" / "model.safetensors" for name in names}
    stamps = {name: final.stat().st_mtime_ns for name, final in finals.items()}
    adapters = {name: final.parent / "adapter" / "adapter_model.safetensors" for name, final in finals.items()}
    # each training seed its own checkpoint: LoRA A starts from the seed (one step may leave B, hence the merged
    # weights, at the base's when no group had a reward spread)
    assert adapters["vpo-t0"].read_bytes() != adapters["vpo-t1"].read_bytes()
    for name in names:
        check = inspect_checkpoint(finals[name].parent)
        assert check is not None and check.unverified == "" and check.provenance is not None
        assert (check.provenance.seed, check.provenance.held_out) == (int(name[-1]), ("run_length",))
    assert main([*command, "--status"]) == 0
    out = capsys.readouterr().out
    assert "1. train   done     4/4 training runs (2 algorithms x 2 training seeds): vpo-t0 1/1 steps" in out
    assert "2. sample  to do    0/5 (policy, problem) runs" in out

    # a fresh machine gets the study as scripts/study.sh commits it: grpo-t1's merged weights left out
    merged = finals["grpo-t1"].read_bytes()
    finals["grpo-t1"].unlink()
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "train: done, skipped" in out and "train vpo" not in out
    assert f"rebuilt {finals['grpo-t1']} from its adapter" in out and finals["grpo-t1"].read_bytes() == merged
    assert {name: final.stat().st_mtime_ns for name, final in finals.items() if name != "grpo-t1"} == \
        {name: stamp for name, stamp in stamps.items() if name != "grpo-t1"}
    report = json.loads((folder / "report" / "study_report.json").read_text())
    assert set(report["evolution"]["cracked"]) == {"base", *names}
    for policy in ("base", *names):
        cracked = report["evolution"]["cracked"][policy]
        assert cracked["problems"] == 1 and cracked["per_problem"]["run_length"]["seeds_run"] == 1
        assert report["sampling"][policy]["run_length"]["n"] == 2
    for name in names:
        curve = report["training_curves"][name]
        assert curve["steps"] == [1] and 0.0 <= curve["reward"][0] <= 1.0
        assert len(curve["reward_objectives"]["fizzbuzz"]) == 20
    assert [b["total_answers"] for b in report["training_budgets"]] == [4, 4]
    assert report["claim"] == "methods" and report["training_seeds"] == [0, 1]
    for algo in ("vpo", "grpo"):
        arm = report["arms"][algo]
        assert arm["policies"] == [f"{algo}-t0", f"{algo}-t1"] and set(arm["per_training_seed"]) == {"0", "1"}
        assert all(seed["cells"] == 1 and seed["crack_share"] in (0.0, 1.0)
                   for seed in arm["per_training_seed"].values())
        assert arm["spread"]["training_seeds"] == 2 and arm["pooled"]["cells"] == 2
    page = (folder / "report" / "report.html").read_text()
    assert 'id="training"' in page and f"<h1>Study {report['study']}</h1>" in page
    figures = {path.name for path in (folder / "report" / "figures").iterdir()}
    assert {"cracked_share-iterations.svg", "best_score-iterations-run_length.svg", "training-reward.svg"} <= figures

    store = ProgramStore(str(folder / "study.db"), mode="read")
    before = [(run.id, run.name, store.count_programs(run.id), run.status) for run in store.list_runs()]
    assert len(before) == 10 and all(status == "finished" for *_, status in before)  # 5 sampled + 5 evolved
    assert main(command) == 0
    out = capsys.readouterr().out
    assert all(f"{stage}: done, skipped" in out for stage in ("train", "sample", "evolve", "report"))
    after = ProgramStore(str(folder / "study.db"), mode="read")
    assert [(run.id, run.name, after.count_programs(run.id), run.status) for run in after.list_runs()] == before


def test_a_partly_trained_algorithm_is_partial_and_resumes_only_with_its_own_settings(tmp_path: Path) -> None:
    from evolve.policies.provenance import TRAIN_CONFIG_FILE
    from evolve.rl.checkpoints import STATE_FILE
    from evolve.study.plan import train_configs
    from evolve.study.state import StudyError
    from evolve.study.training_stage import TrainingRunStatus, refuse_changed_training, training_status

    spec = load_study(write(tmp_path, STUDY.replace("steps = 1", "steps = 4")))
    config = train_configs(spec, tmp_path / "study")["vpo-t0"]
    out = Path(config.out)
    assert training_status(config) == TrainingRunStatus("to do", 0, 4)
    (out / STATE_FILE).parent.mkdir(parents=True)
    (out / STATE_FILE).write_bytes(b"")  # what a run killed after step 2 leaves: its state and 2 log lines
    (out / "train_log.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    with pytest.raises(StudyError, match=f"holds a partial training but not its {TRAIN_CONFIG_FILE}"):
        training_status(config)  # a state whose settings were lost is refused, not resumed blind
    (out / TRAIN_CONFIG_FILE).write_text(config.model_copy(update={"threads": 7}).model_dump_json())
    assert training_status(config) == TrainingRunStatus("partial", 2, 4)
    refuse_changed_training(config)  # threads may change between pieces
    (out / TRAIN_CONFIG_FILE).write_text(config.model_copy(update={"lr": 0.5}).model_dump_json())
    with pytest.raises(StudyError, match=r"other settings \(lr 0.5 -> 0.0001\); restore the study file"):
        training_status(config)
    (out / "final").mkdir()  # finished: a changed study file is refused too, not served the old checkpoint
    (out / "final" / "evolve_training.json").write_text('{"problems": ["fizzbuzz"], "algo": "vpo", "steps": 4}')
    with pytest.raises(StudyError, match="other settings"):
        training_status(config)
    (out / TRAIN_CONFIG_FILE).write_text(config.model_dump_json())
    assert training_status(config) == TrainingRunStatus("done", 4, 4)


def test_long_training_curves_are_drawn_as_moving_means_with_their_range() -> None:
    from evolve.report.study_report import moving, smoothing_window

    assert smoothing_window(10) == 1 and smoothing_window(300) == 15
    mean, low, high = moving((0.0, 1.0, float("nan"), 0.5), 2)
    assert mean == [0.0, 0.5, 1.0, 0.5] and low == [0.0, 0.0, 1.0, 0.5] and high == [0.0, 1.0, 1.0, 0.5]


def test_an_interim_report_never_passes_for_the_report_stage_done(tmp_path: Path) -> None:
    from evolve.study.pipeline import _final_report

    report = tmp_path / "study_report.json"
    assert not _final_report(report)  # none yet
    report.write_text(json.dumps({"study": "s", "interim": {"seeds": [0], "cells_counted": 90, "cells": 450}}))
    assert not _final_report(report)  # --report-so-far wrote it: the report stage still has its turn
    report.write_text(json.dumps({"study": "s", "interim": None}))
    assert _final_report(report)
    report.write_text("{")
    assert not _final_report(report)


def test_status_says_which_evolution_seeds_every_arm_has_finished_and_which_batch_is_under_way(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path, folder, _ = started_study(tmp_path, cells=8)  # seed 0 of all 7 arms, then the base's seed 1, under way
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    assert ("3. evolve  partial  7/14 cells finished (8 started); every arm has finished seed 0 (1 of 2 seeds); "
            "under way: base seed 1 (0/1 cells)" in capsys.readouterr().out)


def started_study(tmp_path: Path, cells: int = 7) -> tuple[Path, Path, list[int]]:
    """A study file (7 arms, seeds 0 and 1), its folder, and its store with the first `cells` cells made by hand (no
    model), those of seed 0 finished: the run ids."""
    from evolve.store.program_store import ProgramStore
    from evolve.study.plan import StudyPaths, experiment_spec

    path = write(tmp_path, STUDY.replace("seeds = [0]", "seeds = [0, 1]"))
    folder = tmp_path / "study"
    spec = load_study(path)
    experiment = experiment_spec(spec, StudyPaths.of(spec, folder))
    folder.mkdir()
    store = ProgramStore(experiment.db)
    store.save_experiment(experiment.name, experiment.model_dump_json())
    run_ids = []
    for problem, arm, seed in experiment.cells()[:cells]:
        config = experiment.cell_config(problem, arm, seed)
        run_ids.append(store.create_run(config.run.name, problem, arm, seed, config.model_dump_json(), 1,
                                        experiment.name))
        if seed == 0:
            store.set_run_status(run_ids[-1], "finished")
    return path, folder, run_ids


def test_redone_cells_leave_the_study_keep_their_runs_and_are_named_with_their_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from evolve.engine.experiment import ExperimentRunner
    from evolve.report.study_markdown import results_markdown
    from evolve.store.program_store import ProgramStore
    from evolve.study.plan import StudyPaths, experiment_spec
    from evolve.study.report_stage import redone_cells
    from evolve.study.state import StudyState

    path, folder, run_ids = started_study(tmp_path)
    redo = run_ids[1]
    assert main(["study", str(path), "--out", str(folder), "--redo", str(redo), "--reason", "refused requests"]) == 0
    assert "1 cell to run again" in capsys.readouterr().out
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    assert "3. evolve  partial  6/14 cells finished (6 started); no seed finished by every arm yet" in \
        capsys.readouterr().out
    spec = load_study(path)
    experiment = experiment_spec(spec, StudyPaths.of(spec, folder))
    store = ProgramStore(experiment.db)
    kept = store.get_run(redo)
    assert kept.status == "finished" and kept.name.endswith("~redone-1")  # the first run stays, renamed
    runner = ExperimentRunner(experiment)
    runner.load_stored_cells()
    again = [cell for cell in runner.cells.values() if cell.key[2] == 0 and cell.run_id is None]
    assert [(cell.key, cell.status) for cell in again] == [((kept.problem, kept.policy, 0), "waiting")]
    records = redone_cells(StudyPaths.of(spec, folder))
    assert [(r["run_id"], r["policy"], r["status"], r["reason"]) for r in records] == [
        (redo, kept.policy, "finished", "refused requests")]
    assert f"1 evolution cell run again ({kept.policy} seed 0; the first runs kept in the store as NAME~redone-K): " \
        "refused requests" in results_markdown({"redone": records})
    StudyState(StudyPaths.of(spec, folder)).save()  # a study run later keeps the record in its state file
    assert redone_cells(StudyPaths.of(spec, folder)) == records


@pytest.mark.parametrize(("arguments", "refusal"), [
    (["--redo", "999", "--reason", "x"], "run 999: not a cell of study tiny's evolution"),
    (["--redo", "FIRST"], "say why the cells are redone (--reason)"),
    (["--redo", "FIRST", "--reason", "x"], "stop it before redoing cells")])
def test_redo_is_refused_in_one_line_for_another_run_without_a_reason_or_while_the_study_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], refusal: str) -> None:
    from evolve.cli.main import main
    from evolve.store.program_store import ProgramStore
    from evolve.study.state import this_process

    path, folder, run_ids = started_study(tmp_path)
    arguments = [str(run_ids[0]) if a == "FIRST" else a for a in arguments]
    if arguments[-1] == "x" and arguments[1] != "999":  # the study runs: this (live) process holds its state file
        (folder / "study_state.json").write_text(json.dumps(
            {"db": str(folder / "study.db"), "seconds": {}, "running": {"owner": this_process(), "since": {}}}))
    assert main(["study", str(path), "--out", str(folder), *arguments]) == 1
    error = capsys.readouterr().out
    assert len(error.strip().splitlines()) == 1 and error.startswith("error: ")
    assert refusal in error
    assert len(ProgramStore(str(folder / "study.db")).experiment_cells("tiny")) == 7  # nothing was taken out


def test_the_report_of_a_study_names_its_redone_cells_with_their_reason(tmp_path: Path) -> None:
    from rich.console import Console

    from evolve.cli.main import main
    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths
    from evolve.study.report_stage import write_study_report

    path, folder, run_ids = started_study(tmp_path)
    assert main(["study", str(path), "--out", str(folder), "--redo", str(run_ids[1]), "--reason", "slot too small"]) == 0
    spec = load_study(path)
    study = Study(spec, StudyPaths.of(spec, folder), Console(), source=str(path), read_only=True)
    written = write_study_report(spec, study.paths, study.store, study.train_configs, {}, Console(quiet=True),
                                 interim=True)
    assert [(r["run_id"], r["reason"]) for r in json.loads(written.read_text())["redone"]] == [
        (run_ids[1], "slot too small")]
    line = "1 evolution cell run again (vpo-t0 seed 0; the first runs kept in the store as NAME~redone-K): slot too small"
    assert line in (study.paths.report / "report.html").read_text()
    assert line in (study.paths.report / "results.md").read_text()
