"""Selection: reproducible draws, ratios, bounded populations, migration, MAP-Elites cells, lexicase specialists."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter

import pytest

from evolve.config import MapElitesSection, SelectionConfig
from evolve.records import Program
from evolve.search.map_elites import FeatureRange
from evolve.search.selection import MapElitesGrid, Selector

OBJECTIVES = ("a", "b")


def program(pid: int, a: float, b: float, island: int = 0, code: str | None = None) -> Program:
    return Program(id=pid, run_id=1, code=code or f"x = {pid}", parent_id=None, island=island, iteration=pid,
                   policy="p", edit="", scores={"a": a, "b": b}, scalar=(a + b) / 2, solved=False)


def filled(config: SelectionConfig, seed: int = 0, count: int = 30) -> Selector:
    selector = Selector(config, OBJECTIVES, seed)
    for pid in range(1, count + 1):
        selector.add(program(pid, (pid * 37 % 100) / 100, (pid * 61 % 100) / 100, island=pid % config.islands))
    return selector


def draws(selector: Selector, iterations: range) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(island, parent.id, tuple(p.id for p in inspirations))
            for island, parent, inspirations in (selector.sample(i) for i in iterations)]


def test_same_seed_and_programs_give_the_same_choices_and_other_seeds_differ() -> None:
    config = SelectionConfig()
    first = draws(filled(config), range(1, 60))
    assert first == draws(filled(config), range(1, 60))
    assert first != draws(filled(config, seed=1), range(1, 60))


def test_sampling_changes_nothing_so_a_resumed_run_draws_the_same() -> None:
    config = SelectionConfig(strategy="lexicase")
    uninterrupted = filled(config)
    draws(uninterrupted, range(1, 40))
    resumed = filled(config)
    assert draws(uninterrupted, range(40, 60)) == draws(resumed, range(40, 60))


def test_draws_do_not_depend_on_the_process_hash_seed() -> None:
    script = (
        "import json, sys; sys.path.insert(0, 'tests'); import test_selection as t; "
        "from evolve.config import SelectionConfig; "
        "print(json.dumps(t.draws(t.filled(SelectionConfig()), range(1, 30))))"
    )
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                                cwd=os.path.dirname(os.path.dirname(__file__)))
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1] == json.loads(json.dumps(draws(filled(SelectionConfig()), range(1, 30))))


def test_parent_sources_follow_the_exploration_and_exploitation_ratios() -> None:
    # Island 0 holds weak programs; island 1 holds the archive's only elite S (cell a-high) and G,
    # the elite of the a-low cell. So: explore -> island 0, exploit -> S, grid -> S or G half each.
    config = SelectionConfig(islands=2, population_size=50, archive_size=1, exploration_ratio=0.2,
                             exploitation_ratio=0.5, map_elites=MapElitesSection(features=("a",), bins=2))
    selector = Selector(config, OBJECTIVES, 7)
    for pid in range(1, 21):
        selector.add(program(pid, 0.1, 0.0, island=0))
    selector.add(program(100, 0.9, 0.9, island=1))  # S
    selector.add(program(101, 0.2, 0.6, island=1))  # G
    total = 4000
    picks = Counter(selector.sample(i, island=0)[1].id for i in range(total))
    island_share = sum(n for pid, n in picks.items() if pid < 100) / total
    assert abs(island_share - 0.2) < 0.03
    assert abs(picks[100] / total - (0.5 + 0.15)) < 0.03
    assert abs(picks[101] / total - 0.15) < 0.03


def test_exploitation_prefers_elites_living_on_the_island() -> None:
    config = SelectionConfig(islands=2, archive_size=4, exploration_ratio=0.0, exploitation_ratio=1.0)
    selector = Selector(config, OBJECTIVES, 0)
    for p in (program(1, 0.9, 0.9, island=1), program(2, 0.8, 0.8, island=1), program(3, 0.5, 0.5, island=0),
              program(4, 0.1, 0.1, island=0)):
        selector.add(p)
    assert {selector.sample(i, island=0)[1].id for i in range(100)} == {3, 4}
    assert {selector.sample(i, island=1)[1].id for i in range(100)} == {1, 2}


@pytest.mark.parametrize("strategy", ["islands", "lexicase"])
def test_ten_thousand_programs_keep_every_structure_bounded_and_the_best(strategy: str) -> None:
    config = SelectionConfig(strategy=strategy, islands=2, population_size=5, archive_size=7)
    selector = Selector(config, OBJECTIVES, 0)
    selector.add(program(1, 1.0, 1.0))
    for pid in range(2, 10_001):
        selector.add(program(pid, (pid % 97) / 200, (pid % 89) / 200, island=pid % 2, code="y = 1\n" * (pid % 300)))
    assert selector.island_sizes() == [5, 5]
    assert 1 in selector.islands[0].programs and selector.best().id == 1
    assert len(selector.archive) == 7
    assert len(selector.grid.cells) <= config.map_elites.bins ** 2
    island, parent, inspirations = selector.sample(10_001)
    assert parent.id in selector.islands[island].programs or parent.id in selector.archive or \
        parent in selector.grid.cells.values()


def test_lexicase_population_stays_capped_when_every_program_is_some_objectives_best() -> None:
    objectives = tuple(f"case{i}" for i in range(10))
    config = SelectionConfig(strategy="lexicase", islands=1, population_size=4)
    selector = Selector(config, objectives, 0)
    for pid in range(1, 11):
        scores = {name: float(i == pid - 1) for i, name in enumerate(objectives)}
        selector.add(Program(id=pid, run_id=1, code="", parent_id=None, island=0, iteration=pid, policy="",
                             edit="", scores=scores, scalar=0.1 + pid / 100, solved=False))
    assert selector.island_sizes() == [4]
    assert 10 in selector.islands[0].programs  # the best by scalar


def test_migration_copies_each_islands_best_around_the_ring_once_per_interval() -> None:
    config = SelectionConfig(islands=3, migration_interval=10, migration_count=1)
    selector = filled(config)
    bests = [island.best() for island in selector.islands]
    assert selector.maybe_migrate(9) == []
    moves = selector.maybe_migrate(10)
    assert [(p.id, destination) for p, destination in moves] == [(bests[0].id, 1), (bests[1].id, 2), (bests[2].id, 0)]
    for migrant, destination in moves:
        assert selector.islands[destination].programs[migrant.id] is migrant
        assert migrant.island == (destination - 1) % 3  # the copy keeps its identity
    assert selector.maybe_migrate(10) == []


def test_migration_does_not_resend_a_program_the_destination_already_holds() -> None:
    config = SelectionConfig(islands=2, migration_interval=1, migration_count=1)
    selector = Selector(config, OBJECTIVES, 0)
    seed = program(1, 0.5, 0.5)
    selector.add(seed)
    selector.add(program(1, 0.5, 0.5, island=1))
    assert selector.maybe_migrate(1) == []
    selector.add(program(2, 0.9, 0.9, island=0))
    assert [(p.id, d) for p, d in selector.maybe_migrate(2)] == [(2, 1)]


def test_map_elites_keeps_the_best_per_cell_across_different_cells() -> None:
    grid = MapElitesGrid(("code_length", "a"), OBJECTIVES, 4)
    grid.add(program(1, 0.1, 0.0))
    grid.add(program(2, 0.15, 0.9))  # same cell as 1, better scalar
    grid.add(program(4, 0.12, 0.0))  # same cell, worse than 2
    grid.add(program(3, 0.9, 0.0, code="y = 1\n" * 400))
    assert sorted(p.id for p in grid.cells.values()) == [2, 3]
    assert len(grid.cells) == 2 and grid.cell_of(program(2, 0.15, 0.9)) != grid.cell_of(grid.cells[grid.occupied[1]])


def test_unknown_feature_is_refused_at_construction_naming_the_allowed_ones() -> None:
    config = SelectionConfig(map_elites=MapElitesSection(features=("colour",)))
    with pytest.raises(ValueError, match="unknown MAP-Elites feature 'colour'.*code_length, scalar, a, b"):
        Selector(config, OBJECTIVES, 0)


def test_scalar_bins_grow_past_one_and_negative_and_match_binning_from_scratch() -> None:
    values = [0.05, 0.3, 0.6, 0.95, -0.7, 3.5]
    incremental = MapElitesGrid(("scalar",), OBJECTIVES, 8)
    for pid, value in enumerate(values, 1):
        incremental.add(program(pid, value, value))
    assert (incremental.ranges["scalar"].low, incremental.ranges["scalar"].high) == (-1.0, 7.0)
    from_scratch = MapElitesGrid(("scalar",), OBJECTIVES, 8)
    for pid in (5, 6, 1, 2, 3, 4):  # the extremes first: the range is final before the rest arrive
        from_scratch.add(program(pid, values[pid - 1], values[pid - 1]))
    assert from_scratch.ranges["scalar"].high == 7.0 and from_scratch.ranges["scalar"].low == -1.0
    assert {c: p.id for c, p in incremental.cells.items()} == {c: p.id for c, p in from_scratch.cells.items()}
    assert sorted(p.id for p in incremental.cells.values()) == [4, 5, 6]


def test_lexicase_picks_specialists_where_scalar_elitism_picks_the_generalist() -> None:
    specialist_a, specialist_b, generalist = program(1, 1.0, 0.0), program(2, 0.0, 1.0), program(3, 0.6, 0.6)
    selector = Selector(SelectionConfig(strategy="lexicase", islands=1), OBJECTIVES, 0)
    for p in (specialist_a, specialist_b, generalist):
        selector.add(p)
    picks = Counter(selector.sample(i)[1].id for i in range(400))
    assert picks[1] > 150 and picks[2] > 150 and picks[3] == 0
    elitist = Selector(SelectionConfig(islands=1, exploration_ratio=0.0, exploitation_ratio=1.0, archive_size=1),
                       OBJECTIVES, 0)
    for p in (specialist_a, specialist_b, generalist):
        elitist.add(p)
    assert {elitist.sample(i)[1].id for i in range(100)} == {3}


def test_epsilon_lexicase_also_admits_programs_near_the_best() -> None:
    near_a, best_a, generalist = program(1, 0.95, 0.0), program(2, 1.0, 0.0), program(3, 0.6, 0.6)
    picks = {}
    for epsilon in (0.0, 0.1):
        selector = Selector(SelectionConfig(strategy="lexicase", islands=1, lexicase_epsilon=epsilon), OBJECTIVES, 0)
        for p in (near_a, best_a, generalist):
            selector.add(p)
        picks[epsilon] = Counter(selector.sample(i)[1].id for i in range(400))
    assert picks[0.0][1] == 0 and picks[0.1][1] > 50


def test_lexicase_eviction_keeps_the_specialists() -> None:
    selector = Selector(SelectionConfig(strategy="lexicase", islands=1, population_size=3), OBJECTIVES, 0)
    for p in (program(1, 1.0, 0.0), program(2, 0.0, 1.0), program(3, 0.6, 0.6), program(4, 0.55, 0.55)):
        selector.add(p)
    assert set(selector.islands[0].programs) == {1, 2, 3}
    scalar_only = Selector(SelectionConfig(islands=1, population_size=3), OBJECTIVES, 0)
    for p in (program(1, 1.0, 0.0), program(2, 0.0, 1.0), program(3, 0.6, 0.6), program(4, 0.55, 0.55)):
        scalar_only.add(p)
    assert set(scalar_only.islands[0].programs) == {3, 4, 1}


def test_inspirations_are_distinct_exclude_the_parent_and_lead_with_the_island_best() -> None:
    selector = filled(SelectionConfig(islands=1, population_size=50, inspirations=3))
    island_best = selector.islands[0].best()
    for i in range(100):
        _, parent, inspirations = selector.sample(i)
        ids = [p.id for p in inspirations]
        assert parent.id not in ids and len(ids) == len(set(ids)) == 3
        if parent.id != island_best.id:
            assert ids[0] == island_best.id
        assert all(selector.grid.cell_of(p) != selector.grid.cell_of(parent) for p in inspirations[1:])


def test_a_migrant_that_would_be_evicted_at_once_is_not_reported() -> None:
    config = SelectionConfig(islands=2, population_size=2, migration_interval=5)
    selector = Selector(config, OBJECTIVES, 0)
    for p in (program(1, 0.1, 0.1, island=0), program(2, 0.5, 0.5, island=1), program(3, 0.6, 0.6, island=1)):
        selector.add(p)
    assert [(p.id, d) for p, d in selector.maybe_migrate(5)] == [(3, 0)]
    assert set(selector.islands[1].programs) == {2, 3}


def test_a_restart_leaves_the_weakest_island_the_seed_alone_once_per_interval() -> None:
    config = SelectionConfig(islands=3, restart_interval=10, migration_count=0)
    selector = Selector(config, OBJECTIVES, 0)
    seed = program(0, 0.0, 0.0)
    seed = Program(**{**seed.__dict__, "iteration": 0})
    selector.add(seed)
    for pid in range(1, 31):
        selector.add(program(pid, (pid * 37 % 100) / 100, (pid * 61 % 100) / 100, island=pid % 3))
    bests = [island.best().scalar for island in selector.islands]
    archive = dict(selector.archive)
    assert selector.maybe_restart(9) is None
    restarted = selector.maybe_restart(10)
    assert restarted == bests.index(min(bests))
    assert [p.id for p in selector.islands[restarted].programs.values()] == [0]  # the seed alone
    assert selector.islands[restarted].programs[0].island == restarted
    assert selector.archive == archive  # the elites are kept; only the island forgets
    assert selector.maybe_restart(10) is None  # once per interval
    assert selector.maybe_restart(7) is None and SelectionConfig().restart_interval == 0


def test_a_restarted_island_draws_parents_and_inspirations_from_its_own_members_only() -> None:
    config = SelectionConfig(islands=2, restart_interval=5, migration_count=0, inspirations=2)
    selector = Selector(config, OBJECTIVES, 3)
    selector.add(Program(**{**program(0, 0.0, 0.0).__dict__, "iteration": 0}))
    for pid in range(1, 21):
        selector.add(program(pid, (pid * 37 % 100) / 100, (pid * 61 % 100) / 100, island=pid % 2))
    restarted = selector.maybe_restart(5)
    assert restarted is not None
    for pid in range(21, 25):  # children of the restarted island's seed
        selector.add(program(pid, 0.01 * pid, 0.0, island=restarted))
    own = set(selector.islands[restarted].programs)
    drawn = [selector.sample(i, island=restarted) for i in range(300)]
    assert {parent.id for _, parent, _ in drawn} <= own
    assert {p.id for _, _, inspirations in drawn for p in inspirations} <= own
    other = 1 - restarted
    assert any(parent.id not in selector.islands[other].programs for _, parent, _ in
               (selector.sample(i, island=other) for i in range(300)))  # the other still draws global elites


@pytest.mark.parametrize("value", [1.5e308, -1.5e308, float("inf"), float("-inf"), float("nan")])
def test_a_value_near_the_float_limit_falls_in_an_edge_bin_instead_of_overflowing(value: float) -> None:
    feature = FeatureRange(-1.0, 1.0)  # value - low overflows to inf for the largest finite values
    assert feature.bin(value, 8) == (0 if math.isnan(value) or value < 0 else 7)
