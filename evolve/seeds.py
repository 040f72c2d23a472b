"""Every random stream of a run, derived in one place from (run seed, purpose, indices).

The recipes below are the engine's four sub-seed recipes, moved here unchanged so that their values (and the
runs recorded with them) stay the same; each is named for the stream it seeds.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

REQUEST = "request"  # one policy request: (iteration, attempt) -> its sampling seed
SELECTION = "selection"  # one iteration's parent and inspiration draws: (iteration,)
BATCH = "batch"  # one hf batch: its requests' seeds, in order -> torch seed
GROUP = "group"  # one training group: (step, group) -> rollout sampling and VPO's Dirichlet weights


def request_seed(run_seed: int, iteration: int, attempt: int = 0) -> int:
    """A 31-bit sampling seed per request, from the run's seed and the request's place in the run."""
    digest = hashlib.blake2b(f"{run_seed}:{iteration}:{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF


def selection_rng(run_seed: int, iteration: int) -> random.Random:
    """The RNG for one iteration's selection: a stable hash of (seed, iteration), the same in every process."""
    digest = hashlib.sha256(f"evolve-selection/{run_seed}/{iteration}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def batch_seed(seeds: Sequence[int]) -> int:
    """The torch seed for one batch: fixed by its requests' seeds, in order."""
    digest = hashlib.blake2b(",".join(str(seed) for seed in seeds).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # torch.manual_seed takes a non-negative int64


def group_seed(run_seed: int, step: int, group: int) -> int:
    """A stable 63-bit seed for one group at one step (blake2b of the three ints; same in every process)."""
    digest = hashlib.blake2b(f"{int(run_seed)}:{int(step)}:{int(group)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2**63 - 1)
