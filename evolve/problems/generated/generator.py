"""Seeded generation of composed-operation problems: a chain of operations (as many as the level's steps, some drawn
from the easy tier only), its reference function, visible examples and hidden tests, kept only when every step
matters and no earlier problem behaves the same."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from random import Random
from typing import Any

from evolve.problems.generated.operations import LIST, TEXT, Operation, draw, every_instance
from evolve.problems.problem import ProblemError

DIFFICULTIES = (1, 2, 3, 4)  # the number of operations composed
EXAMPLES = 3
TESTS = 12
PROBE_SEED = 60  # the fixed inputs two functions are compared on (issue 60)
PROBES = 40
MAX_MAGNITUDE = 10**6  # larger answers (a square of a square of a square) make unreadable examples
TRIES = 20_000  # chains drawn before a stream is called exhausted (difficulty 1 has ~130 distinct problems)
INPUT_TRIES = 20
PARAMETER = {LIST: "numbers", TEXT: "text"}
WHAT = {LIST: "the list of integers", TEXT: "the string"}
WORDS = ("apple", "banana", "cat", "dog", "echo", "river", "stone", "light", "green", "house", "moon", "sun",
         "tree", "water", "bird", "cloud", "fire", "road", "book", "star", "hello", "world", "quick", "brown",
         "lazy", "happy", "code", "test", "blue", "sea")

Function = Callable[[Any], Any]


@dataclass(frozen=True)
class Level:
    """A difficulty level: how many operations are composed and, per step, whether it comes from the easy tier
    (operations.EASY), from outside it, or from anywhere. Levels 1-4 are the plain step counts, any operation at
    every step; 2ee (both steps easy) and 2e (a step that is not easy, then an easy one) lie between one step and
    two, disjoint from each other and both parts of level 2."""

    name: str  # as `--difficulty` spells it and problem names carry it (gl_d2e_0007)
    easy: tuple[bool | None, ...]  # one entry per step: True easy only, False not easy, None any
    stream: int  # the seeded stream is Random(seed * 1000 + stream)
    words: str  # what the level is, for problem.toml

    @property
    def steps(self) -> int:
        return len(self.easy)


LEVELS: dict[str, Level] = {
    **{str(steps): Level(str(steps), (None,) * steps, steps, "operations composed") for steps in DIFFICULTIES},
    "2e": Level("2e", (False, True), 21, "two operations composed, the first from outside the easy tier, the "
                "second from it"),
    "2ee": Level("2ee", (True, True), 22, "two operations composed, both from the easy tier"),
}


def level(difficulty: int | str) -> Level:
    """The level `difficulty` names: 1-4 (as a number or its digits), 2e or 2ee; anything else is an error."""
    found = LEVELS.get(str(difficulty).strip().lower())
    if found is None:
        raise ProblemError(f"--difficulty {difficulty}: choose one of {', '.join(LEVELS)} (1-4: the number of "
                           "operations composed; 2ee: two, both easy; 2e: two, only the second easy)")
    return found


@dataclass(frozen=True)
class Case:
    """One input and the reference function's answer to it."""

    argument: Any
    expected: Any


@dataclass(frozen=True)
class GeneratedProblem:
    """One generated problem: its operations, the visible examples and the hidden tests."""

    name: str
    difficulty: int  # the number of operations composed
    seed: int
    index: int  # 1-based place in the (seed, difficulty) stream
    operations: tuple[Operation, ...]
    examples: tuple[Case, ...]
    tests: tuple[Case, ...]
    level: str = ""  # the level's name when it is not the plain step count (2e, 2ee)

    @property
    def takes(self) -> str:
        return self.operations[0].takes

    @property
    def gives(self) -> str:
        return self.operations[-1].gives

    @property
    def parameter(self) -> str:
        return PARAMETER[self.takes]

    @property
    def function(self) -> str:
        return "_".join([self.parameter, "_then_".join(operation.slug for operation in self.operations)])

    @property
    def signature(self) -> str:
        return f"{self.function}({self.parameter}: {self.takes}) -> {self.gives}"

    @property
    def specification(self) -> str:
        """The task in words: the input, then each step in order."""
        phrases = [operation.phrase for operation in self.operations]
        steps = phrases[0] if len(phrases) == 1 else "first " + ", then ".join(phrases)
        return f"Take {WHAT[self.takes]} `{self.parameter}`, {steps}, and return the result."


def problem_name(difficulty: int | str, seed: int, index: int) -> str:
    """gl_d2_0007: the seventh problem of difficulty 2 of seed 0; other seeds carry theirs (gl_s3_d2_0007), so
    problems of different seeds never share a name; a level other than a step count carries its name (gl_d2e_0007)."""
    stream = f"d{difficulty}" if seed == 0 else f"s{seed}_d{difficulty}"
    return f"gl_{stream}_{index:04d}"


def body_lines(operations: tuple[Operation, ...], parameter: str) -> list[str]:
    """The reference body, one assignment a step, as the problem's solution would be written."""
    return [f"value = {parameter}", *(f"value = {operation.expression}" for operation in operations), "return value"]


def compile_chain(operations: tuple[Operation, ...]) -> Function:
    """The reference function of `operations`, compiled here (trusted: our own expressions)."""
    source = "def reference(argument):\n" + "".join(f"    {line}\n" for line in body_lines(operations, "argument"))
    namespace: dict[str, Any] = {}
    exec(compile(source, "<generated reference>", "exec"), namespace)  # noqa: S102 - the operations' own code
    return namespace["reference"]


def draw_input(rng: Random, takes: str) -> Any:
    if takes == LIST:
        return [rng.randint(-5, 15) for _ in range(rng.randint(2, 7))]
    words = rng.sample(WORDS, rng.randint(1, 3))
    shaped = [rng.choices([word, word.title(), word.upper()], weights=[7, 2, 1])[0] for word in words]
    return " ".join(shaped)


def _probes(takes: str) -> list[Any]:
    rng = Random(f"{PROBE_SEED}:{takes}")
    edges: list[Any] = [[], [0], [-3, 3, 3]] if takes == LIST else ["", "a", "Ab cD"]
    return edges + [draw_input(rng, takes) for _ in range(PROBES)]


PROBE_INPUTS = {takes: _probes(takes) for takes in (LIST, TEXT)}


def behaviour(function: Function, arguments: list[Any]) -> tuple[str, ...]:
    return tuple(repr(function(argument)) for argument in arguments)


def _chain(rng: Random, chosen: Level) -> tuple[Operation, ...]:
    takes = rng.choices([LIST, TEXT], weights=[3, 2])[0]
    operations: list[Operation] = []
    for easy in chosen.easy:
        operations.append(draw(rng, operations[-1].gives if operations else takes, operations[-1] if operations
                               else None, easy))
    return tuple(operations)


def _shorter(operations: tuple[Operation, ...]) -> Iterator[tuple[Operation, ...]]:
    """Every proper sub-chain with the same input and output types (dropping steps that could be redundant)."""
    for size in range(1, len(operations)):
        for kept in itertools.combinations(operations, size):
            valid = all(first.gives == second.takes for first, second in itertools.pairwise(kept))
            if valid and kept[0].takes == operations[0].takes and kept[-1].gives == operations[-1].gives:
                yield kept


class _Stream:
    """The problems of one (seed, level), drawn in order; each kept one is remembered for the next."""

    def __init__(self, difficulty: int | str, seed: int) -> None:
        self.level = level(difficulty)
        self.difficulty, self.seed = self.level.steps, seed
        self.rng = Random(seed * 1000 + self.level.stream)
        self.kept: list[tuple[GeneratedProblem, Function]] = []
        self.seen: set[tuple[str, tuple[str, ...]]] = set()
        singles = {takes: every_instance(takes) for takes in (LIST, TEXT)}
        self.singles = {takes: [compile_chain((operation,)) for operation in operations]
                        for takes, operations in singles.items()}

    def _rivals(self, operations: tuple[Operation, ...], function: Function) -> list[Function] | None:
        """The functions this problem's tests must tell it from (its sub-chains and, past one step, every one-step
        function), or None when one of them behaves the same on the probe inputs (a step does nothing)."""
        takes = operations[0].takes
        probes = PROBE_INPUTS[takes]
        own = behaviour(function, probes)
        shorter = [compile_chain(chain) for chain in _shorter(operations)]
        rivals = shorter + (self.singles[takes] if len(operations) > 1 else [])
        identity = tuple(repr(argument) for argument in probes)
        if own == identity or len(set(own)) == 1:
            return None
        for rival in rivals:
            try:
                if behaviour(rival, probes) == own:
                    return None
            except TypeError:  # a one-step function of another output type
                continue
        return rivals

    def _cases(self, function: Function, takes: str, rivals: list[Function]) -> tuple[list[Case], list[Case]] | None:
        """Examples and tests whose answers vary and tell `function` from every rival and every kept problem."""
        for _ in range(INPUT_TRIES):
            arguments: list[Any] = []
            while len(arguments) < EXAMPLES + TESTS:
                argument = draw_input(self.rng, takes)
                if argument not in arguments:
                    arguments.append(argument)
            cases = [Case(argument, function(argument)) for argument in arguments]
            tests = cases[EXAMPLES:]
            shown = {repr(case.expected) for case in cases[:EXAMPLES]}
            if len(shown) == EXAMPLES and self._distinguishing(tests, rivals, function):
                return cases[:EXAMPLES], tests
        return None

    def _distinguishing(self, tests: list[Case], rivals: list[Function], function: Function) -> bool:
        answers = [repr(case.expected) for case in tests]
        if len(set(answers)) == 1 or any(_too_large(case.expected) for case in tests):
            return False
        for rival in rivals:
            if _passes(rival, tests):
                return False
        takes = tests[0].argument.__class__
        for kept, kept_function in self.kept:
            if kept.tests[0].argument.__class__ is takes and (_passes(kept_function, tests)
                                                              or _passes(function, kept.tests)):
                return False
        return True

    def next(self) -> GeneratedProblem:
        for _ in range(TRIES):
            operations = _chain(self.rng, self.level)
            key = (operations[0].takes, tuple(operation.slug for operation in operations))
            if key in self.seen:
                continue
            self.seen.add(key)
            function = compile_chain(operations)
            rivals = self._rivals(operations, function)
            if rivals is None:
                continue
            cases = self._cases(function, operations[0].takes, rivals)
            if cases is None:
                continue
            examples, tests = cases
            index = len(self.kept) + 1
            label = "" if self.level.name == str(self.difficulty) else self.level.name
            problem = GeneratedProblem(problem_name(self.level.name, self.seed, index), self.difficulty, self.seed,
                                       index, operations, tuple(examples), tuple(tests), label)
            self.kept.append((problem, function))
            return problem
        raise ProblemError(f"difficulty {self.level.name}, seed {self.seed}: no new distinct problem after "
                           f"{len(self.kept)} (the space of this level's compositions is used up); "
                           "ask for fewer or another difficulty")


def _too_large(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return any(isinstance(item, int) and abs(item) > MAX_MAGNITUDE for item in values)


def _passes(function: Function, tests: list[Case] | tuple[Case, ...]) -> bool:
    """Whether `function` answers every test as expected (a TypeError is a function of other types: it fails)."""
    try:
        answers = [function(case.argument) for case in tests]
    except (TypeError, AttributeError):
        return False
    return all(type(answer) is type(case.expected) and answer == case.expected
               for answer, case in zip(answers, tests, strict=True))


def generate(count: int, difficulty: int | str, seed: int) -> list[GeneratedProblem]:
    """The first `count` problems of the (seed, difficulty) stream (a step count 1-4 or a level of LEVELS): the same
    arguments give the same problems, and a larger count extends a smaller one."""
    if count < 1:
        raise ProblemError(f"--count {count}: generate at least one problem")
    stream = _Stream(difficulty, seed)
    return [stream.next() for _ in range(count)]


def passing_pairs(problems: list[GeneratedProblem]) -> list[tuple[str, str]]:
    """(a, b) for each problem a whose reference passes every hidden test of another problem b. One stream never
    holds such a pair; a pool mixing streams (levels or seeds) may, and should leave one of each pair out."""
    functions = {problem.name: compile_chain(problem.operations) for problem in problems}
    return [(a.name, b.name) for a, b in itertools.permutations(problems, 2)
            if a.takes == b.takes and _passes(functions[a.name], b.tests)]
