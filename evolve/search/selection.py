"""Parent and inspiration selection: islands with ring migration and restarts, a MAP-Elites grid, an elite archive,
lexicase.

Strategy "seed" is plain sampling (`evolve sample`): every iteration's parent is the seed program (iteration 0)
with no inspirations, so each request is the prompt evolution's first iteration sends.

Every structure is bounded (island populations, archive, occupied grid cells), so the work of
`add` and `sample` depends on the population and archive sizes, never on how many programs the
run has made. The RNG of iteration i is derived from (seed, i) alone and `sample` changes no
state: given the same programs added in the same order, iteration i picks the same parent and
inspirations, and a resume, which adds the stored programs in commit order, holds the state the
stopped run had. Which programs a run has added when it samples iteration i depends on timing:
the controller keeps `run.concurrency + run.eval_workers` iterations in flight (at least two), so
an evolution run does not promise the same parents twice; strategy "seed" does (its parent is
always the seed).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable

from evolve.config import SelectionConfig
from evolve.records import Program
from evolve.search.map_elites import BUILTIN_FEATURES, MapElitesGrid, rank
from evolve.seeds import selection_rng

__all__ = ["BUILTIN_FEATURES", "Island", "MapElitesGrid", "Selector", "lexicase", "rank"]


def objective_value(program: Program, objective: str) -> float:
    value = program.scores.get(objective, -math.inf)
    return -math.inf if math.isnan(value) else value


def lexicase(candidates: Iterable[Program], objectives: tuple[str, ...], rng: random.Random,
             epsilon: float = 0.0) -> Program:
    """(Epsilon-)lexicase: objectives in random order, keep those within epsilon of the best on each in turn."""
    pool = list(candidates)
    order = list(objectives)
    rng.shuffle(order)
    for objective in order:
        if len(pool) == 1:
            break
        best = max(objective_value(program, objective) for program in pool)
        pool = [program for program in pool if objective_value(program, objective) >= best - epsilon]
    return rng.choice(pool)


def unique_bests(programs: Iterable[Program], objectives: tuple[str, ...]) -> set[int]:
    """Ids of the programs that are strictly the best on at least one objective."""
    members = list(programs)
    specialists: set[int] = set()
    for objective in objectives:
        values = [objective_value(program, objective) for program in members]
        best = max(values, default=-math.inf)
        holders = [program.id for program, value in zip(members, values, strict=True) if value == best]
        if len(holders) == 1 and best > -math.inf:
            specialists.add(holders[0])
    return specialists


class Island:
    """One island's population, keyed by program id (changed only through Selector, which keeps `floor` right)."""

    def __init__(self) -> None:
        self.programs: dict[int, Program] = {}
        self._floor: Program | None = None  # the worst member by rank, or None: work it out on the next floor()

    def floor(self) -> Program:
        """The worst member by rank, cached until it leaves."""
        if self._floor is None or self._floor.id not in self.programs:
            self._floor = min(self.programs.values(), key=rank)
        return self._floor

    def put(self, program: Program) -> None:
        self.programs[program.id] = program
        if self._floor is not None and rank(program) < rank(self._floor):
            self._floor = program

    def best(self) -> Program:
        return max(self.programs.values(), key=rank)

    def members(self) -> list[Program]:
        return sorted(self.programs.values(), key=lambda program: program.id)


class Selector:
    """Holds the run's selection state in memory; the controller rebuilds it from the store on resume."""

    def __init__(self, config: SelectionConfig, objectives: tuple[str, ...], seed: int) -> None:
        self.config = config
        self.objectives = tuple(objectives)
        self.seed = seed
        self.islands = [Island() for _ in range(config.islands)]
        self.grid = MapElitesGrid(config.map_elites.features, self.objectives, config.map_elites.bins)
        self.archive: dict[int, Program] = {}  # the archive_size best programs ever added
        self.seed_program: Program | None = None  # the iteration-0 program, the parent of strategy "seed"
        self._migrated: set[int] = set()
        self._restarted_at: set[int] = set()  # iterations whose restart happened
        self.isolated: set[int] = set()  # restarted islands: parents and inspirations from their own members only
        self._archive_floor: Program | None = None  # the archive's worst by rank; None: work it out when needed

    def empty(self) -> bool:
        return not self.archive

    def island_sizes(self) -> list[int]:
        return [len(island.programs) for island in self.islands]

    def best(self) -> Program | None:
        return max(self.archive.values(), key=rank) if self.archive else None

    def reads_scores(self) -> bool:
        """Whether a decision reads score vectors (lexicase, grid features that are objectives), not scalars alone."""
        return self.config.strategy == "lexicase" or any(f not in BUILTIN_FEATURES for f in self.grid.features)

    def held_ids(self) -> set[int]:
        """Ids of every program the state holds: island members, archive, grid elites, the seed."""
        held = {program_id for island in self.islands for program_id in island.programs} | set(self.archive)
        held |= {elite.id for elite in self.grid.cells.values()}
        return held | ({self.seed_program.id} if self.seed_program else set())

    def materialize(self, whole: dict[int, Program]) -> None:
        """Swap each held program for the whole one of the same id in `whole` (keeping the island it was placed
        with: the seed sits on every island): after a resume replayed headers, selection hands out code again.
        Nothing a decision reads changes, so the state selects exactly as before."""
        def swap(program: Program) -> Program:
            found = whole.get(program.id)
            return program if found is None else found if found.island == program.island else \
                dataclasses.replace(found, island=program.island)

        for island in self.islands:
            island.programs = {program_id: swap(program) for program_id, program in island.programs.items()}
            island._floor = None
        self.archive = {program_id: swap(program) for program_id, program in self.archive.items()}
        self._archive_floor = None
        self.grid.materialize({program.id: swap(program) for program in self.grid.cells.values()})
        self.seed_program = swap(self.seed_program) if self.seed_program else None

    def add(self, program: Program) -> None:
        """Put a scored program on its island (program.island modulo the island count), the grid and the archive."""
        if program.iteration == 0 and self.seed_program is None:
            self.seed_program = program
        self._place(self.islands[program.island % len(self.islands)], program)
        self.grid.add(program)
        if self._archive_keeps(program):
            self.archive[program.id] = program
            self._archive_floor = None
            if len(self.archive) > self.config.archive_size:
                del self.archive[min(self.archive.values(), key=rank).id]

    def _archive_keeps(self, program: Program) -> bool:
        """False when adding `program` to the full archive would evict it at once (it ranks below every elite):
        the archive then stays exactly as it was, so a resume's replay of a long run skips most programs."""
        if program.id in self.archive or len(self.archive) < self.config.archive_size:
            return True
        if self._archive_floor is None:
            self._archive_floor = min(self.archive.values(), key=rank)
        return rank(program) > rank(self._archive_floor)

    def _place(self, island: Island, program: Program) -> bool:
        """Add to an island, evicting one program if over the cap; True when `program` stayed."""
        if (self.config.strategy != "lexicase" and program.id not in island.programs
                and len(island.programs) >= self.config.population_size and rank(program) < rank(island.floor())):
            return False  # it would be the victim itself (the worst, never the best of a full island): no change
        island.put(program)
        if len(island.programs) > self.config.population_size:
            del island.programs[self._eviction_victim(island).id]
        return program.id in island.programs

    def _eviction_victim(self, island: Island) -> Program:
        """The worst by scalar, never the island's best; with lexicase, not a unique best on some objective
        either, unless every program is protected (then the worst non-best goes, so the cap holds)."""
        if self.config.strategy != "lexicase":  # ranks are distinct, so the worst of 2+ is never the best
            return island.floor()
        members = list(island.programs.values())
        best_id = island.best().id
        protected = {best_id}
        if self.config.strategy == "lexicase":
            protected |= unique_bests(members, self.objectives)
        removable = [p for p in members if p.id not in protected] or [p for p in members if p.id != best_id]
        return min(removable, key=rank)

    def sample(self, iteration: int, island: int | None = None) -> tuple[int, Program, tuple[Program, ...]]:
        """Island (round robin by iteration unless given), parent and inspirations for one iteration."""
        if self.empty():
            raise ValueError("no programs to select from: add the seed program first")
        if self.config.strategy == "seed":
            if self.seed_program is None:
                raise ValueError("strategy 'seed' needs the seed program (iteration 0): add it first")
            return self.seed_program.island, self.seed_program, ()
        rng = selection_rng(self.seed, iteration)
        index = (iteration if island is None else island) % len(self.islands)
        while not self.islands[index].programs:
            index = (index + 1) % len(self.islands)
        members = self.islands[index].members()
        parent = self._parent(index, members, rng)
        return index, parent, self._inspirations(index, members, parent, rng)

    def _parent(self, index: int, members: list[Program], rng: random.Random) -> Program:
        if self.config.strategy == "lexicase":
            return lexicase(members, self.objectives, rng, self.config.lexicase_epsilon)
        isolated = index in self.isolated
        draw = rng.random()
        if draw < self.config.exploration_ratio:
            return rng.choice(members)
        if draw < self.config.exploration_ratio + self.config.exploitation_ratio:
            elites = sorted(self.archive.values(), key=lambda program: program.id)
            local = [program for program in elites if program.id in self.islands[index].programs]
            return rng.choice(local or (members if isolated else elites))
        return (None if isolated else self.grid.draw(rng)) or rng.choice(members)

    def _inspirations(self, index: int, members: list[Program], parent: Program,
                      rng: random.Random) -> tuple[Program, ...]:
        """The island's best (unless it is the parent), then elites of other grid cells (not for a restarted
        island), then island members."""
        count = self.config.inspirations
        if count == 0:
            return ()
        chosen: dict[int, Program] = {}
        island_best = max(members, key=rank)
        if island_best.id != parent.id:
            chosen[island_best.id] = island_best
        taken_cells = {self.grid.cell_of(parent), self.grid.cell_of(island_best)}
        # Two extra draws cover the two cells that may be taken; distinct cells hold distinct elites.
        elsewhere = () if index in self.isolated else self.grid.draw_distinct(rng, count + 2)
        for elite in elsewhere:
            if len(chosen) >= count:
                break
            if elite.id != parent.id and elite.id not in chosen and self.grid.cell_of(elite) not in taken_cells:
                chosen[elite.id] = elite
        if len(chosen) < count:
            for program in rng.sample(members, len(members)):
                if len(chosen) >= count:
                    break
                if program.id != parent.id and program.id not in chosen:
                    chosen[program.id] = program
        return tuple(chosen.values())

    def maybe_restart(self, iteration: int) -> int | None:
        """Every restart_interval iterations (once each), the island whose best program ranks lowest (the first of
        equals) restarts from the seed program alone: its members are forgotten (the archive and the grid keep
        theirs) and it is isolated from then on (see _parent, _inspirations). The island restarted, or None."""
        interval = self.config.restart_interval
        if (not interval or self.config.strategy == "seed" or self.seed_program is None or iteration <= 0
                or iteration % interval or iteration in self._restarted_at):
            return None
        self._restarted_at.add(iteration)
        held = [index for index, island in enumerate(self.islands) if island.programs]
        weakest = min(held, key=lambda index: (rank(self.islands[index].best()), index))
        island = self.islands[weakest]
        island.programs, island._floor = {}, None
        island.put(self.seed_program if self.seed_program.island == weakest
                   else dataclasses.replace(self.seed_program, island=weakest))
        self.isolated.add(weakest)
        return weakest

    def maybe_migrate(self, iteration: int) -> list[tuple[Program, int]]:
        """Every migration_interval iterations (once each), copy each island's migration_count best programs to
        the next island in the ring. Returns the copies that stayed as (program, destination island);
        a program the destination already holds is not sent again."""
        interval = self.config.migration_interval
        if len(self.islands) < 2 or iteration <= 0 or iteration % interval or iteration in self._migrated:
            return []
        self._migrated.add(iteration)
        planned: list[tuple[Program, int]] = []
        for index, island in enumerate(self.islands):  # choose all first: a migrant travels one step per migration
            ranked = sorted(island.programs.values(), key=rank, reverse=True)
            planned += [(program, (index + 1) % len(self.islands)) for program in ranked[: self.config.migration_count]]
        moves: list[tuple[Program, int]] = []
        for program, destination in planned:
            target = self.islands[destination]
            if program.id not in target.programs and self._place(target, program):
                moves.append((program, destination))
        # A later migrant may have evicted an earlier one from the same destination.
        return [(program, destination) for program, destination in moves
                if program.id in self.islands[destination].programs]
