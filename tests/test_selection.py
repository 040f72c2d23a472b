"""Selection: reproducible draws, bounded populations, migration, MAP-Elites cells, lexicase specialists."""

from __future__ import annotations

from collections import Counter

import pytest

from evolve.config import SelectionConfig
from evolve.records import Program
from evolve.selection import MapElitesGrid, Selector

OBJECTIVES = ("a", "b")


def program(pid: int, a: float, b: float, island: int = 0, code: str | None = None) -> Program:
    return Program(id=pid, run_id=1, code=code or f"x = {pid}", parent_id=None, island=island, iteration=pid,
                   policy="p", edit="", scores={"a": a, "b": b}, scalar=(a + b) / 2, solved=False)


def filled(config: SelectionConfig, seed: int = 0, count: int = 30) -> Selector:
    selector = Selector(config, OBJECTIVES, seed)
    for pid in range(1, count + 1):
        selector.add(program(pid, (pid * 37 % 100) / 100, (pid * 61 % 100) / 100, island=pid % config.islands))
    return selector


def test_same_seed_and_programs_give_the_same_choices() -> None:
    config = SelectionConfig()
    first, second = filled(config), filled(config)
    draws = [first.sample(i) for i in range(1, 50)]
    assert draws == [second.sample(i) for i in range(1, 50)]
    assert draws != [filled(config, seed=1).sample(i) for i in range(1, 50)]


def test_island_population_is_capped_and_keeps_its_best() -> None:
    config = SelectionConfig(islands=1, population_size=5)
    selector = Selector(config, OBJECTIVES, 0)
    selector.add(program(1, 1.0, 1.0))
    for pid in range(2, 10_000):
        selector.add(program(pid, 0.1, 0.1 + pid / 1e6))
    assert selector.island_sizes() == [5]
    assert selector.best().id == 1
    assert len(selector.archive) <= config.archive_size


def test_exploration_draws_follow_the_configured_ratio() -> None:
    config = SelectionConfig(islands=1, population_size=100, archive_size=1, exploration_ratio=1.0,
                             exploitation_ratio=0.0)
    selector = filled(config, count=50)
    parents = Counter(selector.sample(i)[1].id for i in range(2000))
    assert len(parents) == 50  # uniform over the island
    exploit = filled(SelectionConfig(islands=1, archive_size=1, exploration_ratio=0.0, exploitation_ratio=1.0))
    assert {exploit.sample(i)[1].id for i in range(200)} == {exploit.best().id}


def test_migration_copies_each_islands_best_around_the_ring() -> None:
    config = SelectionConfig(islands=3, migration_interval=10, migration_count=1)
    selector = filled(config)
    assert selector.maybe_migrate(9) == []
    moves = selector.maybe_migrate(10)
    assert [destination for _, destination in moves] == [1, 2, 0]
    for source_best, destination in moves:
        assert source_best.id in selector.islands[destination].programs


def test_map_elites_keeps_the_best_per_cell_and_rejects_unknown_features() -> None:
    grid = MapElitesGrid(("code_length", "a"), OBJECTIVES, 4)
    grid.add(program(1, 0.1, 0.0))
    grid.add(program(2, 0.15, 0.9))  # same cell, better scalar
    grid.add(program(3, 0.9, 0.0, code="y = 1\n" * 400))
    assert sorted(p.id for p in grid.cells.values()) == [2, 3]
    with pytest.raises(ValueError, match="unknown MAP-Elites feature 'colour'.*code_length, scalar, a, b"):
        MapElitesGrid(("colour",), OBJECTIVES, 4)


def test_lexicase_prefers_specialists_to_the_best_average() -> None:
    config = SelectionConfig(strategy="lexicase", islands=1)
    selector = Selector(config, OBJECTIVES, 0)
    specialist_a, specialist_b, generalist = program(1, 1.0, 0.0), program(2, 0.0, 1.0), program(3, 0.6, 0.6)
    for p in (specialist_a, specialist_b, generalist):
        selector.add(p)
    picks = Counter(selector.sample(i)[1].id for i in range(400))
    assert picks[1] > 100 and picks[2] > 100 and picks[3] == 0
    elitist = Selector(SelectionConfig(islands=1, exploration_ratio=0.0, exploitation_ratio=1.0), OBJECTIVES, 0)
    for p in (specialist_a, specialist_b, generalist):
        elitist.add(p)
    assert Counter(elitist.sample(i)[1].id for i in range(100)).most_common(1)[0][0] == 3


def test_lexicase_eviction_keeps_the_specialists() -> None:
    config = SelectionConfig(strategy="lexicase", islands=1, population_size=3)
    selector = Selector(config, OBJECTIVES, 0)
    for p in (program(1, 1.0, 0.0), program(2, 0.0, 1.0), program(3, 0.6, 0.6), program(4, 0.55, 0.55)):
        selector.add(p)
    assert set(selector.islands[0].programs) == {1, 2, 3}


def test_inspirations_are_distinct_and_exclude_the_parent() -> None:
    selector = filled(SelectionConfig(inspirations=3))
    for i in range(50):
        _, parent, inspirations = selector.sample(i)
        ids = [p.id for p in inspirations]
        assert parent.id not in ids and len(ids) == len(set(ids)) <= 3
