"""Several LlamaEngines behind one policy, each with its share of the slots and the cores: which engine takes a request.

On 2 cores two one-thread engines made 1.15-1.35x the tokens a second of one two-thread engine with the same
fixed-length requests (scripts/bench/bench_engine_per_core.py), and a policy of two 1.06-1.16x one engine on an
evolution load on a quiet machine (scripts/bench/bench_policy_engines.py; docs/cpu_inference.md): llama.cpp's
threads meet at a barrier after every operation of a step, and one engine a core has no barrier to wait at.
llama.cpp's calls release the GIL, so one process holds them all.

Routing keeps two things: the engines' loads even (a core whose engine has fewer requests decodes fewer rows a
step) and a problem's prompts on one engine (a free slot prefills only what its cache does not already hold, and a
problem's prompts share its instructions, statement and often its parent: most of their tokens). So a request goes
to an engine with a free slot when one has one, and among those (else among all) to one whose load (requests in
flight less its slots) is at most `slack` above the lightest's, the one whose recent prompts share the longest
prefix with it; ties go to the lighter, then the first. Identical prompts sent together (several answers to one
parent) land on one engine, within the slack, and prefill once there.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from evolve.policies.cpu import cpu_threads, threads_given
from evolve.policies.engine_requests import EngineStats, GenerationRequest, GenerationResult, Ticket
from evolve.policies.engine_slots import common_prefix
from evolve.policies.llama_engine import LlamaEngine


def engine_slots(slots: int, engines: int) -> list[int]:
    """Each engine's share of `slots`: as even as whole slots allow, the first ones one more."""
    if engines < 1 or slots < engines:
        raise ValueError(f"{slots} slots cannot be shared by {engines} engines: each needs at least one")
    return [slots // engines + (1 if index < slots % engines else 0) for index in range(engines)]


def start_engines(gguf: Path | str, slots: int, context_per_slot: int, threads: int = 0,
                  engines: int = 1) -> EnginePool:
    """`engines` engines of the model, the slots and (unless `threads` or $EVOLVE_THREADS fixes every engine's) the
    cores shared out, the first ones taking the rest; one engine with threads 0 chooses its threads as it runs."""
    shares = engine_slots(slots, engines)
    if engines > 1 and not threads_given(threads):
        each, rest = divmod(cpu_threads(), engines)
        threads_of = [max(1, each + (index < rest)) for index in range(engines)]
    else:
        threads_of = [threads] * engines
    started: list[LlamaEngine] = []
    try:
        for share, engine_threads in zip(shares, threads_of, strict=True):
            started.append(LlamaEngine(gguf, slots=share, context_per_slot=context_per_slot, threads=engine_threads))
    except BaseException:
        with contextlib.suppress(Exception):  # the error that stopped the start is the one to see
            close_all(started)
        raise
    return EnginePool(started)


@dataclass(eq=False)
class _Lane:
    """One engine and what the pool knows of it: requests in flight, and the prompts it took last."""

    engine: LlamaEngine
    slots: int
    in_flight: int = 0
    recent: deque[tuple[int, ...]] = field(default_factory=deque)

    def shared_prefix(self, prompt: Sequence[int]) -> int:
        return max((common_prefix(earlier, prompt) for earlier in self.recent), default=0)

    def load(self) -> int:
        """Requests beyond its slots (negative: free slots), comparable between engines of unequal shares."""
        return self.in_flight - self.slots


class EnginePool:
    """LlamaEngines of one model taking one policy's requests; thread-safe `submit`, like one engine's."""

    def __init__(self, engines: Sequence[LlamaEngine], slack: int | None = None) -> None:
        """slack: how much more loaded than the lightest engine one may be and still take a request for its shared
        prefix (None: a quarter of the smallest engine's slots, at least 1; 0: always the lightest)."""
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self._lanes = [_Lane(engine, engine.slots_count, recent=deque(maxlen=2 * engine.slots_count))
                       for engine in engines]
        self.slack = max(1, min(lane.slots for lane in self._lanes) // 4) if slack is None else slack
        if self.slack < 0:
            raise ValueError("an engine pool's slack is a count of requests, at least 0")
        self._lock = threading.Lock()

    @property
    def engines(self) -> list[LlamaEngine]:
        return [lane.engine for lane in self._lanes]

    def route(self, prompt: Sequence[int]) -> int:
        """The index of the engine the next request with this prompt goes to (what `submit` would choose now)."""
        with self._lock:
            return self._choose(prompt)

    def _choose(self, prompt: Sequence[int]) -> int:
        lanes = list(enumerate(self._lanes))
        if len(lanes) == 1:
            return 0
        lanes = [(index, lane) for index, lane in lanes if lane.load() < 0] or lanes
        lightest = min(lane.load() for _, lane in lanes)
        near = [(index, lane) for index, lane in lanes if lane.load() <= lightest + self.slack]
        return max(near, key=lambda pair: (pair[1].shared_prefix(prompt), -pair[1].load(), -pair[0]))[0]

    def submit(self, request: GenerationRequest,
               done: Callable[[GenerationResult | Exception], None]) -> Ticket:
        """Queue a request on the engine routing chooses; `done` gets its result in that engine's thread (or at
        once, for a request the engine refuses)."""
        with self._lock:
            lane = self._lanes[self._choose(request.prompt_ids)]
            lane.in_flight += 1

        refused = threading.Event()  # failed before submit returned: the engine took nothing in
        taken = threading.Event()

        def finished(outcome: GenerationResult | Exception) -> None:
            with self._lock:
                lane.in_flight -= 1
            if isinstance(outcome, Exception) and not taken.is_set():
                refused.set()
            done(outcome)

        try:
            ticket = lane.engine.submit(request, finished)
        except BaseException:
            with self._lock:
                lane.in_flight -= 1
            raise
        taken.set()
        if not refused.is_set():  # a refused request leaves nothing cached to steer later prompts by
            with self._lock:
                lane.recent.append(request.prompt_ids)
        return ticket

    def in_flight(self) -> list[int]:
        """Requests each engine holds now (waiting or generating), in the engines' order."""
        with self._lock:
            return [lane.in_flight for lane in self._lanes]

    def stats(self) -> EngineStats:
        """The engines' statistics added up (max_active: the sum of each one's most; threads: of one engine)."""
        every = [lane.engine.stats() for lane in self._lanes]
        summed = {name: sum(getattr(stats, name) for stats in every)
                  for name in (entry.name for entry in fields(EngineStats)) if name != "threads"}
        return EngineStats(**summed, threads=every[0].threads)

    def set_lora(self, adapter_path: Path | str | None, scale: float = 1.0) -> None:
        """Every engine's LoRA adapter (LlamaEngine.set_lora), from each one's next step."""
        for lane in self._lanes:
            lane.engine.set_lora(adapter_path, scale)

    def close(self) -> None:
        """Close every engine (each fails its unfinished requests with an EngineError), all of them even when one
        raises (the first error is raised after). Idempotent."""
        close_all(self.engines)


def close_all(engines: Sequence[LlamaEngine]) -> None:
    """Close each engine, the next ones too when one raises; then raise the first error."""
    first: BaseException | None = None
    for engine in engines:
        try:
            engine.close()
        except BaseException as exc:  # noqa: BLE001 -- raised once every engine is closed
            first = first or exc
    if first is not None:
        raise first
