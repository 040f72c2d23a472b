"""UserError: the base of every error the user can fix, whose message is one complete line (the CLI prints it).

Anything else that escapes a command is the engine's bug and keeps its traceback. This module imports nothing,
so any module may subclass UserError without pulling in others.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (a config key, a problem folder, a run id...), worded as one line that names
    the thing and the fix. `evolve` prints it as `error: <line>` and exits 1 (ConfigError: exit 2)."""

    def __str__(self) -> str:
        # one message argument is the line, also for subclasses of KeyError, whose own str would quote it
        if len(self.args) == 1:
            return " ".join(str(self.args[0]).splitlines())
        return super().__str__()
