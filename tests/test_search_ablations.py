"""Issue 61's in-band experiment as scripts/study/search_ablations.py writes it: 65 problems in pieces, the primary
arms on every seed, each ablation on the first, each arm one change from the default search."""

from __future__ import annotations

from pathlib import Path

from tests.script_modules import SCRIPTS, load_script


def test_the_in_band_experiment_runs_every_ablation_on_the_first_seed_and_the_primary_on_all(
        tmp_path: Path) -> None:
    from evolve.engine.experiment_pieces import piece_problems
    from evolve.engine.experiment_spec import load_experiment

    ablations = load_script("search_ablations")
    train = tmp_path / "train_problems.txt"
    train.write_text("".join(f"programs/generated/gl_d1_{i:04d}\n" for i in range(1, 51)))
    humaneval = ablations.humaneval_in_band(SCRIPTS.parent / "experiments/calibration/selection.tsv")
    assert len(humaneval) == 15 and "programs/humaneval/he_007" in humaneval
    path = tmp_path / "in_band.toml"
    path.write_text(ablations.experiment_text(ablations.read_list(train) + humaneval, 3,
                                              str(tmp_path / "in_band_{piece}.db")))
    spec = load_experiment(path)
    assert len(spec.problems) == 65 and spec.pieces == 5 and len(piece_problems(spec, 1)) == 13
    assert spec.arm_names() == ablations.ARMS and spec.seeds == (300, 301, 302)
    assert {arm: spec.seeds_of(arm) for arm in ("default", "sampling", "lexicase")} == {
        "default": (300, 301, 302), "sampling": (300, 301, 302), "lexicase": (300,)}
    cells = {arm: len([key for key in spec.cells() if key[1] == arm]) for arm in spec.arm_names()}
    assert cells["default"] == 3 * 65 and sum(cells.values()) == 2 * 3 * 65 + 10 * 65
    default = spec.cell_config("programs/humaneval/he_007", "default", 300)
    for arm, changed in (("no_feedback", lambda c: not c.policy.feedback),
                         ("diff", lambda c: c.policy.edit_format == "diff"),
                         ("temperature_1", lambda c: c.policy.temperature == 1.0),
                         ("docstring_prefill", lambda c: c.policy.prefill_docstring),
                         ("sampling", lambda c: c.selection.strategy == "seed"),
                         ("lexicase", lambda c: c.selection.strategy == "lexicase"),
                         ("one_island", lambda c: c.selection.islands == 1),
                         ("map_elites", lambda c: c.selection.exploration_ratio == 0 == c.selection.exploitation_ratio),
                         ("no_inspirations", lambda c: c.selection.inspirations == 0),
                         ("restarts", lambda c: c.selection.restart_interval == 25),
                         ("one_answer", lambda c: c.run.iterations == 300)):
        config = spec.cell_config("programs/humaneval/he_007", arm, 300)
        assert changed(config) and not changed(default), arm
    few = tmp_path / "few.toml"  # a short list is one piece, its store without {piece}
    few.write_text(ablations.experiment_text(humaneval, 1, str(tmp_path / "few_{piece}.db")))
    assert (load_experiment(few).pieces, load_experiment(few).db) == (1, str(tmp_path / "few.db"))
