"""The operations a generated problem composes: each one Python expression of the previous step's value, a phrase in
words, an identifier slug and the types it takes and gives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from random import Random

LIST = "list[int]"
TEXT = "str"
NUMBER = "int"


@dataclass(frozen=True)
class OperationKind:
    """An operation before its parameter is chosen: `expression` and `phrase` may hold {k}, drawn from `values`."""

    kind: str
    takes: str
    gives: str
    expression: str  # of `value`, the previous step's result
    phrase: str
    slug: str
    values: tuple[object, ...] = ()


@dataclass(frozen=True)
class Operation:
    """One step of a generated function, its parameter filled in."""

    kind: str
    takes: str
    gives: str
    expression: str
    phrase: str
    slug: str


Row = tuple[str, str, str, str, tuple[object, ...]]  # kind, expression, phrase, slug, parameter values


def _kinds(takes: str, gives: str, rows: Sequence[Row]) -> list[OperationKind]:
    return [OperationKind(kind, takes, gives, expression, phrase, slug, values)
            for kind, expression, phrase, slug, values in rows]


KINDS: tuple[OperationKind, ...] = tuple(
    _kinds(LIST, LIST, [
        ("double", "[v * 2 for v in value]", "double every number", "double", ()),
        ("add", "[v + {k} for v in value]", "add {k} to every number", "add_{k}", tuple(range(1, 10))),
        ("subtract", "[v - {k} for v in value]", "subtract {k} from every number", "subtract_{k}",
         tuple(range(1, 10))),
        ("multiply", "[v * {k} for v in value]", "multiply every number by {k}", "times_{k}", (3, 4, 5, 10)),
        ("square", "[v * v for v in value]", "square every number", "square", ()),
        ("negate", "[-v for v in value]", "change the sign of every number", "negate", ()),
        ("absolute", "[abs(v) for v in value]", "replace every number by its absolute value", "absolute", ()),
        ("remainder", "[v % {k} for v in value]", "replace every number by its remainder when divided by {k}",
         "mod_{k}", (2, 3, 4, 5, 10)),
        ("keep_even", "[v for v in value if v % 2 == 0]", "keep only the even numbers", "evens", ()),
        ("keep_odd", "[v for v in value if v % 2 != 0]", "keep only the odd numbers", "odds", ()),
        ("keep_above", "[v for v in value if v > {k}]", "keep only the numbers greater than {k}", "above_{k}",
         tuple(range(0, 11))),
        ("keep_below", "[v for v in value if v < {k}]", "keep only the numbers less than {k}", "below_{k}",
         tuple(range(0, 11))),
        ("remove", "[v for v in value if v != {k}]", "remove every {k}", "without_{k}", tuple(range(0, 6))),
        ("reverse", "value[::-1]", "reverse the order of the numbers", "reverse", ()),
        ("sort", "sorted(value)", "sort the numbers from smallest to largest", "sort", ()),
        ("sort_down", "sorted(value, reverse=True)", "sort the numbers from largest to smallest", "sort_down", ()),
        ("first", "value[:{k}]", "keep only the first {k} number{ks}", "first_{k}", (1, 2, 3)),
        ("drop", "value[{k}:]", "remove the first {k} number{ks}", "drop_{k}", (1, 2)),
        ("unique", "list(dict.fromkeys(value))", "remove repeated numbers, keeping the first time each appears",
         "unique", ()),
        ("append", "value + [{k}]", "put {k} at the end of the list", "append_{k}", tuple(range(0, 10))),
        ("running_sum", "[sum(value[:i + 1]) for i in range(len(value))]",
         "replace every number by the sum of it and all the numbers before it", "running_sum", ()),
    ])
    + _kinds(LIST, NUMBER, [
        ("sum", "sum(value)", "add up the numbers", "sum", ()),
        ("count", "len(value)", "count the numbers", "count", ()),
        ("count_even", "sum(1 for v in value if v % 2 == 0)", "count the even numbers", "count_evens", ()),
        ("count_above", "sum(1 for v in value if v > {k})", "count the numbers greater than {k}",
         "count_above_{k}", tuple(range(0, 11))),
        ("largest", "max(value, default=0)", "take the largest number (0 when there are none)", "largest", ()),
        ("smallest", "min(value, default=0)", "take the smallest number (0 when there are none)", "smallest", ()),
    ])
    + _kinds(NUMBER, NUMBER, [
        ("add", "value + {k}", "add {k} to that number", "plus_{k}", tuple(range(1, 10))),
        ("multiply", "value * {k}", "multiply that number by {k}", "times_{k}", (2, 3, 4, 5, 10)),
        ("square", "value * value", "square that number", "squared", ()),
        ("remainder", "value % {k}", "take that number's remainder when divided by {k}", "mod_{k}", (2, 3, 5, 10)),
    ])
    + _kinds(TEXT, TEXT, [
        ("reverse", "value[::-1]", "reverse the string", "reverse", ()),
        ("upper", "value.upper()", "convert every letter to upper case", "upper", ()),
        ("lower", "value.lower()", "convert every letter to lower case", "lower", ()),
        ("swapcase", "value.swapcase()", "swap the case of every letter (upper to lower, lower to upper)",
         "swapcase", ()),
        ("title", "value.title()", "make the first letter of every word upper case and its other letters lower case",
         "title", ()),
        ("no_vowels", "''.join(c for c in value if c.lower() not in 'aeiou')",
         "remove every vowel (a, e, i, o, u, in either case)", "no_vowels", ()),
        ("no_spaces", "value.replace(' ', '')", "remove every space", "no_spaces", ()),
        ("join_with", "value.replace(' ', {k!r})", "replace every space by {k!r}", "spaces_to_{s}", ("_", "-", "*")),
        ("double_chars", "''.join(c * 2 for c in value)", "write every character twice", "double_chars", ()),
        ("first_chars", "value[:{k}]", "keep only the first {k} character{ks}", "first_{k}", (1, 2, 3, 4, 5)),
        ("drop_chars", "value[{k}:]", "remove the first {k} character{ks}", "drop_{k}", (1, 2, 3)),
        ("reverse_words", "' '.join(value.split()[::-1])", "reverse the order of the words", "reverse_words", ()),
        ("sort_words", "' '.join(sorted(value.split(), key=str.lower))",
         "sort the words alphabetically, ignoring case (words that tie keep their order)", "sort_words", ()),
        ("suffix", "value + {k!r}", "put {k!r} at the end", "ending_{s}", ("!", "?", ".")),
    ])
    + _kinds(TEXT, NUMBER, [
        ("length", "len(value)", "count its characters", "length", ()),
        ("vowels", "sum(1 for c in value if c.lower() in 'aeiou')",
         "count its vowels (a, e, i, o, u, in either case)", "count_vowels", ()),
        ("words", "len(value.split())", "count its words", "count_words", ()),
        ("letter", "value.count({k!r})", "count how many times the lower-case letter {k!r} appears",
         "count_{k}", tuple("aeilnorst")),
    ])
    + _kinds(TEXT, LIST, [
        ("word_lengths", "[len(w) for w in value.split()]", "make the list of the lengths of its words",
         "word_lengths", ()),
    ])
)

# kinds whose two in a row say one thing (lower then swapcase is upper; add then subtract is one shift)
_GROUPS = {"upper": "case", "lower": "case", "swapcase": "case", "title": "case", "add": "shift", "subtract": "shift"}
_SYMBOL_NAMES = {"_": "underscores", "-": "dashes", "*": "stars", "!": "bang", "?": "question", ".": "dot"}


def instantiate(kind: OperationKind, parameter: object = None) -> Operation:
    """`kind` with its parameter filled in (None for a kind without one)."""
    fill = {"k": parameter, "s": _SYMBOL_NAMES.get(str(parameter), str(parameter)), "ks": "" if parameter == 1 else "s"}
    return Operation(kind.kind, kind.takes, kind.gives, kind.expression.format(**fill), kind.phrase.format(**fill),
                     kind.slug.format(**fill))


def every_instance(takes: str) -> list[Operation]:
    """Every operation taking `takes`, each parameter value once (the one-step problems' whole space)."""
    return [instantiate(kind, value) for kind in KINDS if kind.takes == takes for value in (kind.values or (None,))]


# The easy tier (levels 2e and 2ee of generator.LEVELS), by one rule: a step is easy when it handles each element
# alone or the whole value in one built-in call that needs no order or position: an element-wise map (of numbers or
# characters), a filter by a test of the element alone, the reversal of the whole value, one arithmetic operation on
# a number, or sum / len / max / min / str.count / a case change of the whole string. Not easy: what depends on order
# or position or on other elements (sorting, first or drop k, repeats, running sums, appending, words as units,
# title case) and the counts that are a filter then a count.
EASY: frozenset[tuple[str, str]] = frozenset(
    [(LIST, kind) for kind in ("double", "add", "subtract", "multiply", "square", "negate", "absolute", "remainder",
                               "keep_even", "keep_odd", "keep_above", "keep_below", "remove", "reverse")]
    + [(LIST, kind) for kind in ("sum", "count", "largest", "smallest")]
    + [(NUMBER, kind) for kind in ("add", "multiply", "square", "remainder")]
    + [(TEXT, kind) for kind in ("reverse", "upper", "lower", "swapcase", "no_vowels", "no_spaces", "join_with",
                                 "double_chars", "length", "letter")])


def is_easy(kind: OperationKind | Operation) -> bool:
    """Whether `kind` is in the easy tier (EASY: its kind and the type it takes)."""
    return (kind.takes, kind.kind) in EASY


def draw(rng: Random, takes: str, previous: Operation | None, easy: bool | None = None) -> Operation:
    """A random operation taking `takes`, never of the same kind or group and types as `previous` (add 3 then add 4
    is one addition); `easy` True: from the easy tier only, False: from outside it, None: any (the draw as it always
    was)."""
    kinds = [kind for kind in KINDS if kind.takes == takes and (previous is None or _group(kind.kind, kind.takes)
                                                                != _group(previous.kind, previous.takes))
             and (easy is None or is_easy(kind) == easy)]
    kind = rng.choice(kinds)
    return instantiate(kind, rng.choice(kind.values) if kind.values else None)


def _group(kind: str, takes: str) -> tuple[str, str]:
    return _GROUPS.get(kind, kind), takes
