"""Python values as tagged JSON, both ways, and the sandbox driver that calls a HumanEval candidate with them.

JSON alone turns tuples into lists (breaking `== (1, 2)`), has no sets, no inf or nan, no dict keys but strings,
and cannot tell 1.0 from 1. Here a list is a JSON array and every other container or float is a one-key object
naming its type: {"tuple": [...]}, {"set": [...]}, {"frozenset": [...]}, {"dict": [[key, value], ...]},
{"float": "repr"}. None, bool, int and str are JSON's own.

This file is also the trusted driver of every imported HumanEval problem: the sandbox's child loads it (before
its confinement, as `drive`) next to the candidate, so it imports nothing beyond the standard library. Values the
candidate returns are encoded there, where the candidate could tamper with anything; `decode` on the trusted side
therefore trusts nothing it is given: any shape or tag it does not know is a ValueError, never a crash.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64  # containers nested deeper than this are refused both ways
_FLOAT_CHARS = 40
_TAGS = ("tuple", "set", "frozenset", "dict", "float")


class EncodeError(ValueError):
    """A value has no tagged form: an unknown type, or nesting past MAX_DEPTH."""


def encode(value: Any, depth: int = 0) -> Any:
    """The tagged-JSON form of a plain Python value (subclasses and numpy scalars become the plain type)."""
    if depth > MAX_DEPTH:
        raise EncodeError(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int:
        return value
    if kind is float:
        return {"float": repr(value)}
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind is tuple:
        return {"tuple": [encode(item, depth + 1) for item in value]}
    if kind is set or kind is frozenset:
        return {kind.__name__: [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[encode(key, depth + 1), encode(item, depth + 1)] for key, item in value.items()]}
    return encode(_plain(value), depth)


def _plain(value: Any) -> Any:
    """The plain value a subclass instance or a numpy scalar or array stands for, read without its own methods."""
    kind = type(value)
    if getattr(kind, "__module__", "") == "numpy" and hasattr(value, "tolist"):
        plain = value.tolist()
        if type(plain) is kind:
            raise EncodeError(f"cannot send a value of type {kind.__name__}")
        return plain
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, dict):
        return dict(dict.items(value))
    for base in (list, tuple, set, frozenset):
        if isinstance(value, base):
            return base(base.__iter__(value))
    raise EncodeError(f"cannot send a value of type {kind.__name__}")


def decode(data: Any, depth: int = 0) -> Any:
    """The Python value of a tagged-JSON form; ValueError (with the reason) for anything that is not one."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(data)
    if data is None or kind is bool or kind is str or kind is int or kind is float:
        return data
    if kind is list:
        return [decode(item, depth + 1) for item in data]
    if kind is not dict or len(data) != 1:
        raise ValueError(f"not a tagged value: {kind.__name__}")
    tag, body = next(iter(data.items()))
    if tag not in _TAGS:
        raise ValueError(f"unknown tag {str(tag)[:20]!r}")
    if tag == "float":
        if type(body) is not str or len(body) > _FLOAT_CHARS:
            raise ValueError("a float tag must hold a short string")
        return float(body)
    if type(body) is not list:
        raise ValueError(f"a {tag} tag must hold a list")
    if tag == "dict":
        if any(type(pair) is not list or len(pair) != 2 for pair in body):
            raise ValueError("a dict tag must hold [key, value] pairs")
        return _hashable(lambda: {decode(key, depth + 1): decode(item, depth + 1) for key, item in body})
    items = [decode(item, depth + 1) for item in body]
    if tag == "tuple":
        return tuple(items)
    return _hashable(lambda: set(items) if tag == "set" else frozenset(items))


def _hashable(build: Any) -> Any:
    try:
        return build()
    except TypeError as exc:  # a list or dict as a set member or a dict key
        raise ValueError(f"unhashable member: {exc}") from None


def drive(candidate: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """In the sandbox: candidate.<function>(*args) as {"value": tagged}, or {"bad_output": why} when the result
    has no tagged form; without args, {"defined": whether the function exists}. Exceptions of the candidate's
    reach the sandbox, which reports them as a crash."""
    function = getattr(candidate, payload["function"], None)
    if payload.get("args") is None:
        return {"defined": callable(function)}
    if not callable(function):
        raise NameError(f"the program defines no function '{payload['function']}'")
    result = function(*decode(payload["args"]))
    try:
        return {"value": encode(result)}
    except (EncodeError, RecursionError) as exc:
        return {"bad_output": f"returned a value that cannot be sent back ({exc})"}
