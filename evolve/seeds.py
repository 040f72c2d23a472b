"""Every random stream of a run, derived in one place from (run seed, purpose, indices).

`derive(seed, purpose, *indices)` hashes the parts with blake2b (8 bytes, read big-endian) and keeps the low
`bits` bits, so a value depends on nothing but its parts: the same in every process, on every Python version,
and after a resume. Two streams never share a value by accident, because the purpose is part of the hash.

Run seeds. A run's streams all derive from its run seed (`run.seed` of its stored config). `evolve run --seed S`
runs on S itself. Experiment cells and plain sampling (what a study compares) run on a seed derived from the seed S
they were given and the problem's name, and their runs row (and cells row) records S:

- CELL (problem name): an experiment cell (problem, policy, seed S) runs on `cell_seed(S, problem)`, the same for
  every policy on that problem and seed (the arms are paired: each policy sees the same streams), different for
  every problem (the cells of one seed index are independent across problems, as the sign, permutation and
  betting statistics of the report take them to be).
- SAMPLE (problem name): `evolve sample --seed S` samples each problem on `sample_seed(S, problem)`, so plain
  sampling never makes the same draws as the evolution of that problem's cell, nor as another problem's sampling.

The problem's name (its folder's name, `problem_key` of a path) is hashed by `name_index` (blake2b of its UTF-8
text, never Python's salted `hash`). A run keeps the run seed it was created with: a resume reads it from the
stored config and never derives it again, so runs stored before these two streams existed (on S itself) continue
on S.

Streams within a run, and their widths:

- REQUEST (iteration, attempt): the sampling seed sent with one policy request; 31 bits, because servers
  speaking the OpenAI API may hold it in a signed 32-bit int.
- SELECTION (iteration,): the `random.Random` of one iteration's parent and inspiration draws; 63 bits.
- BATCH: the torch seed of one hf `generate()` call, from its requests' seeds in order (they stand in for the
  run seed: they already carry it); 63 bits, the non-negative int64 that `torch.manual_seed` takes.
- ROLLOUT_SAMPLING (step, group): the torch or vLLM seed of one training group's G samples; 63 bits. llama.cpp
  rollouts sample row g of the group with derive(that seed, ROLLOUT_SAMPLING, g, bits=32).
- VPO_WEIGHTS (step, group): the Dirichlet (or Sobol) weight rows of one training group; 63 bits. Its own
  purpose, so the weights are independent of the rollouts they score.
- MODEL_INIT: torch's global seed when `evolve train` builds its model (the LoRA initialisation); 63 bits.
- ENSEMBLE (iteration,): the draw that picks one iteration's policy among [[policies]]; 63 bits.
- PROMPT_EVOLUTION (iteration,) / (generation,): the draw of one iteration's instruction, and the mutation that
  makes one new instruction; 63 bits.

Not derived here: a policy backend's engine seed (`open_policy(section, seed)`) is the run seed of `evolve run`,
the seed S given to `evolve sample`, or an experiment's first seed S for a backend that serves all its cells;
every request the engine sends carries its own REQUEST seed, so the engine seed draws nothing. The HumanEval test
inputs use a fixed seed by design (part of the problem), and `stats.sign_flip_p_value` seeds its own resampling
(analysis, not a run).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

REQUEST = "request"
SELECTION = "selection"
BATCH = "batch"
ROLLOUT_SAMPLING = "rollout_sampling"
VPO_WEIGHTS = "vpo_weights"
MODEL_INIT = "model_init"
ENSEMBLE = "ensemble"
PROMPT_EVOLUTION = "prompt_evolution"
CELL = "cell"
SAMPLE = "sample"
PURPOSES = frozenset({REQUEST, SELECTION, BATCH, ROLLOUT_SAMPLING, VPO_WEIGHTS, MODEL_INIT, ENSEMBLE,
                      PROMPT_EVOLUTION, CELL, SAMPLE})


def derive(seed: int, purpose: str, *indices: int, bits: int = 63) -> int:
    """A `bits`-bit non-negative seed for one stream: blake2b of "purpose:seed:index:...", 8 bytes big-endian."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown seed purpose {purpose!r}; one of {sorted(PURPOSES)}")
    if not 1 <= bits <= 64:
        raise ValueError(f"bits must be 1 to 64, got {bits}")
    text = ":".join([purpose, *(str(int(part)) for part in (seed, *indices))])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << bits) - 1)


def request_seed(run_seed: int, iteration: int, attempt: int = 0) -> int:
    """The 31-bit sampling seed of one policy request: attempt `attempt` of iteration `iteration`."""
    return derive(run_seed, REQUEST, iteration, attempt, bits=31)


def selection_rng(run_seed: int, iteration: int) -> random.Random:
    """The RNG of one iteration's selection draws."""
    return random.Random(derive(run_seed, SELECTION, iteration))


def batch_seed(seeds: Sequence[int]) -> int:
    """The torch seed of one hf batch: fixed by its requests' seeds, in order."""
    if not seeds:
        raise ValueError("batch_seed: a batch has at least one request")
    return derive(seeds[0], BATCH, *seeds[1:])


def name_index(name: str) -> int:
    """A 63-bit index standing for a name in `derive`: blake2b of its UTF-8 text, the same in every process."""
    if not name:
        raise ValueError("name_index: a name is needed")
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def cell_seed(seed: int, problem: str) -> int:
    """The 63-bit run seed of every experiment cell (problem, policy, seed) of the problem named `problem`."""
    return derive(seed, CELL, name_index(problem))


def sample_seed(seed: int, problem: str) -> int:
    """The 63-bit run seed of plain sampling (`evolve sample --seed seed`) of the problem named `problem`."""
    return derive(seed, SAMPLE, name_index(problem))
