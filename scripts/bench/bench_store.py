"""Benchmark: committed iterations per second on SQLite and on PostgreSQL, with 1 to N writer processes at once.

Each writer process opens the store and commits iterations as the controller does (record_iteration: a policy call
with a 4 KB prompt and 1 KB completion, a child with its score vector, an edit failure), each writer to its own run
(one cell of an experiment each) or, with --one-run, all to one run. The PostgreSQL server is a throwaway one on
loopback (tests/postgres_server.py: fsync off, as the tests run it; a production server with fsync on pays a disk
flush per commit on top). Prints one line per (backend, writers): iterations/s in all and per writer.

    .venv/bin/python scripts/bench/bench_store.py [--writers 1 2 4 8] [--iterations 200] [--one-run]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from postgres_server import postgres_server  # noqa: E402

from evolve.store.program_store import ProgramStore  # noqa: E402

WRITER = """
import sys, time
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore
url, run, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = ProgramStore(url)
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
for i in range(first, first + count):
    child = ChildRecord(code="x = %d\\n" % i + "#" * 1000, parent_id=None, island=i % 3, policy="p", edit="e",
                        scores={"a": i / 1e4, "b": 0.5, "c": 1.0}, scalar=i / 1e4, solved=False)
    store.record_iteration(run, i, [AttemptRecord("policy_call", prompt="p" * 4000, completion="c" * 1000,
                                                  completion_tokens=100), child,
                                    AttemptRecord("edit_failed", "no code", completion="x" * 500)])
"""


def measure(url: str, writers: int, iterations: int, one_run: bool) -> float:
    """Seconds for `writers` processes to commit `iterations` iterations each, timed from a common start."""
    store = ProgramStore(url)
    shared = store.create_run("bench", "p", "p", 0, "{}", iterations * writers)
    processes = []
    for w in range(writers):
        run = shared if one_run else store.create_run(f"bench{w}", "p", "p", w, "{}", iterations)
        first = 1 + w * iterations if one_run else 1
        processes.append(subprocess.Popen([sys.executable, "-c", WRITER, url, str(run), str(first), str(iterations)],
                                          cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for process in processes:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    started = time.perf_counter()
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    for process in processes:
        process.wait()
        assert process.returncode == 0
    elapsed = time.perf_counter() - started
    runs = [shared] if one_run else [run.id for run in store.list_runs() if run.id != shared]
    committed = sum(len(store.completed_iterations(run)) for run in runs)
    assert committed == writers * iterations, (committed, writers * iterations)  # nothing lost
    store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--iterations", type=int, default=200, help="per writer")
    parser.add_argument("--one-run", action="store_true", help="every writer commits to one run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, postgres_server() as server:
        for writers in args.writers:
            for backend in ("sqlite", "postgresql"):
                url = (str(Path(folder) / f"{uuid.uuid4().hex}.db") if backend == "sqlite"
                       else server.create_database(f"b_{uuid.uuid4().hex[:16]}"))
                seconds = measure(url, writers, args.iterations, args.one_run)
                total = writers * args.iterations / seconds
                print(f"{backend:10s} writers {writers:2d}: {total:7.0f} iterations/s in all, "
                      f"{total / writers:6.0f} per writer ({writers * args.iterations} in {seconds:.2f} s)",
                      flush=True)


if __name__ == "__main__":
    main()
