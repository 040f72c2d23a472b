"""What every `evolve` subcommand does the same way: the output flag (--out/-o, old spellings as deprecated
aliases), the --set flag, and a console whose tables fit the width they have."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

# Width when stdout is no terminal and COLUMNS is unset: wide enough that no table cell is cut (`se…`) in a log
# or a pipe; a terminal always gets its own width.
UNBOUNDED_WIDTH = 240


def make_console(stream: Any = None) -> Console:
    """A console of the terminal's width on a terminal; elsewhere COLUMNS, else UNBOUNDED_WIDTH (rich's 80 would
    cut table cells mid-word when the output is piped)."""
    console = Console(file=stream)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else UNBOUNDED_WIDTH
    return Console(file=stream, width=width)


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag: stores into the new flag's dest and prints one deprecation line to stderr."""

    def __init__(self, option_strings: Sequence[str], dest: str, replacement: str = "", **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"note: {option_string} is deprecated; use {self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_out_flag(parser: argparse.ArgumentParser, help_text: str, old: Sequence[str] = (), metavar: str = "PATH",
                 **kwargs: Any) -> None:
    """The one output flag, --out/-o (dest `out`); `old` spellings keep working, hidden, with a deprecation note."""
    parser.add_argument("--out", "-o", dest="out", metavar=metavar, help=help_text, **kwargs)
    for spelling in old:
        parser.add_argument(spelling, dest="out", action=DeprecatedAlias, replacement="--out/-o",
                            help=argparse.SUPPRESS, type=kwargs.get("type"))


def add_set_flag(parser: argparse.ArgumentParser, example: str = "policy.answers=3",
                 what: str = "any config key", metavar: str = "SECTION.KEY=VALUE") -> None:
    """--set KEY=VALUE, repeatable; VALUE is read as TOML. A bad one is blamed on the --set, not on the file."""
    parser.add_argument("--set", action="append", default=[], metavar=metavar,
                        help=f"override {what}, e.g. --set {example} (VALUE is read as TOML; repeatable)")
