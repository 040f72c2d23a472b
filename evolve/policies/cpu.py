"""What the CPU gives a local model (llama.cpp, torch): threads when its settings say 0, native bfloat16."""

from __future__ import annotations

import os

from evolve.errors import UserError

THREADS_ENV = "EVOLVE_THREADS"


def threads_given(threads: int = 0) -> bool:
    """Whether `threads` or $EVOLVE_THREADS fixes the count (else cpu_threads gives the cores, and a llama.cpp
    engine chooses as it runs)."""
    return threads > 0 or bool(os.environ.get(THREADS_ENV, "").strip())


def cpu_threads(threads: int = 0) -> int:
    """`threads` if given, else $EVOLVE_THREADS, else the cores this process may run on.

    EVOLVE_THREADS is for machines whose cores are shared with other work (the parallel test suite sets 1): llama.cpp's
    and torch's threads spin while they wait for each other, so on a busy core two threads are slower than one."""
    if threads > 0:
        return threads
    chosen = os.environ.get(THREADS_ENV, "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) < 1:
            raise UserError(f"{THREADS_ENV}={chosen!r}: a whole number of threads, at least 1")
        return int(chosen)
    return len(os.sched_getaffinity(0)) or 1


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512_BF16 or AMX), where torch's bfloat16 matmuls beat
    float32's; elsewhere they are emulated and slower."""
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private in torch 2.x: absent means no
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in probes)
