"""The TOML files a user writes (evolve.toml, experiments, problem.toml, training configs): read, validated by a
strict pydantic model, and every mistake turned into one line that names the file, the key and the fix."""

from __future__ import annotations

import re
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.errors import UserError


class StrictModel(BaseModel):
    """A file's table: unknown keys are refused (a typo is never silently ignored), values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def check_names(names: tuple[str, ...], what: str) -> None:
    """ValueError unless every name is non-blank and given once; `what` names them ("objective", "feature")."""
    if any(not name.strip() for name in names):
        raise ValueError(f"{what} names must not be empty")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{what} names must be distinct; repeated: {', '.join(repeated)}")


def read_toml(path: str | Path, error: type[UserError]) -> dict[str, Any]:
    """A TOML file's table, or `error` naming the file (not found, unreadable, not TOML)."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text, so not a TOML file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc}){_triple_quote_hint(path)}") from None


def _triple_quote_hint(path: str | Path) -> str:
    """A hint when a basic multi-line string (\"\"\"...\"\"\") holds \"\"\" (a pasted docstring) and so ends early."""
    text = Path(path).read_text(encoding="utf-8")
    opened = len(re.findall(r'=[ \t]*"""', text))
    if opened and text.count('"""') > 2 * opened:
        return ("; a \"\"\"...\"\"\" string seems to hold \"\"\" (a docstring?), which ends it: write that value as "
                "a literal string, '''...''', which may hold \"\"\" and backslashes as they are")
    return ""


@dataclass(frozen=True)
class ErrorLocation:
    """A pydantic error's location read against the model that failed."""

    parts: tuple[str, ...]  # the key as the file spells it (a tagged union's tag left out)
    owner: type[BaseModel] | None  # the model whose field the last part is; None past a plain value
    tag: str = ""  # the tag of the last tagged union passed through (a policy's backend)

    @property
    def key(self) -> str:
        return ".".join(self.parts) or "(top level)"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: itself, or the members of an (annotated) union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [model for member in typing.get_args(annotation) for model in _models_in(member)]
    return []


def _tagged(models: list[type[BaseModel]], tag: str) -> type[BaseModel] | None:
    """The union member whose Literal field has the value `tag` (pydantic puts that tag in an error's path)."""
    for model in models:
        for field in model.model_fields.values():
            if typing.get_origin(field.annotation) is typing.Literal and tag in typing.get_args(field.annotation):
                return model
    return None


def error_location(model: type[BaseModel], loc: tuple[Any, ...]) -> ErrorLocation:
    """Walk loc through the model: fields of models, items of lists, and the tags of tagged unions."""
    parts: list[str] = []
    owner: type[BaseModel] | None = None
    annotation: Any = model
    tag = ""
    for part in loc:
        models = _models_in(annotation)
        if len(models) == 1:
            owner = models[0]
            field = owner.model_fields.get(str(part))
            annotation = field.annotation if field else None
        elif len(models) > 1 and isinstance(part, str) and (member := _tagged(models, part)) is not None:
            annotation, tag = member, part
            continue
        elif isinstance(part, int) and typing.get_origin(annotation) in (tuple, list):
            owner, annotation = None, typing.get_args(annotation)[0]
        else:
            owner, annotation = None, None
        parts.append(str(part))
    return ErrorLocation(tuple(parts), owner, tag)


def describe_error(error: Any, source: str | Path, model: type[BaseModel]) -> str:
    """One line for one pydantic error: the file, the dotted key, and what is allowed or wrong."""
    where = error_location(model, tuple(error["loc"]))
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(where.owner.model_fields) if where.owner else ""
        return f"{source}: unknown key '{where.key}' (allowed here: {allowed})"
    if error["type"] == "missing":
        return f"{source}: missing key '{where.key}'"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if error["type"] == "value_error" and isinstance(value, dict):  # a check across keys: the table is no help
        return f"{source}: {message}" if not where.parts else f"{source}: invalid value for '{where.key}': {message}"
    return f"{source}: invalid value for '{where.key}': {value!r} ({message})"


def format_validation_error(exc: ValidationError, source: str | Path, model: type[BaseModel]) -> str:
    """The one line for a failed validation: a typo (unknown key) first, since it often causes the rest."""
    errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
    return describe_error(errors[0], source, model)


def blamed_source(error: Any, source: str | Path, model: type[BaseModel], blame: dict[str, str] | None) -> str:
    """Who set the value an error is about: the override (a --set or a flag; `blame` maps its dotted key to how the
    user wrote it) whose key is the error's key, holds it or lies inside it, else the file `source`. An error across
    keys of the whole file names the file and the overrides both."""
    if not blame:
        return str(source)
    key = error_location(model, tuple(error["loc"])).parts
    if not key:
        return f"{source} with {', '.join(blame.values())}"
    for dotted, label in blame.items():
        parts = tuple(dotted.split("."))
        shared = min(len(parts), len(key))
        if parts[:shared] == key[:shared]:
            return label
    return str(source)
