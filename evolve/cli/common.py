"""What several `evolve` commands share: the config file they read, `--set` overrides, the store they open."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.config import ConfigError, RunConfig

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


def experiment_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """Every --set of `evolve experiment` / `evolve report` as (key -> value, key -> '--set ITEM'); the keys are
    the experiment file's own (iterations, run.concurrency, policies.0.max_new_tokens), top-level ones too."""
    values: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for item in getattr(args, "set", []):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: write KEY=VALUE, e.g. --set iterations=4 or --set run.concurrency=2")
        values[key.strip()] = toml_value(raw)
        labels[key.strip()] = f"--set {item.strip()}"
    return values, labels


def toml_value(raw: str) -> Any:
    """A --set value read as TOML ('2', '1e-5', '["a"]', 'true'); anything else is taken as a string."""
    try:
        return tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return raw.strip()


def run_config(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The config file (see config_path), then `overrides` (flags; None values are skipped), then every --set; the
    file's relative paths read from its folder, as `evolve run -c FILE` reads them (so `evolve runs -c FILE` finds
    the store that run wrote). A bad value names what set it: the --set, the flag (--iterations for
    run.iterations), or the file."""
    from evolve.api import load_run_config

    merged, blame = command_settings(args, overrides)
    return load_run_config(config_path(getattr(args, "config", None)), merged, blame)


def command_settings(args: argparse.Namespace, overrides: dict[str, Any] | None = None
                     ) -> tuple[dict[str, Any], dict[str, str]]:
    """`overrides` (flags) then every --set, as ({'section.key': value}, {'section.key': how the user wrote it})."""
    merged: dict[str, Any] = dict(overrides or {})
    blame = {key: f"--{key.rpartition('.')[2].replace('_', '-')}" for key in merged}
    for item in getattr(args, "set", []):
        setting = parse_setting(item)
        merged.update(setting)
        blame.update({key: f"--set {item.strip()}" for key in setting})
    return merged, blame


def read_store(args: argparse.Namespace) -> ProgramStore:
    """The store named by --db, else the config's, opened read-only."""
    from evolve.store.program_store import ProgramStore

    return ProgramStore(args.db or run_config(args).run.db, mode="read")
