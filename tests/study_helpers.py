"""What the study's test files share: a tiny study file (3 algorithms x 2 training seeds, one test problem) and a
study whose first cells are made by hand in its store."""

from __future__ import annotations

from pathlib import Path

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


def started_study(tmp_path: Path, cells: int = 7, test_problems: tuple[str, ...] = ("run_length",),
                  pieces: int = 1) -> tuple[Path, Path, list[int]]:
    """A study file (7 policies, seeds 0 and 1, `test_problems`, its evolution in `pieces`), its folder, and its
    store (each piece's store) with the first `cells` cells made by hand (no model), those of seed 0 finished: the
    run ids."""
    from evolve.engine.experiment_pieces import piece_numbers, piece_view
    from evolve.store.program_store import ProgramStore
    from evolve.study.plan import StudyPaths, experiment_spec

    text = STUDY.replace("seeds = [0]", f"seeds = [0, 1]\npieces = {pieces}")
    path = write(tmp_path, text.replace('test_problems = ["run_length"]', f"test_problems = {list(test_problems)!r}"))
    folder = tmp_path / "study"
    spec = load_study(path)
    experiment = experiment_spec(spec, StudyPaths.of(spec, folder))
    folder.mkdir()
    stores = {}
    for number in piece_numbers(experiment):
        view = piece_view(experiment, number)
        store = ProgramStore(view.db)
        store.save_experiment(experiment.name, experiment.model_dump_json())
        stores.update(dict.fromkeys(view.problems, store))
    run_ids = []
    for problem, arm, seed in experiment.cells()[:cells]:
        config = experiment.cell_config(problem, arm, seed)
        store = stores[problem]
        run_ids.append(store.create_run(config.run.name, problem, arm, seed, config.model_dump_json(), 1,
                                        experiment.name))
        if seed == 0:
            store.set_run_status(run_ids[-1], "finished")
    return path, folder, run_ids
