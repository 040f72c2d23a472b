"""The three ways problem.toml declares its objectives: a list of names, {count, name}, or {pattern}."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import Field, StrictInt, ValidationError, field_validator

from evolve.toml_files import StrictModel, check_names


class ObjectiveCount(StrictModel):
    """`objectives = {count = 100, name = "test_{i:02d}"}`: names made by formatting `name` with i = 0..count-1."""

    count: StrictInt = Field(ge=1, le=1_000_000, description="how many objectives, numbered 0 to count - 1")
    name: str = Field("test_{i}", description="each objective's name; {i} is its number, {i:03d} pads it")

    @field_validator("name")
    @classmethod
    def _numbered(cls, name: str) -> str:
        try:
            first, second = name.format(i=0), name.format(i=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"{name!r} must hold {{i}} (the objective's number) and no other {{...}}: {exc}") from None
        if first == second or not first.strip():
            raise ValueError(f"{name!r} must hold {{i}}, so that every objective gets its own name")
        return name

    def names(self) -> tuple[str, ...]:
        return tuple(self.name.format(i=i) for i in range(self.count))


class ObjectivePattern(StrictModel):
    """`objectives = {pattern = "test_*"}`: the names the evaluator returns, which must all match the pattern
    (shell-style: *, ?, [seq]); resolved from the first evaluation (the seed program's) and fixed after it."""

    pattern: str = Field(min_length=1, description="a shell-style wildcard (*, ?, [seq]) that every objective "
                         "name the evaluator returns must match")

    @field_validator("pattern")
    @classmethod
    def _wildcard(cls, pattern: str) -> str:
        if not any(character in pattern for character in "*?["):
            raise ValueError(f"{pattern!r} has no wildcard (*, ? or [...]); write objectives = [{pattern!r}]")
        return pattern


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """test_2 before test_10: digit runs compare as numbers."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part]


def objective_order(names: Iterable[str]) -> tuple[str, ...]:
    """Names in the order a pattern problem's vector uses: natural order (test_2 before test_10)."""
    return tuple(sorted(names, key=_natural_key))


def parse_objectives(value: object) -> object:
    """A list of names, {count, name} or {pattern}, each with its own one-line error (not a union's three)."""
    if isinstance(value, dict):
        form: type[StrictModel] = ObjectivePattern if "pattern" in value and "count" not in value else ObjectiveCount
        if not {"count", "pattern"} & set(value) or {"count", "pattern"} <= set(value):
            raise ValueError('a table of objectives is {count = N, name = "test_{i}"} or {pattern = "test_*"}')
        try:
            return form.model_validate(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            key = ".".join(map(str, error["loc"]))
            if error["type"] == "extra_forbidden":
                raise ValueError(f"unknown key {key!r} (allowed: {', '.join(form.model_fields)})") from None
            raise ValueError(f"{key}: {str(error['msg']).removeprefix('Value error, ')}") from None
    if not isinstance(value, list | tuple) or not all(isinstance(name, str) for name in value):
        raise ValueError('objectives is a list of names, {count = N, name = "test_{i}"} or {pattern = "test_*"}')
    return value


def checked_names(names: tuple[str, ...] | ObjectiveCount | ObjectivePattern,
                  ) -> tuple[str, ...] | ObjectivePattern:
    """The names of a list or a count, at least one, non-empty and distinct; a pattern as it is."""
    if isinstance(names, ObjectivePattern):
        return names
    if isinstance(names, ObjectiveCount):
        names = names.names()
    if not names:
        raise ValueError("declare at least one objective")
    check_names(names, "objective")
    return names
