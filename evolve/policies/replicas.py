"""Replicas of one policy's model (several OpenAI-compatible servers): which one takes the next request.

A request goes to the healthy replica with the fewest requests in flight (ties: the one sent fewest, then the
first listed). A replica whose request fails (connect error, timeout, 5xx, 429) is down for `retry_s` seconds,
doubled for each further failure in a row up to `max_retry_s`; after that rest, the next request that picks it is
its probe, and one success makes it healthy again. When every replica is down the caller takes the one whose rest
ends first (its usual retry path with back-off applies).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

MAX_RETRY_S = 60.0


@dataclass
class Replica:
    """One server's live state (mutable: the pool updates it as requests start, end and fail)."""

    url: str
    in_flight: int = 0
    sent: int = 0
    failures: int = 0  # in a row; 0 once it answers
    down_until: float = 0.0  # monotonic clock; 0: healthy
    last_error: str = ""


class ReplicaPool:
    """The replicas of one policy, in the order configured; single-threaded (one asyncio loop)."""

    def __init__(self, urls: Sequence[str], retry_s: float, max_retry_s: float = MAX_RETRY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not urls:
            raise ValueError("a replica pool needs at least one URL")
        self.replicas = [Replica(url) for url in urls]
        self._retry_s, self._max_retry_s, self._clock = retry_s, max(max_retry_s, retry_s), clock

    def healthy(self) -> list[Replica]:
        now = self._clock()
        return [replica for replica in self.replicas if replica.down_until <= now]

    def pick(self) -> Replica | None:
        """The healthy replica with the fewest requests in flight; None when all are down."""
        healthy = self.healthy()
        return min(healthy, key=lambda r: (r.in_flight, r.sent)) if healthy else None

    def soonest(self) -> Replica:
        """The replica whose rest ends first: what a request tries when every replica is down."""
        return min(self.replicas, key=lambda replica: replica.down_until)

    @contextmanager
    def sending(self, replica: Replica) -> Iterator[None]:
        replica.in_flight += 1
        replica.sent += 1
        try:
            yield
        finally:
            replica.in_flight -= 1

    def failed(self, replica: Replica, error: str) -> None:
        replica.failures += 1
        replica.last_error = error
        rest = min(self._retry_s * 2 ** min(replica.failures - 1, 30), self._max_retry_s)
        replica.down_until = self._clock() + rest

    def answered(self, replica: Replica) -> None:
        replica.failures, replica.down_until = 0, 0.0

    def sent_by_url(self) -> dict[str, int]:
        """Requests sent to each replica so far (retries included)."""
        return {replica.url: replica.sent for replica in self.replicas}
