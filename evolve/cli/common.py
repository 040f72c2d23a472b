"""What several `evolve` commands share: the config file they read, `--set` overrides, the store they open."""

from __future__ import annotations

import argparse
import os
import secrets
import stat
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from evolve.config import ConfigError, RunConfig
from evolve.errors import UserError

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


class OutputError(UserError):
    """An output file (--out, --hard-out) that cannot be written, as one line naming it and the reason."""


def _cannot_write(path: str | Path, reason: str) -> OutputError:
    return OutputError(f"cannot write {path}: {reason}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _target(path: str | Path) -> Path:
    """The file a write to `path` lands in (a link's target, as writing through the link would), checked to be no
    folder; OutputError otherwise."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise _cannot_write(path, "it is a folder; name a file")
    if not target.parent.is_dir():
        raise _cannot_write(path, f"{target.parent} is not a folder" if target.parent.exists() else
                            f"no folder {target.parent}")
    return target


def check_output_path(path: str | Path) -> None:
    """OutputError unless a file can be written at `path` (its folder exists and takes a new file; not a folder
    itself): what a command checks before long work whose result it writes there. Leaves nothing behind."""
    _, handle, partial = _open_partial(path)
    os.close(handle)
    os.unlink(partial)


def _open_partial(path: str | Path) -> tuple[Path, int, Path]:
    """The file a write to `path` lands in, and a new partial file beside it (descriptor, path); OutputError, one
    line, when either cannot be."""
    target = _target(path)
    try:
        return (target, *_partial_beside(target))
    except OSError as exc:
        raise _cannot_write(path, _reason(exc)) from None


def _partial_beside(target: Path) -> tuple[int, Path]:
    """A new, empty file beside `target` (its descriptor and path), made with the permissions a new file gets
    (0o666 less the umask) or, when `target` exists, its own."""
    for _ in range(100):
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        try:
            handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        try:
            os.fchmod(handle, stat.S_IMODE(target.stat().st_mode))
        except OSError:  # no such target yet (or not ours to read): the new file's own permissions stay
            pass
        return handle, partial
    raise FileExistsError(f"no free name for a partial file beside {target}")


@contextmanager
def replaced_file(path: str | Path) -> Iterator[TextIO]:
    """A UTF-8 text file to write `path` through: written beside it and renamed onto it once the block ends without
    error, so `path` holds either what it held before or the whole new text, never a part; on any error the partial
    file is removed. A file that cannot be written is one OutputError line naming `path` and why (so is any OSError
    raised inside the block: the block is meant to write the file, nothing else)."""
    target, handle, partial = _open_partial(path)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise _cannot_write(path, _reason(exc)) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_output(path: str | Path, text: str) -> None:
    """`text` written to `path` whole (see replaced_file); OutputError, one line, when it cannot be."""
    with replaced_file(path) as out:
        out.write(text)
