"""Issue 60's calibration of the generated pool: its registered plan is what the script writes, and the power check
simulated from the pilot's rates finds a real difference and not a null one."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.script_modules import SCRIPTS, load_script
from tests.test_calibration_select import pilot_store

COMMITTED = SCRIPTS.parent / "experiments/generated/calibration"


@pytest.fixture(scope="module")
def calibration() -> ModuleType:
    return load_script("generated_calibration")


@pytest.fixture(scope="module")
def power() -> ModuleType:
    return load_script("generated_power")


def test_the_committed_pool_and_pieces_are_what_the_plan_writes(calibration: ModuleType, tmp_path: Path) -> None:
    calibration.plan(tmp_path)
    written = sorted(path.name for path in tmp_path.iterdir())
    assert written == sorted(path.name for path in COMMITTED.iterdir() if path.suffix in (".txt", ".toml")
                             and path.name in written)
    for name in written:
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), name


def test_the_pool_is_difficulty_1_then_2ee_each_problem_once_and_no_two_alike_on_their_tests(
        calibration: ModuleType) -> None:
    from evolve.engine.experiment_spec import load_experiment
    from evolve.problems.generated.generator import generate, passing_pairs

    pool = (COMMITTED / "pool.txt").read_text().split()
    assert len(pool) == len(set(pool)) == 526
    levels = ["_d1_" in name for name in pool]
    assert levels == sorted(levels, reverse=True) and sum(levels) == 133  # every difficulty-1 problem, first
    in_pieces = [problem for path in sorted(COMMITTED.glob("piece_*.toml"))
                 for problem in load_experiment(path).problems]
    assert in_pieces == pool
    spec = load_experiment(COMMITTED / "piece_05.toml")
    assert (spec.iterations, spec.answers_per_iteration, spec.seeds) == (100, 3, (100, 101))
    assert spec.run.stop_when_solved and spec.policies[0].weights == "q8_0"
    names = {path.rsplit("/", 1)[1] for path in pool}
    drawn = [problem for problem in generate(133, 1, 0) + generate(400, "2ee", 0) if problem.name in names]
    assert not passing_pairs(drawn)


def test_the_pieces_run_alternating_between_the_levels_then_the_longer_level_alone() -> None:
    plan = load_script("generated_pool")
    numbers = plan.piece_numbers(plan.pool())
    assert numbers == {"1": [1, 2, 3, 4], "2ee": list(range(5, 22))}
    assert plan.run_order(numbers) == [1, 5, 2, 6, 3, 7, 4, *range(8, 22)]
    assert plan.run_order({"1": [1, 2, 3], "2ee": [4]}) == [1, 4, 2, 3]
    assert plan.run_order({"1": [1, 2, 3], "2ee": [4]}, grown=2) == [1, 4, 2, 3, 5, 6]


PIECES = [["programs/generated/gl_d1_0001", "programs/generated/gl_d1_0002"],
          ["programs/generated/gl_d2ee_0001", "programs/generated/gl_d2ee_0002"],
          ["programs/generated/gl_d2ee_0003"], ["programs/generated/gl_d2ee_0004"],
          ["programs/generated/gl_d2ee_0005"]]


def judged_as(pieces: list[list[str]], verdicts: list[bool | None]) -> dict[str, bool]:
    names = [name.removeprefix("programs/") for piece in pieces for name in piece]
    return {name: verdict for name, verdict in zip(names, verdicts, strict=True) if verdict is not None}


def test_next_names_the_first_unfinished_piece_in_run_order_and_stops_at_the_target(
        calibration: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    monkeypatch.setattr(calibration, "FOLDER", tmp_path)  # no piece has a store here: none begun
    monkeypatch.setattr(calibration, "all_pieces", lambda: PIECES)
    monkeypatch.setattr(calibration, "ordered_pieces", lambda: [1, 2, 3, 4, 5])
    monkeypatch.setattr(calibration, "judged", lambda: judged_as(PIECES, [True, False, True, None, False, None,
                                                                          None]))
    calibration.next_piece(set(), target=10)  # piece 1 finished; piece 2 has a cell still running
    assert capsys.readouterr().out.strip().endswith("piece_02.toml")
    calibration.next_piece({str(calibration.piece_path(2))}, target=10)  # tried this run already (a failed cell)
    assert capsys.readouterr().out.strip().endswith("piece_04.toml")
    with pytest.raises(SystemExit) as stop:
        calibration.next_piece(set(), target=2)  # two in band: the registered stop
    assert stop.value.code == calibration.STOP == 3  # not 1, which a crash would give
    (tmp_path / "piece_04.db").touch()  # piece 4 begun (under way beside another piece, or stopped by a save)
    calibration.next_piece(set(), target=2)  # after the stop, a begun piece is still finished; none starts
    assert capsys.readouterr().out.strip().endswith("piece_04.toml")
    everything = {str(calibration.piece_path(n)) for n in (2, 4, 5)}
    with pytest.raises(SystemExit) as stop:
        calibration.next_piece(everything, target=10)  # nothing left to start in this loop
    assert stop.value.code == 3


def staged_growth(calibration: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """PIECES as the plan (piece 1 difficulty 1, 2-5 level 2ee), checks recorded in tmp_path; each growth asked for
    is appended to the list returned instead of written (generated_pool.grow is tested in test_generated_pool.py)."""
    grown: list[int] = []
    monkeypatch.setattr(calibration, "FOLDER", tmp_path)
    monkeypatch.setattr(calibration, "all_pieces", lambda: PIECES)
    monkeypatch.setattr(calibration, "ordered_pieces", lambda: [1, 2, 3, 4, 5])
    monkeypatch.setattr(calibration, "level_sizes", lambda: {"1": 2, "2ee": 5})
    monkeypatch.setattr(calibration, "grow", grown.append)
    return grown


def test_the_pool_grows_only_after_a_third_finished_2ee_piece_and_by_the_shortfall_at_2ees_share(
        calibration: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    grown = staged_growth(calibration, monkeypatch, tmp_path)
    two_done = judged_as(PIECES, [True, False, True, False, True, None, None])
    monkeypatch.setattr(calibration, "judged", lambda: two_done)
    calibration.grow_step(tmp_path / "piece_03.toml", target=10)
    assert grown == [] and "2 finished" in capsys.readouterr().out
    three_done = judged_as(PIECES, [True, False, True, False, True, False, None])
    monkeypatch.setattr(calibration, "judged", lambda: three_done)
    calibration.grow_step(tmp_path / "piece_01.toml", target=10)  # a difficulty-1 piece: no check
    assert grown == []
    calibration.grow_step(tmp_path / "piece_04.toml", target=10)
    # 3 in band, projected 3 + 0.5 x 1 (2ee: 2 of 4) = 3.5; the shortfall 6.5 at 0.5 x 24 a piece: 1 piece, plus one
    assert grown == [2] and "grown by 2 pieces" in capsys.readouterr().out
    calibration.grow_step(tmp_path / "piece_04.toml", target=10)  # once a piece: its check is recorded
    assert grown == [2]
    assert (tmp_path / "growth_checks.txt").read_text().startswith("piece_04.toml: the pool projected to 4 ")
    assert (tmp_path / "growth_checks.txt").read_text().endswith(" [target 10]\n")
    calibration.grow_step(tmp_path / "piece_04.toml", target=12)  # a larger target: checked again
    assert grown == [2, 2] and (tmp_path / "growth_checks.txt").read_text().count("piece_04.toml") == 2


def test_a_missed_growth_check_is_made_up_and_the_arithmetic_is_exact(
        calibration: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fractions import Fraction

    grown = staged_growth(calibration, monkeypatch, tmp_path)
    monkeypatch.setattr(calibration, "judged", lambda: judged_as(PIECES, [True, False, True, False, True, False,
                                                                          False]))
    calibration.grow_step(None, target=3)  # pieces 4 and 5 finished unchecked (a stop between end and check)
    assert grown == [] and [line.split(":")[0] for line in
                            (tmp_path / "growth_checks.txt").read_text().splitlines()] == ["piece_04.toml",
                                                                                          "piece_05.toml"]
    assert calibration.growth_pieces(Fraction(120), Fraction(3, 10), 150) == 6  # 30 short at 7.2 a piece: 5, +1
    # a shortfall that is an exact multiple of a piece's yield: no extra piece from float noise
    assert calibration.growth_pieces(Fraction(138), Fraction(1, 2), 150) == 2  # 12 short at 12 a piece: 1, +1


def test_the_projection_adds_each_levels_in_band_share_times_its_problems_left(calibration: ModuleType) -> None:
    verdicts = {"generated/gl_d1_0001": True, "generated/gl_d1_0002": False, "generated/gl_d1_0003": False,
                "generated/gl_d1_0004": False, "generated/gl_d2ee_0001": True, "generated/gl_d2ee_0002": True}
    projected, lines = calibration.projection(verdicts, {"1": 12, "2ee": 10})
    assert projected == pytest.approx(1 + 0.25 * 8 + 2 + 1.0 * 8)
    assert "level 1: 1 of 4 in band (25%), 8 to run" in lines
    projected, _ = calibration.projection({"generated/gl_d1_0001": True}, {"1": 2, "2ee": 400})
    assert projected == pytest.approx(2.0)  # a level without a verdict adds nothing yet


def test_the_logit_shift_moves_the_mean_rate_by_the_difference_asked(power: ModuleType) -> None:
    rates = np.array([0.05, 0.3, 0.5, 0.8, 0.97])
    shift = power.logit_shift(rates, 0.12)
    assert np.mean(power.expit(power.logit(rates) + shift) - rates) == pytest.approx(0.12, abs=1e-6)
    assert power.logit_shift(rates, 0.0) == 0.0
    with pytest.raises(ValueError, match="no shift raises these rates"):
        power.logit_shift(np.array([0.9, 0.95]), 0.2)  # at most 0.075 of room above them


def test_an_effect_on_a_share_of_the_problems_moves_only_them_and_keeps_the_mean_difference(
        power: ModuleType) -> None:
    rates = np.linspace(0.1, 0.9, 40)
    shifted = power.shifted_rates(np.random.default_rng(3), rates, 0.12, 0.5)
    moved = shifted != rates
    assert moved.sum() == 20 and np.all(shifted[moved] > rates[moved])
    assert np.mean(shifted - rates) == pytest.approx(0.12, abs=1e-6)
    assert np.array_equal(power.shifted_rates(np.random.default_rng(3), rates, 0.12, 1.0),
                          power.expit(power.logit(rates) + power.logit_shift(rates, 0.12)))
    with pytest.raises(ValueError, match="no shift raises"):
        power.shifted_rates(np.random.default_rng(3), rates, 0.45, 0.5)  # half the problems cannot carry 0.9 each


def test_the_simulated_power_finds_a_large_difference_and_keeps_a_null_one_under_its_level(power: ModuleType) -> None:
    listed = [(1, 2)] * 60 + [(2, 2)] * 20 + [(0, 2)] * 20
    large = power.power(listed, seeds=2, difference=0.3, tau=0.0, families=(3,), studies=40, samples=500)
    null = power.power(listed, seeds=2, difference=0.0, tau=0.0, families=(3,), studies=200, samples=500)
    assert large[3] >= 0.9
    assert null[3] <= 0.05  # a one-sided hit at 0.05 / 3 happens in about 1 % of null studies


def test_only_finished_in_band_tasks_of_the_pilot_stores_enter_the_power_check(power: ModuleType,
                                                                              tmp_path: Path) -> None:
    db = pilot_store(tmp_path / "piece.db", {("gl_d1_0001", 100): 5, ("gl_d1_0001", 101): None,
                                             ("gl_d1_0002", 100): 2, ("gl_d1_0002", 101): 3,
                                             ("gl_d1_0003", 100): 50, ("gl_d1_0003", 101): 60,
                                             ("gl_d1_0004", 100): None, ("gl_d1_0004", 101): "running"})
    band = power.cracks_by_task(power.read_pilot(db))
    assert band == {"generated/gl_d1_0001": (1, 2), "generated/gl_d1_0003": (2, 2)}


def test_the_crack_table_counts_finished_problems_by_level_with_the_registered_rule(calibration: ModuleType,
                                                                                   tmp_path: Path) -> None:
    db = pilot_store(tmp_path / "piece.db", {("gl_d1_0001", 100): 5, ("gl_d1_0001", 101): 9,  # ceiling
                                             ("gl_d1_0002", 100): 60, ("gl_d1_0002", 101): None,  # in band
                                             ("gl_d2ee_0001", 100): None, ("gl_d2ee_0001", 101): None,  # floor
                                             ("gl_d2ee_0002", 100): 50, ("gl_d2ee_0002", 101): 40,  # in band, late
                                             ("gl_d2ee_0003", 100): 3, ("gl_d2ee_0003", 101): "running"})
    table = calibration.crack_table(calibration.read_pilot(db)).splitlines()
    assert table[2] == "| 1 | 2 | 3 of 4 (0.75) | 9 | 1 | 1 | 0 |"
    assert table[3] == "| 2ee | 2 | 2 of 4 (0.50) | 50 | 1 | 0 | 1 |"  # the running problem is left out


def test_the_training_spread_reads_the_answers_to_the_seeds_own_prompt_and_a_groups_chance_of_spread(
        calibration: ModuleType, tmp_path: Path) -> None:
    from evolve.store.program_store import ProgramStore
    from evolve.store.records import AttemptRecord, ChildRecord

    def child(code: str, scalar: float, parent: int) -> ChildRecord:
        return ChildRecord(code=code, parent_id=parent, island=0, policy="base", edit="", scores={"t": scalar},
                           scalar=scalar, solved=scalar >= 1.0)

    db = tmp_path / "piece.db"
    store = ProgramStore(str(db))
    store.save_experiment("piece", "{}")
    run = store.create_run("cell", "programs/generated/gl_d1_0001", "base", 100, "{}", 100, "piece")
    (seed,) = store.record_iteration(run, 0, [child("x = 0", 0.0, None)])  # type: ignore[arg-type]
    call = AttemptRecord("policy_call", prompt="the seed's prompt")
    store.record_iteration(run, 1, [call, child("x = 1", 0.5, seed.id), call,
                                    AttemptRecord("duplicate", "same code", child_code="x = 1"),
                                    call, AttemptRecord("edit_failed", "no code")], parent_id=seed.id)
    (better,) = store.record_iteration(run, 2, [call, child("x = 2", 0.25, seed.id)], parent_id=seed.id)
    store.record_iteration(run, 3, [AttemptRecord("policy_call", prompt="another parent's prompt"),
                                    child("x = 3", 1.0, better.id)], parent_id=better.id)
    store.record_iteration(run, 4, [AttemptRecord("policy_call", prompt="the seed with an inspiration"),
                                    child("x = 4", 1.0, seed.id)], parent_id=seed.id)
    store.close()
    assert calibration.seed_prompt_rewards(db) == {"generated/gl_d1_0001": [0.5, 0.5, 0.0, 0.25]}
    assert calibration.group_spread([0.0, 0.0, 1.0], 2) == pytest.approx(2 / 3)  # 1 - C(2, 2) / C(3, 2)
    cell = calibration.PilotCell
    by_task = {"generated/gl_d1_0001": [cell("generated/gl_d1_0001", 100, True, 2, 1.0),
                                        cell("generated/gl_d1_0001", 101, True, 5, 1.0)],  # cracked early: ceiling
               "generated/gl_d1_0002": [cell("generated/gl_d1_0002", 100, True, None, 0.1),
                                        cell("generated/gl_d1_0002", 101, True, 60, 1.0)],  # one of two: in band
               "generated/gl_d1_0003": [cell("generated/gl_d1_0003", 100, False, None, 0.0),
                                        cell("generated/gl_d1_0003", 101, True, None, 0.0)]}  # still running
    rewards = {"generated/gl_d1_0001": [0.5, 0.5, 0.0, 0.25], "generated/gl_d1_0002": [0.0, 0.0],
               "generated/gl_d1_0003": [1.0, 0.0]}
    assert calibration.spread_by_verdict(rewards, by_task) == {
        "ceiling": (1, pytest.approx(calibration.group_spread([0.5, 0.5, 0.0, 0.25], 8)), pytest.approx(0.3125)),
        "in band": (1, 0.0, 0.0)}  # the running problem has no verdict yet
    assert calibration.group_spread([0.0, 0.0], 8) == 0.0
    assert calibration.group_spread([0.0, 1.0], 3) == pytest.approx(1 - 2 * 0.5 ** 3)  # fewer than the group



def test_the_forecast_walks_the_run_order_at_each_levels_answers_and_in_band_share() -> None:
    forecast = load_script("generated_forecast")
    d1 = [f"generated/gl_d1_{i:04d}" for i in range(1, 7)]
    d2 = [f"generated/gl_d2ee_{i:04d}" for i in range(1, 7)]
    verdicts = {d1[0]: True, d1[1]: False, d2[0]: True, d2[1]: True}
    spent = {d1[0]: 100, d1[1]: 300, d2[0]: 500, d2[1]: 300, d2[2]: 150}  # d2[2] under way
    order = [d1[:3], d2[:3], d1[3:], d2[3:]]
    result = forecast.forecast(verdicts, spent, order, 50.0, target=5)
    assert result.per_level == {"1": (200.0, 0.5, 2), "2ee": (400.0, 1.0, 2)}
    # 3 in band; d1[2] +0.5 (200 answers), d2[2] +1 (400 - 150 = 250), d1[3] +0.5 (200): 5 reached
    assert result.in_band_now == 3 and result.answers_to_target == pytest.approx(650.0)
    # the pool too small: 3 + d1[2..5] 2 + d2[2..5] 4 = 9 in band; 11 more 2ee problems at 400 answers each
    short = forecast.forecast(verdicts, spent, order, 50.0, target=20)
    assert short.grown_problems == 11
    assert short.answers_to_target == pytest.approx(4 * 200 + 250 + 3 * 400 + 11 * 400)
    assert forecast.forecast(verdicts, spent, order, 50.0, target=9).grown_problems == 0
    unjudged = forecast.forecast({d1[0]: True}, spent, order, 50.0, target=4)  # reaches an unjudged 2ee
    assert unjudged.answers_to_target is None and "2ee" not in unjudged.per_level


def test_pieces_that_ran_at_once_count_their_minutes_of_running_once() -> None:
    forecast = load_script("generated_forecast")
    one, other = [0.0, 1.0, 2.0, 3.0], [0.5, 1.5, 2.5, 60.0, 61.0]  # the other resumed after a stop: 1 more minute
    assert forecast.running_minutes(one + other) == pytest.approx(4.0)
    assert forecast.running_minutes(one) + forecast.running_minutes(other) == pytest.approx(6.0)


def test_the_recent_pace_is_read_over_the_last_hours_of_running_only() -> None:
    forecast = load_script("generated_forecast")
    slow = [float(minute) for minute in range(300)]  # 1 answer a minute, then a stop of an hour
    fast = [360.0 + minute / 2 for minute in range(240)]  # 2 a minute for 2 hours
    pace, minutes = forecast.recent_pace(slow + fast, hours=3.0)
    assert minutes == pytest.approx(180.0, abs=1.0)
    assert pace == pytest.approx((60 + 240) / 180, rel=0.02)  # the slow layout's last hour and the fast two
    assert forecast.recent_pace([], hours=3.0) == (0.0, 0.0)


def test_the_futility_check_counts_the_cells_a_stop_would_end_and_the_cracks_it_would_cut(tmp_path: Path) -> None:
    futility = load_script("generated_futility")
    store = pilot_store(tmp_path / "piece_01.db", {("gl_d1_0001", 100): 70, ("gl_d1_0001", 101): None,
                                                    ("gl_d1_0002", 100): 5, ("gl_d1_0002", 101): 50})
    cells = futility.cell_paths(store, at=50)
    assert [(c.problem, c.seed, c.first_crack) for c in cells] == [
        ("generated/gl_d1_0001", 100, 70), ("generated/gl_d1_0001", 101, None),
        ("generated/gl_d1_0002", 100, 5), ("generated/gl_d1_0002", 101, 50)]
    assert cells[0].best_by_stop == 0.5 and cells[3].best_by_stop == 1.0  # the crack at 70 is after the look
    ended = futility.stopped(cells, at=50, below=0.6)
    assert [(c.problem, c.seed) for c in ended] == [("generated/gl_d1_0001", 100), ("generated/gl_d1_0001", 101)]
    assert futility.stopped(cells, at=50, below=0.5) == []  # a best of 0.5 is not below 0.5


def test_select_refuses_to_draw_the_lists_before_the_stop(calibration: ModuleType, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "FOLDER", tmp_path)
    (tmp_path / "piece_01.toml").write_text("")
    pilot_store(tmp_path / "piece_01.db", {("gl_d1_0001", 100): 5, ("gl_d1_0001", 101): None})  # one in band
    with pytest.raises(SystemExit, match="1 problems in band, fewer than the 200 the lists need"):
        calibration.select()  # the registered stop: test 150 + train 50
    with pytest.raises(SystemExit, match="fewer than the 250 the lists need"):
        calibration.select(target=250)
    assert not list(tmp_path.glob("*.txt")) and not list(tmp_path.glob("*.tsv"))  # no list written


def test_select_refuses_a_lowered_target_and_a_begun_piece_whose_cells_have_not_ended(
        calibration: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "FOLDER", tmp_path)
    with pytest.raises(SystemExit, match="--target 150: the lists need 200 problems in band"):
        calibration.select(target=150)  # the lists would be topped up from outside the band
    monkeypatch.setattr(calibration, "TEST_SIZE", 4)  # lists of 4 + 2, so that 6 in band reach the stop
    monkeypatch.setattr(calibration, "TRAIN_SIZE", 2)
    monkeypatch.setattr(calibration, "all_pieces", lambda: PIECES)
    monkeypatch.setattr(calibration, "ordered_pieces", lambda: [1, 2, 3, 4, 5])
    # piece 1's first problem has a cell still running; pieces 1 and 2 begun, 3-5 not
    monkeypatch.setattr(calibration, "judged", lambda: judged_as(PIECES, [None, True, True, True, True, True, True]))
    for number in (1, 2):
        calibration.piece_path(number).write_text("")
        pilot_store(calibration.piece_path(number).with_suffix(".db"), {})
    with pytest.raises(SystemExit, match="^piece_01.toml: begun, with cells that have not ended"):
        calibration.select(target=6)
    assert not list(tmp_path.glob("*.txt")) and not list(tmp_path.glob("*.tsv"))  # no list written
