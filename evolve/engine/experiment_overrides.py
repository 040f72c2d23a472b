"""Overrides of an experiment file's keys (`evolve experiment FILE --set KEY=VALUE`), applied to its table before
validation. A key is the file's own dotted path: a top-level key (`iterations`), a table's key (`run.concurrency`,
`selection.islands`), or a policy's key with the policy named by its index, its name, or `*` for every policy
(`policies.0.max_new_tokens`, `policies.grpo.temperature`, `policies.*.max_new_tokens`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evolve.config import ConfigError


def _step(node: dict[str, Any] | list[Any], part: str, path: str, label: str) -> list[tuple[Any, str]]:
    """The tables `part` names under `node`, each with its concrete dotted path (a policy by its index)."""
    if isinstance(node, list):
        indexed = list(enumerate(node))
        if part == "*":
            chosen = indexed
        elif part.isdigit():
            chosen = [(int(part), node[int(part)])] if int(part) < len(node) else []
            if not chosen:
                raise ConfigError(f"{label}: no {path}.{part} (the file has {len(node)}, numbered from 0)")
        else:
            chosen = [(i, item) for i, item in indexed if isinstance(item, dict) and item.get("name") == part]
            if not chosen:
                names = ", ".join(str(item.get("name")) for item in node if isinstance(item, dict))
                raise ConfigError(f"{label}: no {path} entry named '{part}' (names: {names}; or an index, or *)")
        return [(item, f"{path}.{i}") for i, item in chosen]
    child = node.setdefault(part, {})
    where = f"{path}.{part}" if path else part
    if not isinstance(child, dict | list):
        raise ConfigError(f"{label}: cannot set below '{where}': it is a value, not a table")
    return [(child, where)]


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any],
                    labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """Set each dotted key of `overrides` in `data` (in place). `labels` says how the user wrote each (e.g.
    '--set iterations=2'; default: the key). Returns concrete dotted key -> label, so that a validation error in
    `policies.1.temperature` names the `--set policies.*.temperature=...` that set it."""
    blame: dict[str, str] = {}
    for dotted, value in overrides.items():
        label = (labels or {}).get(dotted, dotted)
        *tables, key = dotted.split(".")
        if not key or any(not part for part in tables):
            raise ConfigError(f"{label}: write KEY=VALUE with a dotted key, e.g. --set run.concurrency=2")
        nodes: list[tuple[Any, str]] = [(data, "")]
        for part in tables:
            nodes = [found for node, path in nodes for found in _step(node, part, path, label)]
        for node, path in nodes:
            if isinstance(node, list) and not all(isinstance(entry, dict) for entry in node):
                raise ConfigError(f"{label}: '{path}' is a list of values, set whole: e.g. --set {path}=[0, 1]")
            if not isinstance(node, dict):
                raise ConfigError(f"{label}: '{path}' is a list; name one of its entries (an index, a name or *)")
            node[key] = value
            blame[f"{path}.{key}" if path else key] = label
    return blame
