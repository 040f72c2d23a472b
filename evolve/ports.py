"""Loopback ports for servers this project starts (vLLM, test servers, Ray nodes): free, and outside the kernel's
ephemeral range.

A port found by binding port 0 comes from that range, and is released before the server binds it; on a busy
machine an outgoing connection (which takes its local port from the same range) can take it in between, and the
server fails with "Address already in use". Ports below the range are never handed out by the kernel, so only
another explicit choice can collide, and a bind probe sees any that already holds one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20000  # Ray gives its workers ports 10002-19999 by default; below that sit well-known services
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, used where the range cannot be read


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (first, last), or Linux's default where it cannot be read."""
    try:
        first, last = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return first, last


def free_port(host: str = "127.0.0.1", attempts: int = 200, chooser: random.Random | None = None) -> int:
    """A port on `host` that nothing holds now, drawn at random below the ephemeral range (from it when the range
    starts too low to leave room); raises OSError when `attempts` draws all find their port taken."""
    chooser = chooser or random.SystemRandom()
    first, last = ephemeral_range()
    low, high = (LOWEST, first - 1) if first - 1 - LOWEST >= 1000 else (first, last)
    for _ in range(attempts):
        port = chooser.randint(low, high)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port on {host} in {low}-{high} after {attempts} tries")
