"""Benchmark: evolve against OpenEvolve 0.4.0 side by side, same fake policy server, same problem, runs interleaved.

One fixed-latency fake OpenAI-compatible server (127.0.0.1, this process) serves both engines: evolve under
`/evolve/v1` (a whole-block rewrite in a python fence) and OpenEvolve under `/openevolve/v1` (a SEARCH/REPLACE diff
of the current program's `value()`, OpenEvolve's default diff-based evolution). Every reply sets one numeric
constant to a fresh value, so every child differs from its parent. The problem is the same for both: the
candidate burns --burn-cpu-s of CPU (0.1 s) in `run()` and returns `value()`; the score is how close that is to 0.7.
evolve scores it in its sandbox through a problem folder (problem.toml, evaluator.py, initial.py); OpenEvolve through
an `evaluate(program_path)` that imports the candidate in its worker, as its examples do.

Each engine runs as a subprocess, A B A B ..., --reps times per setting (latency x in-flight x iterations). Figures
per engine and setting, medians over reps:
- it/min whole: iterations over the process's wall time (start-up, seed evaluation and shut-down included);
- it/min loop: iterations over the loop's own time, from the stored seed to the last committed iteration (evolve's
  store) or from "Starting process-based evolution" to "Evolution completed" (OpenEvolve's log);
- CPU-s/it: user + system CPU of the process and its reaped children (os.wait4), over the iterations;
- peak MB: ru_maxrss of that rusage (the largest single process);
- bound: min(in_flight / latency, min(cores, workers) / burn CPU-s) iterations/min, and each engine's loop share of
  it. OpenEvolve's worker makes the policy call and the evaluation in turn, so its requests in flight are its
  workers (--openevolve-workers, default --workers); its bound uses that.
The load average is printed around the runs: on a shared machine the figures move with it; interleaving keeps the
comparison fair, not the absolute numbers.

    .venv/bin/python scripts/bench_vs_openevolve.py --install          # once: .bench/openevolve-venv from PyPI
    .venv/bin/python scripts/bench_vs_openevolve.py --iterations 60 300 --reps 3 --latency-ms 50 500 --in-flight 4 16
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".bench" / "openevolve-venv"
OPENEVOLVE_VERSION = "0.4.0"
TARGET = 0.7

CANDIDATE = '''"""Bench candidate: burns a fixed amount of CPU, then returns value()."""

import time

BURN_CPU_S = {burn}


def burn() -> None:
    started = time.process_time()
    while time.process_time() - started < BURN_CPU_S:
        pass


# EVOLVE-BLOCK-START
def value() -> float:
    return 0.5
# EVOLVE-BLOCK-END


def run() -> float:
    burn()
    return value()
'''

EVOLVE_PROBLEM_TOML = '''name = "bench_burn"
description = """Write value() -> float. The score is 1 / (1 + |value() - t|) for a hidden t."""
provenance = "scripts/bench_vs_openevolve.py: a throughput benchmark, not a search problem."
objectives = ["closeness"]

[score]
reduction = "mean"

[limits]
wall_time_s = 20
cpu_time_s = 10
memory_mb = 512
'''

EVOLVE_EVALUATOR = f'''"""bench_burn's trusted evaluator: run() in the sandbox, scored by distance to {TARGET}."""

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    value = fail_unless_ok(sandbox.call(program_path, "run")).value
    if not isinstance(value, (int, float)):
        raise CandidateFailure("bad_output", "run() did not return a number")
    return EvaluationResult(scores={{"closeness": 1.0 / (1.0 + abs(value - {TARGET}))}})
'''

OPENEVOLVE_EVALUATOR = f'''"""bench_burn for OpenEvolve: run() in the worker, scored by distance to {TARGET}."""

import importlib.util


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    value = float(module.run())
    return {{"combined_score": 1.0 / (1.0 + abs(value - {TARGET}))}}
'''

VALUE_FUNCTION = re.compile(r"def value\(\) -> float:\n([ \t]+)return ([^\n]+)")
CURRENT_PROGRAM = re.compile(r"# Current Program\n```\w*\n(.*?)\n```", re.DOTALL)


def constant_for(number: int) -> float:
    """The constant of the number-th reply: distinct for every number this benchmark reaches, in [0, 1)."""
    return round((number * 0.6180339887498949) % 1.0, 9)


def evolve_reply(number: int) -> str:
    """evolve's rewrite answer: the whole EVOLVE-BLOCK (value()) with a new constant, in a python fence."""
    return f"```python\ndef value() -> float:\n    return {constant_for(number)!r}\n```"


def openevolve_reply(user_message: str, number: int) -> str | None:
    """OpenEvolve's diff answer: SEARCH the current program's value(), REPLACE its constant; None when the prompt
    shows no current program with a value() (the reply then holds no diff)."""
    current = CURRENT_PROGRAM.search(user_message)
    found = VALUE_FUNCTION.search(current.group(1)) if current else None
    if found is None:
        return None
    indent, old = found.group(1), found.group(2)
    return (f"Move the constant.\n<<<<<<< SEARCH\ndef value() -> float:\n{indent}return {old}\n=======\n"
            f"def value() -> float:\n{indent}return {constant_for(number)!r}\n>>>>>>> REPLACE\n")


@dataclass
class FakePolicyServer:
    """Answers every chat completion after a fixed latency, in the reply format of the engine named by the path's
    first segment (/evolve/v1/..., /openevolve/v1/...); HTTP/1.1 with keep-alive, on an event loop in a thread."""

    latency_s: float
    requests: dict[str, int] = field(default_factory=dict)
    unparsed: int = 0  # OpenEvolve prompts without a current value(): answered without a diff
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _port: int = 0

    def start(self) -> int:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
            self._port = server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            server.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise SystemExit("bench: the fake policy server did not start")
        return self._port

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, target = head[0].split(" ")[:2]
                headers = {name.strip().lower(): value.strip()
                           for name, _, value in (line.partition(":") for line in head[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload = await self._answer(method, target, body)
                data = json.dumps(payload).encode()
                writer.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: "
                             f"application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass  # the client closed the connection, or sent something this server does not speak
        finally:
            writer.close()

    async def _answer(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, object]]:
        engine, _, path = target.lstrip("/").partition("/")
        if method == "GET" and path == "v1/models":
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "bench"}]}
        if method != "POST" or path != "v1/chat/completions" or engine not in ("evolve", "openevolve"):
            return 404, {"error": {"message": f"no route {method} {target}", "type": "invalid_request_error"}}
        request = json.loads(body)
        number = self.requests[engine] = self.requests.get(engine, 0) + 1
        await asyncio.sleep(self.latency_s)
        if engine == "evolve":
            text = evolve_reply(number)
        else:
            user = "\n".join(str(m.get("content", "")) for m in request.get("messages", []) if m.get("role") == "user")
            text = openevolve_reply(user, number)
            if text is None:
                self.unparsed += 1
                text = "I have no change to suggest."
        return 200, {"id": f"bench-{engine}-{number}", "object": "chat.completion", "created": int(time.time()),
                     "model": "fake", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                   "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": len(text) // 4,
                               "total_tokens": (len(body) + len(text)) // 4}}


@dataclass(frozen=True)
class Setting:
    latency_ms: int
    in_flight: int
    workers: int
    openevolve_workers: int
    iterations: int
    burn_cpu_s: float

    def bound_per_min(self, in_flight: int) -> float:
        """min(in_flight / latency, min(cores, workers) / burn CPU-s), in iterations per minute."""
        cores = min(os.cpu_count() or 1, self.workers)
        return 60 * min(in_flight / (self.latency_ms / 1000), cores / self.burn_cpu_s)


@dataclass(frozen=True)
class Measure:
    engine: str
    wall_s: float
    loop_s: float
    cpu_s: float
    peak_mb: float
    children: int  # valid children stored (the seed excluded)
    load: float  # mean of the 1-minute load average before and after


def write_problem(folder: Path, burn_cpu_s: float) -> tuple[Path, Path]:
    """The problem for both engines under `folder`: (evolve's problem folder, OpenEvolve's folder)."""
    candidate = CANDIDATE.format(burn=burn_cpu_s)
    evolve_dir, openevolve_dir = folder / "bench_burn", folder / "openevolve"
    evolve_dir.mkdir(parents=True)
    openevolve_dir.mkdir()
    (evolve_dir / "problem.toml").write_text(EVOLVE_PROBLEM_TOML)
    (evolve_dir / "evaluator.py").write_text(EVOLVE_EVALUATOR)
    (evolve_dir / "initial.py").write_text(candidate)
    (openevolve_dir / "evaluator.py").write_text(OPENEVOLVE_EVALUATOR)
    (openevolve_dir / "initial_program.py").write_text(candidate)
    return evolve_dir, openevolve_dir


def run_process(command: list[str], cwd: Path, log: Path, timeout_s: float,
                env: dict[str, str]) -> tuple[float, float, float]:
    """Runs command to its end: (wall s, CPU s of it and its reaped children, ru_maxrss MB); SystemExit with the log's
    tail when it fails or runs past timeout_s."""
    started = time.perf_counter()
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - started > timeout_s:
            os.killpg(process.pid, 9)
            os.wait4(process.pid, 0)
            raise SystemExit(f"bench: {command[0]} ran past {timeout_s:g} s; its log: {log}")
        time.sleep(0.02)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"bench: {' '.join(command[:3])} ... exited {process.returncode}; log {log}:\n{tail}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _stored_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def evolve_loop(db: Path) -> tuple[float, int]:
    """(seconds from the stored seed to the last committed iteration, valid children) from evolve's store."""
    import sqlite3

    with sqlite3.connect(db) as connection:
        seed, children = connection.execute(
            "SELECT min(created_at) FILTER (WHERE iteration = 0), count(*) FILTER (WHERE iteration > 0) "
            "FROM programs").fetchone()
        (last,) = connection.execute("SELECT max(created_at) FROM attempts").fetchone()
    if seed is None or last is None:
        raise SystemExit(f"bench: evolve's store {db} holds no seed or no iteration")
    return (_stored_time(last) - _stored_time(seed)).total_seconds(), children


LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def openevolve_loop(output_dir: Path) -> tuple[float, int]:
    """(seconds from "Starting process-based evolution" to "Evolution completed", valid children) from the log."""
    logs = sorted((output_dir / "logs").glob("openevolve_*.log"))
    if not logs:
        raise SystemExit(f"bench: OpenEvolve wrote no log under {output_dir / 'logs'}")
    start = end = None
    children = 0
    for line in logs[-1].read_text(errors="replace").splitlines():
        stamp = LOG_TIME.match(line)
        if stamp is None:
            continue
        moment = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if "Starting process-based evolution" in line:
            start = moment
        elif "Evolution completed" in line:
            end = moment
        elif re.search(r"Iteration \d+: Program \S+ \(parent", line):
            children += 1
    if start is None or end is None:
        raise SystemExit(f"bench: OpenEvolve's log {logs[-1]} has no loop start or end line")
    return (end - start).total_seconds(), children


def run_evolve(setting: Setting, problem: Path, url: str, work: Path, seed: int, timeout_s: float) -> Measure:
    config = work / "evolve.toml"
    config.write_text(
        f'[run]\nproblem = "{problem}"\niterations = {setting.iterations}\nseed = {seed}\ndb = "{work / "evolve.db"}"\n'
        f'concurrency = {setting.in_flight}\neval_workers = {setting.workers}\n\n'
        f'[policy]\nname = "fake"\nbackend = "openai"\nurl = "{url}/evolve/v1"\nmodel = "fake"\nprefill = false\n'
        'timeout_s = 60\nretries = 2\n')
    load = os.getloadavg()[0]
    wall, cpu, peak = run_process([str(ROOT / ".venv" / "bin" / "python"), "-m", "evolve", "run", "-c", str(config),
                                   "--plain"], work, work / "evolve.log", timeout_s, dict(os.environ))
    loop, children = evolve_loop(work / "evolve.db")
    return Measure("evolve", wall, loop, cpu, peak, children, (load + os.getloadavg()[0]) / 2)


def run_openevolve(setting: Setting, problem: Path, url: str, work: Path, seed: int, timeout_s: float) -> Measure:
    config = work / "config.yaml"
    config.write_text(
        f"max_iterations: {setting.iterations}\nrandom_seed: {seed}\ndiff_based_evolution: true\n"
        f"llm:\n  api_base: {url}/openevolve/v1\n  api_key: fake\n  models:\n    - name: fake\n      weight: 1.0\n"
        "  timeout: 60\n  retries: 2\n  retry_delay: 1\n"
        f"evaluator:\n  parallel_evaluations: {setting.openevolve_workers}\n  cascade_evaluation: false\n"
        "  timeout: 60\n")
    output = work / "output"
    load = os.getloadavg()[0]
    env = dict(os.environ, OPENAI_API_KEY="fake")
    wall, cpu, peak = run_process([str(VENV / "bin" / "openevolve-run"), str(problem / "initial_program.py"),
                                   str(problem / "evaluator.py"), "--config", str(config), "--iterations",
                                   str(setting.iterations), "--output", str(output)],
                                  work, work / "openevolve.log", timeout_s, env)
    loop, children = openevolve_loop(output)
    return Measure("openevolve", wall, loop, cpu, peak, children, (load + os.getloadavg()[0]) / 2)


def install() -> None:
    """Creates .bench/openevolve-venv and installs OpenEvolve from PyPI into it."""
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", f"openevolve=={OPENEVOLVE_VERSION}"],
                   check=True)


def check_openevolve() -> None:
    """SystemExit in one line unless the venv holds openevolve-run at the expected version."""
    runner = VENV / "bin" / "openevolve-run"
    if not runner.exists():
        raise SystemExit(f"bench: no OpenEvolve at {VENV}; run this script with --install first")
    found = subprocess.run([str(VENV / "bin" / "python"), "-c", "import openevolve; print(openevolve.__version__)"],
                           capture_output=True, text=True)
    if found.returncode != 0 or found.stdout.strip() != OPENEVOLVE_VERSION:
        raise SystemExit(f"bench: {VENV} holds OpenEvolve {found.stdout.strip() or '(broken)'}, not "
                         f"{OPENEVOLVE_VERSION}; run this script with --install")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(setting: Setting, measures: list[Measure]) -> None:
    """One line per engine (medians over reps) and the ratio evolve / OpenEvolve."""
    print(f"\nlatency {setting.latency_ms} ms, {setting.in_flight} in flight, {setting.workers} workers "
          f"(OpenEvolve: {setting.openevolve_workers} workers), {setting.iterations} iterations, "
          f"{len(measures) // 2} reps, load average {median([m.load for m in measures]):.1f} on "
          f"{os.cpu_count()} cores")
    print(f"{'engine':>11} {'it/min whole':>13} {'it/min loop':>12} {'CPU-s/it':>9} {'peak MB':>8} {'children':>9}"
          f" {'bound/min':>10} {'share':>6}")
    loop_rates: dict[str, float] = {}
    whole_rates: dict[str, float] = {}
    for engine in ("evolve", "openevolve"):
        mine = [m for m in measures if m.engine == engine]
        in_flight = setting.in_flight if engine == "evolve" else setting.openevolve_workers
        bound = setting.bound_per_min(in_flight)
        whole_rates[engine] = median([60 * setting.iterations / m.wall_s for m in mine])
        loop_rates[engine] = median([60 * setting.iterations / m.loop_s for m in mine])
        print(f"{engine:>11} {whole_rates[engine]:>13.0f} {loop_rates[engine]:>12.0f}"
              f" {median([m.cpu_s / setting.iterations for m in mine]):>9.3f} {median([m.peak_mb for m in mine]):>8.0f}"
              f" {median([float(m.children) for m in mine]):>9.0f} {bound:>10.0f}"
              f" {loop_rates[engine] / bound:>6.0%}")
    print(f"{'ratio':>11} {whole_rates['evolve'] / whole_rates['openevolve']:>12.2f}x"
          f" {loop_rates['evolve'] / loop_rates['openevolve']:>11.2f}x  (evolve / OpenEvolve)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help=f"install OpenEvolve {OPENEVOLVE_VERSION} into {VENV}")
    parser.add_argument("--iterations", type=int, nargs="+", default=[60])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--latency-ms", type=int, nargs="+", default=[50])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[4])
    parser.add_argument("--workers", type=int, default=4, help="evolve's eval_workers")
    parser.add_argument("--openevolve-workers", type=int, default=0,
                        help="OpenEvolve's parallel_evaluations (also its requests in flight); 0: --workers")
    parser.add_argument("--burn-cpu-s", type=float, default=0.1, help="CPU the candidate burns per evaluation")
    parser.add_argument("--timeout-s", type=float, default=900, help="limit for one engine run")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores) and print it")
    args = parser.parse_args()
    if args.install:
        install()
    check_openevolve()
    if min(args.iterations + args.latency_ms + args.in_flight + [args.reps, args.workers]) < 1:
        raise SystemExit("bench: iterations, latency, in-flight, reps and workers must be at least 1")
    server = FakePolicyServer(latency_s=0)
    url = f"http://127.0.0.1:{server.start()}"
    work = Path(tempfile.mkdtemp(prefix="bench_vs_openevolve_"))
    try:
        evolve_problem, openevolve_problem = write_problem(work, args.burn_cpu_s)
        print(f"bench: fake policy server at {url}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for latency_ms, in_flight, iterations in itertools.product(args.latency_ms, args.in_flight, args.iterations):
            setting = Setting(latency_ms, in_flight, args.workers, args.openevolve_workers or args.workers,
                              iterations, args.burn_cpu_s)
            server.latency_s = latency_ms / 1000
            measures = []
            for rep in range(args.reps):
                for engine, runner, problem in (("evolve", run_evolve, evolve_problem),
                                                ("openevolve", run_openevolve, openevolve_problem)):
                    folder = work / f"{engine}-{latency_ms}ms-{in_flight}-{iterations}-{rep}"
                    folder.mkdir()
                    measure = runner(setting, problem, url, folder, rep, args.timeout_s)
                    print(f"  {engine:>10} rep {rep}: {measure.wall_s:6.1f} s whole, {measure.loop_s:6.1f} s loop, "
                          f"{measure.cpu_s:6.1f} CPU-s, {measure.children} children, load {measure.load:.1f}",
                          flush=True)
                    measures.append(measure)
            report(setting, measures)
        if server.unparsed:
            print(f"bench: {server.unparsed} OpenEvolve prompts showed no current value(): answered without a diff")
    finally:
        server.stop()
        if args.keep:
            print(f"bench: logs and stores kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
