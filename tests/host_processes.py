"""What a hostile candidate may leave on the host, seen from the test: processes marked by their command line.

Inside the sandbox's PID namespace a candidate's pids mean nothing to the host, so candidates that try to leave
processes behind become `sleep MARKER`, and the tests look for that command line among the host's processes.
"""

from __future__ import annotations

import os
import secrets
import time


def processes_with_argument(argument: str) -> list[int]:
    """Pids of the host's living (not zombie) processes with `argument` among their command-line arguments."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/cmdline", "rb") as handle:
                arguments = handle.read().split(b"\0")
            with open(f"{entry.path}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if argument.encode() in arguments and state != "Z":
            found.append(int(entry.name))
    return found


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
