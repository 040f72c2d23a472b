"""Lease holders' names and whether one is provably dead: a holder on this host whose process is gone.

A holder is `host:pid:token;start=TICKS;pidns=ID`: the host name, the process id, a random token (two stores of one
process), the process's start time (field 22 of /proc/PID/stat, clock ticks since boot) and its PID namespace (the
inode of /proc/self/ns/pid; "none" where the system has no PID namespaces). Only a holder named with this host and
this PID namespace can be judged from here: it is dead when its pid is gone, is a zombie, or now belongs to a process
that started at another time (the pid was reused). Any other holder (another host, another container, a holder
named before start times were recorded) is taken to be alive until its lease expires.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from field 3 (state) on, None when the file cannot be read. The command name (field
    2) is in parentheses and may hold spaces and parentheses itself, so the fields start after the last ')'."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time since boot in clock ticks (/proc/PID/stat field 22); None where unknown."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        return int(fields[19])  # field 22; fields[0] is field 3
    except ValueError:
        return None


def pid_namespace() -> str | None:
    """This process's PID namespace: the inode of /proc/self/ns/pid on Linux, "none" on systems without PID
    namespaces, None on a Linux where it cannot be read (then no holder can be judged dead from here)."""
    if not sys.platform.startswith("linux"):
        return "none"
    try:
        link = os.readlink(PROC / "self" / "ns" / "pid")  # "pid:[4026531836]"
    except OSError:
        return None
    digits = re.sub(r"\D", "", link)
    return digits or None


@dataclass(frozen=True)
class Holder:
    """A parsed holder name; start and pidns are None when not recorded (holders named by older versions)."""

    host: str
    pid: int
    start: int | None
    pidns: str | None


def new_holder() -> str:
    """This process's name in the leases it takes (see the module docstring)."""
    pid = os.getpid()
    name = f"{socket.gethostname()}:{pid}:{secrets.token_hex(4)}"
    start, namespace = start_ticks(pid), pid_namespace()
    if start is not None:
        name += f";start={start}"
    if namespace is not None:
        name += f";pidns={namespace}"
    return name


def parse_holder(holder: str) -> Holder | None:
    """The parts of a holder name; None when it is not one (the host and pid are needed)."""
    head, *extras = holder.split(";")
    parts = head.split(":")
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    fields = dict(extra.split("=", 1) for extra in extras if "=" in extra)
    start = fields.get("start", "")
    return Holder(parts[0], int(parts[1]), int(start) if start.isdigit() else None, fields.get("pidns") or None)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def holder_dead(holder: str) -> bool:
    """True only when the holder provably no longer runs: it is on this host and PID namespace, and its pid is
    gone, a zombie, or a process with another start time than the one recorded. Anything else reads alive."""
    parsed = parse_holder(holder)
    if parsed is None or parsed.host != socket.gethostname() or parsed.pid <= 0:
        return False
    namespace = pid_namespace()
    if namespace is None or parsed.pidns != namespace:
        return False
    if not _pid_exists(parsed.pid):
        return True
    fields = _stat_fields(parsed.pid)
    if fields is None:
        return False  # no /proc to look in: the pid lives, so the holder may
    if fields[0] in ("Z", "X", "x"):  # killed, not yet reaped by its parent
        return True
    now_start = start_ticks(parsed.pid)
    return parsed.start is not None and now_start is not None and now_start != parsed.start
