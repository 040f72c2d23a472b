"""How many threads a llama.cpp decode step takes, chosen from the cores actually free, measured as it runs.

llama.cpp's threads meet at a barrier after every operation and spin while they wait: on an idle 2-core machine two
threads decode 1.4x faster than one, but beside a job that keeps one core busy two threads are 3.7x slower than one
(docs/cpu_inference.md). No setting is right for both, and a machine's load changes during a run, so `ThreadChoice`
measures: it runs the steps with its current count and, from time to time, a short probe that alternates steps
between the current count and each other candidate; the count with the least time per decoded row over the probe's
decode steps (steps without prompt tokens, whose cost per row is comparable) is kept. A probe ends at once when a
candidate's step costs over `give_up` times the current count's recent cost per row (beside a busy job the wrong
count is several times slower: one step of it says so), and a probe that confirms the current count doubles the
wait before the next one (up to `longest_wait`), so a settled machine pays little.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def thread_candidates(most: int) -> tuple[int, ...]:
    """most, most // 2, ..., 1: the counts worth probing on a machine of `most` cores."""
    counts, count = [], max(1, most)
    while count >= 1:
        counts.append(count)
        count //= 2
    return tuple(counts)


@dataclass
class ThreadChoice:
    """The thread count for each step; fed each step's time, rows and whether it held prompt tokens."""

    candidates: tuple[int, ...]
    probe_steps: int = 4  # decode steps per candidate in one probe
    first_wait: int = 8  # steps before the first probe, and after a probe that changed the count
    longest_wait: int = 2048
    give_up: float = 1.3
    current: int = 0
    _wait: int = 0
    _countdown: int = 0
    _probe: list[int] = field(default_factory=list)  # the counts of the probe's coming steps
    _seconds: dict[int, float] = field(default_factory=dict)
    _rows: dict[int, int] = field(default_factory=dict)
    _recent: float = 0.0  # the current count's seconds per row over recent decode steps (moving average)
    probes: int = 0
    switches: int = 0

    def __post_init__(self) -> None:
        if not self.candidates or min(self.candidates) < 1:
            raise ValueError("thread candidates must be whole numbers >= 1")
        self.current = self.current or self.candidates[0]
        self._wait = self._countdown = self.first_wait

    def threads(self) -> int:
        """The thread count for the next step."""
        return self._probe[0] if self._probe else self.current

    def record(self, threads: int, seconds: float, rows: int, decode_only: bool) -> None:
        """What the step run with `threads` took. Only decode steps count in a probe; others wait for it."""
        if decode_only and rows > 0 and threads == self.current:
            per_row = seconds / rows
            self._recent = per_row if self._recent == 0.0 else 0.8 * self._recent + 0.2 * per_row
        if self._probe:
            if not decode_only or threads != self._probe[0] or rows <= 0:
                return
            self._probe.pop(0)
            self._seconds[threads] = self._seconds.get(threads, 0.0) + seconds
            self._rows[threads] = self._rows.get(threads, 0) + rows
            if threads != self.current and self._recent > 0 and seconds / rows > self.give_up * self._recent:
                self._probe, self._seconds, self._rows = [], {}, {}  # clearly slower: nothing beats the current
            if not self._probe:
                self._decide()
            return
        if len(self.candidates) < 2:
            return
        self._countdown -= 1
        if self._countdown <= 0:
            others = [count for count in self.candidates if count != self.current]
            self._probe = [count for _ in range(self.probe_steps) for count in (self.current, *others)]
            self._seconds, self._rows = {}, {}

    def _decide(self) -> None:
        self.probes += 1
        cost = {count: self._seconds[count] / self._rows[count] for count in self._seconds if self._rows[count]}
        best = min(cost, key=cost.__getitem__, default=self.current)
        if best != self.current and cost[best] < 0.9 * cost.get(self.current, float("inf")):
            self.current, self.switches, self._wait = best, self.switches + 1, self.first_wait
        else:
            self._wait = min(self.longest_wait, self._wait * 2)
        self._countdown = self._wait
