"""What the `evolve serve` tests share: a canned OpenAI-compatible policy on loopback, a real `evolve experiment`
(one fizzbuzz cell) driven by it in a subprocess, and `evolve serve` started as a subprocess on a free port.

The canned policy answers each chat request after `pause_s` with a rewrite of fizzbuzz: the n-th answer checks
divisor 5, 7 or 4 for "Buzz" (so scores differ and some children solve the problem), every fifth answer is prose
with no code (an edit failure). Like a real server, a final assistant message (the prefill) is continued."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripted_policy_server import ScriptedPolicyServer

ROOT = Path(__file__).resolve().parents[1]
EVOLVE = [sys.executable, "-m", "evolve"]
FIZZBUZZ = '''def fizzbuzz(n: int) -> str:
    """FizzBuzz, variant {number}."""
    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % {divisor} == 0:
        return "Buzz"
    return str(n)
'''


def canned_answer(number: int) -> str:
    if number % 5 == 0:
        return "I would make it faster, but here is no code."
    return FIZZBUZZ.format(number=number, divisor=(7, 4, 5, 7, 5, 4)[number % 6])


@contextmanager
def canned_policy(pause_s: float) -> Iterator[str]:
    """An OpenAI-compatible endpoint on 127.0.0.1 serving canned fizzbuzz rewrites; yields its /v1 URL."""

    def answer(number: int, body: dict[str, Any]) -> str:
        time.sleep(pause_s)
        return canned_answer(number)

    with ScriptedPolicyServer(answer, model="canned", tokens=(120, 60)) as server:
        yield server.url


def experiment_file(folder: Path, url: str, iterations: int, name: str = "servetest") -> Path:
    """A one-cell experiment (fizzbuzz, the canned policy, seed 0, two islands) storing in folder/NAME.db."""
    path = folder / f"{name}.toml"
    path.write_text(f"""description = "evolve serve test: fizzbuzz with a canned policy"
db = "{folder / f'{name}.db'}"
problems = ["fizzbuzz"]
seeds = [0]
iterations = {iterations}

[run]
concurrency = 1
eval_workers = 1
programs_dir = "{ROOT / 'programs'}"

[selection]
islands = 2

[[policies]]
name = "canned"
backend = "openai"
url = "{url}"
model = "canned"
edit_format = "rewrite"
answers = 1
""")
    return path


def start_experiment(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*EVOLVE, "experiment", str(path), "--plain"], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


@dataclass
class Served:
    """An `evolve serve` subprocess and the address it printed (token included when it has one)."""

    process: subprocess.Popen[str]
    url: str
    lines: list[str]

    @property
    def base(self) -> str:
        return self.url.split("?")[0].rstrip("/")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_serve(db: Path, *flags: str, env: dict[str, str] | None = None, timeout_s: float = 30.0) -> Served:
    """`evolve serve --db DB --port 0 FLAGS` until it prints its address (it binds before printing)."""
    process = subprocess.Popen([*EVOLVE, "serve", "--db", str(db), "--port", "0", *flags], cwd=ROOT,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})})
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        found = re.search(r"(http://\S+)", line)
        if found:
            threading.Thread(target=lambda: [lines.append(rest.rstrip("\n")) for rest in process.stdout],
                             daemon=True).start()  # keep draining: a full pipe would block the server
            return Served(process, found.group(1), lines)
    process.kill()
    process.wait()
    raise AssertionError("evolve serve printed no address:\n" + "\n".join(lines))


LONG_LINE = "    return " + " + ".join(f"weight_{i} * feature_{i}" for i in range(40))  # far wider than any pane


def tree_store(path: Path, programs: int, per_iteration: int = 25, seed: int = 0) -> Path:
    """A finished one-run store of `programs` programs, written as the controller writes (a policy call, then its
    child): each iteration's children have random parents among the last 300 programs (so the tree is deep and
    bushy), on two islands, scalars drifting up; every program's feedback is one "feedback" artifact, and every
    child's code has one line far wider than any pane."""
    import random

    from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

    rng = random.Random(seed)
    store = ProgramStore(str(path))
    iterations = -(-(programs - 1) // per_iteration)
    run = store.create_run("tree", "toy", "p", seed, json.dumps({"selection": {"islands": 2}}), iterations)
    code = "def f(x):\n    return 0\n"
    (root,) = store.record_iteration(run, 0, [ChildRecord(code=code, parent_id=None, island=0, policy="", edit="",
                                                          scores={"a": 0.1}, scalar=0.1, solved=False,
                                                          artifacts={"feedback": "a: 0.1"})])
    made = [(root.id, 0.1)]
    iteration = 0
    while len(made) < programs:
        iteration += 1
        records: list[AttemptRecord | ChildRecord] = []
        for _ in range(min(per_iteration, programs - len(made))):
            parent, base = rng.choice(made[-300:])
            scalar = round(min(1.0, max(0.0, base + rng.uniform(-0.05, 0.08))), 4)
            child = f"def f(x):\n    # child of {parent}\n{LONG_LINE}\n"
            records += [AttemptRecord("policy_call", "stop", prompt="improve f", completion=child, latency_s=0.1,
                                      prompt_tokens=5, completion_tokens=9),
                        ChildRecord(code=child, parent_id=parent, island=rng.randrange(2), policy="p", edit=child,
                                    scores={"a": scalar}, scalar=scalar, solved=scalar >= 1.0,
                                    artifacts={"feedback": f"a: {scalar}"})]
        stored = store.record_iteration(run, iteration, records, policy="p")
        made += [(program.id, program.scalar) for program in stored]
    store.set_run_status(run, "finished")
    store.close()
    return path
