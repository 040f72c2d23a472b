"""Shell completion of `evolve` with argcomplete: `evolve completion bash|zsh|fish` prints the code a shell runs to
complete commands, flags, choices and problem names, and `complete` answers the shell's requests from the one
parser."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from evolve.errors import UserError

SHELLS = ("bash", "zsh", "fish")
INSTALL_HINT = "shell completion needs argcomplete: pip install argcomplete"


class CompletionError(UserError):
    """argcomplete is not installed."""


def add_command(commands: argparse._SubParsersAction) -> None:
    completion = commands.add_parser(
        "completion", help="print the shell code that tab-completes evolve's commands and flags",
        description="Print the code that makes your shell tab-complete evolve's commands, flags and choices "
                    "(needs argcomplete). Load it from your shell's startup file, e.g. for bash add "
                    "eval \"$(evolve completion bash)\" to ~/.bashrc; for zsh add the same line with zsh to "
                    "~/.zshrc; for fish run evolve completion fish > ~/.config/fish/completions/evolve.fish.",
        epilog="examples:\n  eval \"$(evolve completion bash)\"\n  evolve completion zsh >> ~/.zshrc\n"
               "  evolve completion fish > ~/.config/fish/completions/evolve.fish",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    completion.add_argument("shell", choices=SHELLS, help="the shell to print the completion code for")
    completion.set_defaults(handler=cmd_completion)


def complete_problems(action: argparse.Action) -> None:
    """Tab-complete the argument of `action` with the problem names of the programs folder (see problem_names)."""
    action.completer = problem_names  # type: ignore[attr-defined]  # argcomplete reads this attribute


def problem_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The problems of the command's --programs-dir, else of the config's run.programs_dir (-c, else ./evolve.toml),
    else of programs/, that start with `prefix`; none when the config cannot be read (a completion never fails)."""
    from evolve.problems.problem import list_problems

    folder = getattr(parsed_args, "programs_dir", None)
    if folder is None:
        from evolve.cli.common import config_path
        from evolve.config import load_config

        path = config_path(getattr(parsed_args, "config", None))
        try:
            folder = load_config(path).run.programs_dir
        except UserError:
            return []
        if path is not None and not Path(folder).is_absolute():  # read from the file's folder, as `evolve run` does
            folder = str(Path(path).parent / folder)
    return [name for name in list_problems(Path(folder)) if name.startswith(prefix)]


def _argcomplete() -> Any:
    try:
        import argcomplete
    except ImportError:
        return None
    return argcomplete


def complete(parser: argparse.ArgumentParser) -> None:
    """When the shell asks for completions (_ARGCOMPLETE set), print them and exit; otherwise return at once.
    Without argcomplete installed there is nothing to answer with, and nothing happens."""
    argcomplete = _argcomplete()
    if argcomplete is not None:
        argcomplete.autocomplete(parser)


def cmd_completion(args: argparse.Namespace, console: Console) -> int:
    argcomplete = _argcomplete()
    if argcomplete is None:
        raise CompletionError(INSTALL_HINT)
    print(argcomplete.shellcode(["evolve"], shell=args.shell), end="")
    return 0
