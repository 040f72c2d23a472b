"""What several `evolve` commands share: the config file they read, `--set` overrides, the store they open."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.config import ConfigError, RunConfig, load_config

if TYPE_CHECKING:
    from evolve.store.program_store import ProgramStore

DEFAULT_CONFIG = "evolve.toml"


def config_path(explicit: str | None) -> str | None:
    """The config file a command reads: the one named, else ./evolve.toml if present, else none (defaults)."""
    return explicit or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).exists() else None)


def parse_setting(item: str) -> dict[str, object]:
    """'policy.answers=3' -> {'policy.answers': 3}; a value that is not TOML is taken as a string."""
    key, sep, raw = item.partition("=")
    if not sep or "." not in key.strip():
        raise ConfigError(f"--set {item!r}: write SECTION.KEY=VALUE, e.g. --set policy.answers=3")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return {key.strip(): value}


def run_config(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The config file (see config_path), then `overrides` (flags; None values are skipped), then every --set."""
    merged: dict[str, Any] = dict(overrides or {})
    for item in getattr(args, "set", []):
        merged.update(parse_setting(item))
    return load_config(config_path(getattr(args, "config", None)), merged)


def read_store(args: argparse.Namespace) -> ProgramStore:
    """The store named by --db, else the config's, opened read-only."""
    from evolve.store.program_store import ProgramStore

    return ProgramStore(args.db or run_config(args).run.db, mode="read")
