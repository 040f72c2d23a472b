"""Issue 60's calibration plan (scripts/study/generated_pool.py): the pool's registered growth adds pieces of the
next 2ee problems without changing any piece before it, and they run last."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.script_modules import SCRIPTS, load_script

COMMITTED = SCRIPTS.parent / "experiments/generated/calibration"


@pytest.fixture(scope="module")
def plan() -> ModuleType:
    return load_script("generated_pool")


def test_growth_adds_pieces_of_the_next_2ee_problems_and_changes_no_earlier_piece(plan: ModuleType,
                                                                                  tmp_path: Path) -> None:
    from evolve.engine.experiment_spec import load_experiment
    from evolve.problems.generated.generator import generate, passing_pairs

    plan.grow(2, tmp_path)
    for number in range(1, 22):  # the registered pieces, byte for byte
        name = f"piece_{number:02d}.toml"
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), name
    first = [load_experiment(tmp_path / f"piece_{n}.toml").problems for n in (22, 23)]
    grown = [problem for piece in first for problem in piece]
    stream = {p.name: index for index, p in enumerate(generate(472, "2ee", 0), start=1)}
    assert all(400 < stream[name.rsplit("/", 1)[1]] <= 448 for name in grown)  # problems 401-448 of the stream
    assert len(first[0]) == 24 and len(set(grown)) == len(grown) >= 44  # a few may be dropped
    kept = [p for p in generate(133, 1, 0) + generate(448, "2ee", 0)[400:]
            if f"programs/generated/{p.name}" in grown or "_d1_" in p.name]
    assert not passing_pairs(kept)  # none is one function with a difficulty-1 problem on its tests
    pool = (tmp_path / "pool.txt").read_text().split()
    assert pool[:526] == (COMMITTED / "pool.txt").read_text().split() and pool[526:] == grown

    plan.grow(1, tmp_path)  # a second growth: the first's pieces stay, the next 24 of the stream follow
    assert [load_experiment(tmp_path / f"piece_{n}.toml").problems for n in (22, 23)] == first
    third = load_experiment(tmp_path / "piece_24.toml").problems
    assert all(448 < stream[name.rsplit("/", 1)[1]] <= 472 for name in third)
    assert plan.growths(tmp_path) == [2, 1]
    assert "growth 2 of the pool" in (tmp_path / "piece_24.toml").read_text()
    assert plan.ordered_pieces(tmp_path)[-4:] == [21, 22, 23, 24]  # grown pieces run last, in order
    assert plan.level_sizes(tmp_path)["2ee"] == 393 + len(grown) + len(third)


def test_without_growth_the_order_and_sizes_are_the_registered_ones(plan: ModuleType, tmp_path: Path) -> None:
    assert plan.growths(tmp_path) == []
    assert plan.ordered_pieces(tmp_path) == [1, 5, 2, 6, 3, 7, 4, *range(8, 22)]
    assert plan.level_sizes(tmp_path) == {"1": 133, "2ee": 393}
    with pytest.raises(ValueError, match="at least one piece"):
        plan.grow(0, tmp_path)
