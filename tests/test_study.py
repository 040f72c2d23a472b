"""`evolve study FILE`: the study file's checks (held-out test problems, equal training budgets counted in answers,
at least 2 training seeds for a study of methods, one line per mistake), the training section of its report, the
crack share per arm and training seed, and a tiny real study with SmolLM2 (2 algorithms x 2 training seeds) stopped
after its training stage and resumed without redoing or doubling anything."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from study_helpers import ROOT, STUDY, write

from evolve.config import ConfigError
from evolve.study.plan import load_study


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


def test_a_sampling_arm_samples_the_bases_seed_prompt_on_every_seed_and_is_an_arm_of_its_own(tmp_path: Path) -> None:
    from evolve.report.study_arms import study_arms
    from evolve.study.plan import StudyPaths, experiment_spec

    text = STUDY.replace("seeds = [0]", "seeds = [0, 1, 2, 3]\ncheckpoint_seeds = \"split\"\nsampling_arm = true")
    spec = load_study(write(tmp_path, text))
    experiment = experiment_spec(spec, StudyPaths.of(spec, tmp_path / "study"))
    sampling, base = experiment.policy("sampling"), experiment.policy("base")
    assert sampling.model_copy(update={"name": "base"}) == base  # the base's model and settings, another name
    assert experiment.seeds_of("sampling") == (0, 1, 2, 3) and len(experiment.cells()) == (1 + 3 + 1) * 4
    assert experiment.cell_config(experiment.problems[0], "sampling", 0).selection.strategy == "seed"
    assert experiment.cell_config(experiment.problems[0], "base", 0).selection.strategy == "islands"
    assert spec.arms()["sampling"] == [(None, "sampling")] and "sampling" not in spec.policy_answers()
    assert [arm.name for arm in study_arms(experiment.arm_names())] == ["base", "vpo", "grpo", "multi-rlvr",
                                                                       "sampling"]


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
    (('description = "tiny"', 'description = "tiny"\ncomparisons = [["vpo", "ppo"]]'),
     "comparisons: 'ppo' is no arm of this study (its arms: base, vpo, grpo, multi-rlvr)"),
    (('description = "tiny"', 'description = "tiny"\ncomparisons = [["vpo", "grpo"], ["grpo", "vpo"]]'),
     "comparisons: ['grpo', 'vpo'] compares an arm with itself or repeats a pair"),
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

    # a fresh machine gets the study as scripts/study/study.sh commits it: grpo-t1's merged weights left out
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
    curves = {(c["policy"], c["metric"]): c for c in report["sampling_k_curves"]}
    assert set(curves) == {(policy, metric) for policy in ("base", *names) for metric in ("pass", "best")}
    assert all(c["ks"] == [1, 2] and c["problems"] == 1 for c in curves.values())
    assert {d["policy"] for d in report["sampling_diversity"]} == {"base", *names}
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
    assert "Sampling before evolution" in page and "pass@k against k" in page
    figures = {path.name for path in (folder / "report" / "figures").iterdir()}
    assert {"cracked_share-iterations.svg", "best_score-iterations-run_length.svg", "training-reward.svg",
            "cracked_share-arms-answers.svg"} <= figures
    assert {(c["policy"], c["axis"], c["seeds"]) for c in report["arm_curves"]} == {
        (arm, axis, runs) for arm, runs in (("base", 1), ("vpo", 2), ("grpo", 2)) for axis in ("answers", "iterations")}

    store = ProgramStore(str(folder / "study.db"), mode="read")
    before = [(run.id, run.name, store.count_programs(run.id), run.status) for run in store.list_runs()]
    assert len(before) == 10 and all(status == "finished" for *_, status in before)  # 5 sampled + 5 evolved
    assert main(command) == 0
    out = capsys.readouterr().out
    assert all(f"{stage}: done, skipped" in out for stage in ("train", "sample", "evolve", "report"))
    after = ProgramStore(str(folder / "study.db"), mode="read")
    assert [(run.id, run.name, after.count_programs(run.id), run.status) for run in after.list_runs()] == before


def test_long_training_curves_are_drawn_as_moving_means_with_their_range() -> None:
    from evolve.report.study_report import moving, smoothing_window

    assert smoothing_window(10) == 1 and smoothing_window(300) == 15
    mean, low, high = moving((0.0, 1.0, float("nan"), 0.5), 2)
    assert mean == [0.0, 0.5, 1.0, 0.5] and low == [0.0, 0.0, 1.0, 0.5] and high == [0.0, 1.0, 1.0, 0.5]
