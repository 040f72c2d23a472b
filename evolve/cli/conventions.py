"""What every `evolve` subcommand does the same way: the output flag (--out/-o, old spellings as deprecated
aliases), the --set flag, a console whose tables fit the width they have, and a quiet end when the reader of its
output goes away (`evolve export 1 | head`)."""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console

# Width when stdout is no terminal and COLUMNS is unset: wide enough that no table cell is cut (`se…`) in a log
# or a pipe; a terminal always gets its own width.
UNBOUNDED_WIDTH = 240


# A command whose reader went away ends as a Unix tool killed by SIGPIPE reads to its shell: 128 + 13.
EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE


class OutputClosed(BrokenPipeError):
    """The reader of standard output went away: the command ends quietly with EXIT_OUTPUT_CLOSED."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own answer is SystemExit(1) on the spot, past whatever the command had still to do
        self.quiet = True
        raise OutputClosed()


def make_console(stream: Any = None) -> Console:
    """A console of the terminal's width on a terminal; elsewhere COLUMNS, else UNBOUNDED_WIDTH (rich's 80 would
    cut table cells mid-word when the output is piped). A write to a closed pipe raises OutputClosed."""
    console = _Console(file=stream)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else UNBOUNDED_WIDTH
    return _Console(file=stream, width=width)


def output_closed(error: BrokenPipeError) -> bool:
    """Whether `error` is standard output's reader gone (not a socket's peer): a pipe without a reader polls as an
    error on Linux; once it is known, stdout is pointed at /dev/null so that the exit's flush is quiet too."""
    closed = isinstance(error, OutputClosed)
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else -1
    except (OSError, ValueError):
        fd = -1
    if fd >= 0 and not closed:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    if closed and fd >= 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return closed


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
