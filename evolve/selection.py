"""Parent and inspiration selection: islands with migration, a MAP-Elites grid, an elite archive, lexicase.

Every structure is bounded (island populations, archive, grid cells), so the work per iteration
does not grow with the number of programs a run has made. The RNG of iteration i is derived from
(seed, i) alone: given the same policy outputs a run picks the same parents, and a resumed run
picks as the uninterrupted one would have.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from evolve.config import SelectionConfig
from evolve.records import Program

BUILTIN_FEATURES = ("code_length", "scalar")


def iteration_rng(seed: int, iteration: int) -> random.Random:
    return random.Random(seed * 1_000_003 + iteration * 7_919 + 17)


@dataclass
class _Island:
    programs: dict[int, Program]

    def best(self) -> Program:
        return max(self.programs.values(), key=lambda p: (p.scalar, -p.id))


class MapElitesGrid:
    """Keeps the best program per cell of a grid over declared features."""

    def __init__(self, features: tuple[str, ...], objectives: tuple[str, ...], bins: int) -> None:
        allowed = BUILTIN_FEATURES + tuple(objectives)
        for feature in features:
            if feature not in allowed:
                raise ValueError(f"unknown MAP-Elites feature '{feature}' (allowed: {', '.join(allowed)})")
        self.features = features
        self.bins = bins
        self.cells: dict[tuple[int, ...], Program] = {}

    def _bin(self, feature: str, program: Program) -> int:
        if feature == "code_length":  # log scale: 64 chars .. ~16k chars over the bins
            value = (math.log2(max(len(program.code), 64)) - 6) / 8
        else:
            value = program.scalar if feature == "scalar" else program.scores[feature]
            value = 1 - 1 / (1 + max(value, 0.0)) if value > 1 else value  # [0, inf) squashed; [0,1] as is
        return min(self.bins - 1, max(0, int(value * self.bins)))

    def cell_of(self, program: Program) -> tuple[int, ...]:
        return tuple(self._bin(feature, program) for feature in self.features)

    def add(self, program: Program) -> None:
        cell = self.cell_of(program)
        incumbent = self.cells.get(cell)
        if incumbent is None or program.scalar > incumbent.scalar:
            self.cells[cell] = program


def lexicase(candidates: list[Program], objectives: tuple[str, ...], rng: random.Random,
             epsilon: float = 0.0) -> Program:
    """Lexicase selection: objectives in random order, keep the best (within epsilon) on each in turn."""
    pool = list(candidates)
    order = list(objectives)
    rng.shuffle(order)
    for objective in order:
        if len(pool) == 1:
            break
        best = max(program.scores[objective] for program in pool)
        pool = [program for program in pool if program.scores[objective] >= best - epsilon]
    return rng.choice(pool)


class Selector:
    """Holds the run's selection state in memory; rebuilt from the store on resume."""

    def __init__(self, config: SelectionConfig, objectives: tuple[str, ...], seed: int) -> None:
        self.config = config
        self.objectives = tuple(objectives)
        self.seed = seed
        self.islands = [_Island({}) for _ in range(config.islands)]
        self.grid = MapElitesGrid(config.map_elites.features, self.objectives, config.map_elites.bins)
        self.archive: dict[int, Program] = {}
        self._migrated: set[int] = set()

    def empty(self) -> bool:
        return not any(island.programs for island in self.islands)

    def island_sizes(self) -> list[int]:
        return [len(island.programs) for island in self.islands]

    def best(self) -> Program | None:
        bests = [island.best() for island in self.islands if island.programs]
        return max(bests, key=lambda p: (p.scalar, -p.id)) if bests else None

    def add(self, program: Program) -> None:
        island = self.islands[program.island % len(self.islands)]
        island.programs[program.id] = program
        if len(island.programs) > self.config.population_size:
            self._evict(island)
        self.grid.add(program)
        self.archive[program.id] = program
        if len(self.archive) > self.config.archive_size:
            worst = min(self.archive.values(), key=lambda p: (p.scalar, p.id))
            del self.archive[worst.id]

    def _evict(self, island: _Island) -> None:
        keep = {island.best().id}
        if self.config.strategy == "lexicase":  # specialists: the best on each objective survive
            for objective in self.objectives:
                keep.add(max(island.programs.values(), key=lambda p: (p.scores[objective], p.scalar)).id)
        removable = [p for p in island.programs.values() if p.id not in keep]
        if removable:
            worst = min(removable, key=lambda p: (p.scalar, p.id))
            del island.programs[worst.id]

    def sample(self, iteration: int, island: int | None = None) -> tuple[int, Program, tuple[Program, ...]]:
        if self.empty():
            raise ValueError("no programs to select from")
        rng = iteration_rng(self.seed, iteration)
        if island is None:
            island = iteration % len(self.islands)
        while not self.islands[island].programs:
            island = (island + 1) % len(self.islands)
        members = sorted(self.islands[island].programs.values(), key=lambda p: p.id)
        parent = self._parent(members, island, rng)
        return island, parent, self._inspirations(members, parent, rng)

    def _parent(self, members: list[Program], island: int, rng: random.Random) -> Program:
        if self.config.strategy == "lexicase":
            return lexicase(members, self.objectives, rng, self.config.lexicase_epsilon)
        draw = rng.random()
        if draw < self.config.exploration_ratio:
            return rng.choice(members)
        if draw < self.config.exploration_ratio + self.config.exploitation_ratio:
            elites = sorted(self.archive.values(), key=lambda p: p.id)
            local = [p for p in elites if p.island == island and p.id in self.islands[island].programs]
            return rng.choice(local or elites or members)
        cells = sorted(self.grid.cells)
        return self.grid.cells[rng.choice(cells)] if cells else rng.choice(members)

    def _inspirations(self, members: list[Program], parent: Program, rng: random.Random) -> tuple[Program, ...]:
        count = self.config.inspirations
        if count == 0:
            return ()
        chosen: dict[int, Program] = {}
        island_best = max(members, key=lambda p: (p.scalar, -p.id))
        if island_best.id != parent.id:
            chosen[island_best.id] = island_best
        others = [p for cell, p in sorted(self.grid.cells.items()) if p.id != parent.id and p.id not in chosen]
        rng.shuffle(others)
        for program in others:
            if len(chosen) >= count:
                break
            chosen[program.id] = program
        return tuple(list(chosen.values())[:count])

    def maybe_migrate(self, iteration: int) -> list[tuple[Program, int]]:
        """Every migration_interval iterations, copy each island's best to the next island (a ring)."""
        if len(self.islands) < 2 or iteration % self.config.migration_interval or iteration in self._migrated:
            return []
        self._migrated.add(iteration)
        moves: list[tuple[Program, int]] = []
        for index, island in enumerate(self.islands):
            ranked = sorted(island.programs.values(), key=lambda p: (-p.scalar, p.id))
            moves += [(program, (index + 1) % len(self.islands)) for program in ranked[: self.config.migration_count]]
        for program, destination in moves:
            target = self.islands[destination]
            target.programs[program.id] = program
            if len(target.programs) > self.config.population_size:
                self._evict(target)
        return moves
