"""Temporary folders that name their owning process, so folders left by a killed process can be removed later.

A folder is `<prefix><pid>.<start>.<pidns>-<random>` in the temporary directory, where <start> is the owner's
start time (clock ticks since boot, /proc/PID/stat field 22), so a pid reused by another process does not keep a
dead owner's folder alive, and <pidns> the inode of its pid namespace, so a temporary directory shared with
another container is never judged by pids that mean other processes here. `remove_stale_folders(prefix)`
removes every such folder of this pid namespace whose owner is gone, and never one whose owner still runs (or
whose liveness cannot be read).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from evolve.sandbox.supervisor import remove_folder

_OWNED = re.compile(r"(\d+)\.(\d+)\.(\d+)-")


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot; None if it does not exist (or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def pid_namespace() -> int:
    """The inode number of this process's pid namespace (0 where it cannot be read)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_tag() -> str:
    """`<pid>.<start>.<pidns>` of this process, for the name of a folder it owns."""
    return f"{os.getpid()}.{process_start(os.getpid()) or 0}.{pid_namespace()}"


def make_owned_folder(prefix: str) -> Path:
    """A new private temporary folder named for this process (see the module docstring)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner_tag()}-"))


def owner_is_gone(name: str, prefix: str) -> bool:
    """Whether the folder `name` (under `prefix`) names an owner that has ended; False when it names none."""
    match = _OWNED.match(name[len(prefix):]) if name.startswith(prefix) else None
    if match is None or int(match.group(3)) != pid_namespace() or pid_namespace() == 0:
        return False
    pid, start = int(match.group(1)), int(match.group(2))
    try:
        running = process_start(pid)
    except (OSError, ValueError):  # unreadable: assume it lives
        return False
    return running is None or running != start


def remove_stale_folders(prefix: str, parent: str | Path | None = None) -> list[Path]:
    """Remove the folders under `parent` (default: the temporary directory) left by owners that have ended;
    returns those removed."""
    folder = Path(parent if parent is not None else tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if owner_is_gone(name, prefix) and (folder / name).is_dir() and not (folder / name).is_symlink():
            remove_folder(folder / name)
            removed.append(folder / name)
    return removed
