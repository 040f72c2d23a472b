"""Ports for the servers we start: free, below the kernel's ephemeral range, a taken one skipped."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from evolve.ports import DEFAULT_EPHEMERAL, LOWEST, ephemeral_range, free_port


def test_a_chosen_port_lies_below_the_ephemeral_range_and_can_be_bound() -> None:
    first, _ = ephemeral_range()
    for _ in range(20):
        port = free_port()
        assert LOWEST <= port < first
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_something_holds_is_never_chosen() -> None:
    taken = free_port(chooser=random.Random(7))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        assert free_port(chooser=random.Random(7)) != taken  # the same first draw, skipped


def test_the_range_is_read_from_the_kernel_file_and_defaults_when_unreadable(tmp_path: Path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t50000\n")
    assert ephemeral_range(ranges) == (40000, 50000)
    ranges.write_text("garbage")
    assert ephemeral_range(ranges) == DEFAULT_EPHEMERAL
    assert ephemeral_range(tmp_path / "missing") == DEFAULT_EPHEMERAL


def test_no_free_port_after_every_draw_is_one_clear_error() -> None:
    class Same(random.Random):
        def randint(self, a: int, b: int) -> int:
            return held

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", free_port()))
        holder.listen()
        held = holder.getsockname()[1]
        with pytest.raises(OSError, match="no free port on 127.0.0.1 .* after 3 tries"):
            free_port(attempts=3, chooser=Same())
