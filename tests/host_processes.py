"""What a hostile candidate may leave on the host, seen from the test: processes marked by their command line, or
working in a folder, and whether a pid is still alive (not a zombie).

Inside the sandbox's PID namespace a candidate's pids mean nothing to the host, so candidates that try to leave
processes behind become `sleep MARKER`, and the tests look for that command line among the host's processes.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path


def processes_with_argument(argument: str) -> list[int]:
    """Pids of the host's living (not zombie) processes with `argument` among their command-line arguments."""
    def has_argument(proc: str) -> bool:
        with open(f"{proc}/cmdline", "rb") as handle:
            return argument.encode() in handle.read().split(b"\0")
    return living_where(has_argument)


def processes_under(folder: Path) -> list[int]:
    """Pids of the host's living processes whose working directory is inside `folder` (deleted or not)."""
    return living_where(lambda proc: os.readlink(f"{proc}/cwd").startswith(str(folder)))


def living_where(condition: Callable[[str], bool]) -> list[int]:
    """Pids of the host's living processes whose /proc folder meets `condition` (one that vanishes is skipped)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            meets = condition(entry.path)
        except OSError:
            continue
        if meets and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def sleep_marker() -> str:
    """A `sleep` argument no other process has: a day, with random decimals."""
    return f"86400.{secrets.randbelow(10**9):09d}"


def none_left(marker: str, within_s: float = 2.0) -> bool:
    """Whether no process marked `marker` is alive, waiting up to within_s for the kernel to finish killing."""
    deadline = time.monotonic() + within_s
    while processes_with_argument(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
