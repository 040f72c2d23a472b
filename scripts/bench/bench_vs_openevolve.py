"""Benchmark: evolve against OpenEvolve 0.4.0 side by side, same fake policy server, same problem, runs interleaved.

One fixed-latency fake OpenAI-compatible server (127.0.0.1, this process) serves both engines, each in its own reply
format (evolve: a whole-block rewrite; OpenEvolve: its default SEARCH/REPLACE diff), every reply setting one constant
to a fresh value; both get the same problem, whose candidate burns --burn-cpu-s of CPU (0.1 s) per evaluation
(scripts/bench/bench_openevolve_port.py). The evolve run is a copy of the working tree's evolve/ taken at the start
(or of --evolve-commit), so the tree may change while the bench runs.

Each engine runs as a subprocess, A B A B ..., --reps times per setting (latency x in-flight x iterations). Figures
per engine and setting, medians over reps:
- it/min whole: iterations over the process's wall time (start-up, seed evaluation and shut-down included);
- it/min loop: iterations over the loop's own time, from the stored seed to the last committed iteration (evolve's
  store) or from "Starting process-based evolution" to "Evolution completed" (OpenEvolve's log);
- CPU-s/it: user + system CPU of the process and all its descendants, over the iterations (start-up included); this
  process is their child subreaper, so a worker that outlives its parent is reaped, and counted, here; "beyond": the
  same less the candidate's own --burn-cpu-s, i.e. what the engine, its evaluators and its sandbox cost;
- peak MB: ru_maxrss of that rusage (the largest single process); tree MB: the peak of the summed PSS of the whole
  process tree (workers, evaluators, sandbox children), sampled every 0.5 s;
- bound: min(in_flight / latency, min(cores, workers) / burn CPU-s) iterations/min, and each engine's loop share of
  it. OpenEvolve's worker makes the policy call and the evaluation in turn, so its requests in flight are its
  workers (--openevolve-workers, default --workers); its bound uses that.
The load average is printed around the runs: on a shared machine the figures move with it; interleaving keeps the
comparison fair, not the absolute numbers.

    .venv/bin/python scripts/bench/bench_vs_openevolve.py --install          # once: .bench/openevolve-venv from PyPI
    .venv/bin/python scripts/bench/bench_vs_openevolve.py --iterations 60 300 --reps 3 --latency-ms 50 500 \
        --in-flight 4 16
    # a third engine, evolve as of an earlier commit, interleaved with the two (A B C A B C ...):
    .venv/bin/python scripts/bench/bench_vs_openevolve.py --iterations 200 --reps 3 --in-flight 16 \
        --evolve-baseline HEAD~1
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench_openevolve_port import FakePolicyServer, write_problem  # scripts/ is on sys.path when run as a script
from bench_processes import become_subreaper, run_process

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".bench" / "openevolve-venv"
OPENEVOLVE_VERSION = "0.4.0"


@dataclass(frozen=True)
class Setting:
    """One point of the comparison; OpenEvolve's requests in flight are its workers (its worker calls, then scores)."""

    latency_ms: int
    in_flight: int
    workers: int
    openevolve_workers: int
    iterations: int
    burn_cpu_s: float

    def bound_per_min(self, in_flight: int, workers: int) -> float:
        """min(in_flight / latency, min(cores, workers) / burn CPU-s), in iterations per minute."""
        cores = min(os.cpu_count() or 1, workers)
        return 60 * min(in_flight / (self.latency_ms / 1000), cores / self.burn_cpu_s)


@dataclass(frozen=True)
class Measure:
    """One engine run's figures."""

    engine: str
    wall_s: float
    loop_s: float
    cpu_s: float
    peak_mb: float  # the largest single process (ru_maxrss)
    tree_mb: float  # the whole process tree (summed PSS), its peak as sampled
    children: int  # valid children stored (the seed excluded)
    outlived: int  # processes still there when the engine's process ended (reaped, then killed after 10 s)
    load: float  # mean of the 1-minute load average before and after


def evolve_loop(db: Path) -> tuple[float, int]:
    """(seconds from the stored seed to the last committed iteration, valid children) from evolve's store."""
    with sqlite3.connect(db) as connection:
        seed, children = connection.execute(
            "SELECT min(created_at) FILTER (WHERE iteration = 0), count(*) FILTER (WHERE iteration > 0) "
            "FROM programs").fetchone()
        (last,) = connection.execute("SELECT max(created_at) FROM attempts").fetchone()
    if seed is None or last is None:
        raise SystemExit(f"bench: evolve's store {db} holds no seed or no iteration")
    return (datetime.fromisoformat(last) - datetime.fromisoformat(seed)).total_seconds(), children


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


@dataclass(frozen=True)
class Bench:
    """What every engine run shares: the fake server's URL, the evolve code under test, both problem folders."""

    url: str
    evolve_src: Path  # a folder holding the `evolve` package run (a snapshot taken when the bench starts)
    baseline_src: Path | None  # the same for --evolve-baseline's commit, run as the engine "evolve@base"
    evolve_problem: Path
    openevolve_problem: Path
    timeout_s: float


def snapshot_evolve(into: Path, commit: str | None) -> str:
    """Copies the evolve package (the working tree's, or `commit`'s) into `into`, so that every rep runs the same
    code while the tree changes; returns what was copied, in words."""
    into.mkdir(parents=True)
    git = ["git", "-C", str(ROOT)]
    if commit:
        resolved = subprocess.run([*git, "rev-parse", "--short", "--verify", f"{commit}^{{commit}}"],
                                  capture_output=True, text=True)
        if resolved.returncode != 0:
            raise SystemExit(f"bench: --evolve-commit {commit} is not a commit of {ROOT}")
        archive = subprocess.run([*git, "archive", resolved.stdout.strip(), "evolve"], capture_output=True)
        if archive.returncode != 0:
            raise SystemExit(f"bench: git archive {commit}: {archive.stderr.decode(errors='replace').strip()}")
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
        return f"evolve at commit {resolved.stdout.strip()}"
    shutil.copytree(ROOT / "evolve", into / "evolve", ignore=shutil.ignore_patterns("__pycache__"))
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "evolve"], capture_output=True, text=True).stdout.strip()
    return f"evolve from the working tree at {head or '?'}{' with uncommitted changes' if dirty else ''}"


def evolve_environment(evolve_src: Path) -> dict[str, str]:
    """The environment that makes `python -m evolve` (and the processes it starts) import evolve_src's package;
    SystemExit when it does not."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(evolve_src), os.environ.get("PYTHONPATH")])))
    found = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", "import evolve; print(evolve.__file__)"],
                           capture_output=True, text=True, env=env, cwd=evolve_src)
    if not found.stdout.strip().startswith(str(evolve_src)):
        raise SystemExit(f"bench: the evolve snapshot in {evolve_src} is not what python imports: "
                         f"{found.stdout.strip() or found.stderr.strip()[-300:]}")
    return env


def run_evolve(setting: Setting, bench: Bench, work: Path, seed: int, baseline: bool = False) -> Measure:
    config = work / "evolve.toml"
    config.write_text(
        f'[run]\nproblem = "{bench.evolve_problem}"\niterations = {setting.iterations}\nseed = {seed}\n'
        f'db = "{work / "evolve.db"}"\nconcurrency = {setting.in_flight}\neval_workers = {setting.workers}\n\n'
        f'[policy]\nname = "fake"\nbackend = "openai"\nurl = "{bench.url}/evolve/v1"\nmodel = "fake"\n'
        'prefill = false\ntimeout_s = 60\nretries = 2\n')
    load = os.getloadavg()[0]
    src = bench.baseline_src if baseline and bench.baseline_src is not None else bench.evolve_src
    command = [str(ROOT / ".venv" / "bin" / "python"), "-m", "evolve", "run", "-c", str(config), "--plain"]
    wall, cpu, peak, tree, outlived = run_process(command, work, work / "evolve.log", bench.timeout_s,
                                                  evolve_environment(src))
    loop, children = evolve_loop(work / "evolve.db")
    return Measure("evolve@base" if baseline else "evolve", wall, loop, cpu, peak, tree, children, outlived,
                   (load + os.getloadavg()[0]) / 2)


def run_evolve_baseline(setting: Setting, bench: Bench, work: Path, seed: int) -> Measure:
    return run_evolve(setting, bench, work, seed, baseline=True)


def run_openevolve(setting: Setting, bench: Bench, work: Path, seed: int) -> Measure:
    config = work / "config.yaml"
    config.write_text(
        f"max_iterations: {setting.iterations}\nrandom_seed: {seed}\ndiff_based_evolution: true\n"
        f"llm:\n  api_base: {bench.url}/openevolve/v1\n  api_key: fake\n  models:\n    - name: fake\n"
        "      weight: 1.0\n  timeout: 60\n  retries: 2\n  retry_delay: 1\n"
        f"evaluator:\n  parallel_evaluations: {setting.openevolve_workers}\n  cascade_evaluation: false\n"
        "  timeout: 60\n")
    output = work / "output"
    load = os.getloadavg()[0]
    env = dict(os.environ, OPENAI_API_KEY="fake")
    problem = bench.openevolve_problem
    command = [str(VENV / "bin" / "openevolve-run"), str(problem / "initial_program.py"), str(problem / "evaluator.py"),
               "--config", str(config), "--iterations", str(setting.iterations), "--output", str(output)]
    wall, cpu, peak, tree, outlived = run_process(command, work, work / "openevolve.log", bench.timeout_s, env)
    loop, children = openevolve_loop(output)
    return Measure("openevolve", wall, loop, cpu, peak, tree, children, outlived, (load + os.getloadavg()[0]) / 2)


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
    """One line per engine (medians over reps) and the ratio evolve / OpenEvolve (and, with a baseline, the
    baseline's and evolve / baseline)."""
    print(f"\nlatency {setting.latency_ms} ms, {setting.in_flight} in flight, {setting.workers} workers "
          f"(OpenEvolve: {setting.openevolve_workers} workers), {setting.iterations} iterations, "
          f"{len(measures) // len({m.engine for m in measures})} reps, "
          f"load average {median([m.load for m in measures]):.1f} on "
          f"{os.cpu_count()} cores")
    print(f"{'engine':>11} {'it/min whole':>13} {'it/min loop':>12} {'CPU-s/it':>9} {'beyond':>7} {'peak MB':>8}"
          f" {'tree MB':>8} {'children':>9} {'bound/min':>10} {'share':>6}")
    loop_rates: dict[str, float] = {}
    whole_rates: dict[str, float] = {}
    engines = [name for name in ("evolve", "evolve@base", "openevolve") if any(m.engine == name for m in measures)]
    for engine in engines:
        mine = [m for m in measures if m.engine == engine]
        bound = setting.bound_per_min(setting.in_flight, setting.workers) if engine != "openevolve" \
            else setting.bound_per_min(setting.openevolve_workers, setting.openevolve_workers)
        whole_rates[engine] = median([60 * setting.iterations / m.wall_s for m in mine])
        loop_rates[engine] = median([60 * setting.iterations / m.loop_s for m in mine])
        cpu_per_iteration = median([m.cpu_s / setting.iterations for m in mine])
        print(f"{engine:>11} {whole_rates[engine]:>13.0f} {loop_rates[engine]:>12.0f}"
              f" {cpu_per_iteration:>9.3f} {cpu_per_iteration - setting.burn_cpu_s:>7.3f}"
              f" {median([m.peak_mb for m in mine]):>8.0f} {median([m.tree_mb for m in mine]):>8.0f}"
              f" {median([float(m.children) for m in mine]):>9.0f} {bound:>10.0f}"
              f" {loop_rates[engine] / bound:>6.0%}")
    pairs = [("evolve", "openevolve", "evolve / OpenEvolve")]
    if "evolve@base" in engines:
        pairs += [("evolve@base", "openevolve", "evolve@base / OpenEvolve"),
                  ("evolve", "evolve@base", "evolve / evolve@base")]
    for mine, theirs, label in pairs:
        print(f"{'ratio':>11} {whole_rates[mine] / whole_rates[theirs]:>12.2f}x"
              f" {loop_rates[mine] / loop_rates[theirs]:>11.2f}x  ({label})")


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
    parser.add_argument("--evolve-commit", default=None,
                        help="run evolve as of this git commit (default: a copy of the working tree's evolve/)")
    parser.add_argument("--evolve-baseline", default=None,
                        help="also run evolve as of this git commit, as the engine evolve@base, interleaved")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores) and print it")
    args = parser.parse_args()
    if args.install:
        install()
    check_openevolve()
    if min(args.iterations + args.latency_ms + args.in_flight + [args.reps, args.workers]) < 1:
        raise SystemExit("bench: iterations, latency, in-flight, reps and workers must be at least 1")
    if not 0 < args.burn_cpu_s <= 5:
        raise SystemExit("bench: --burn-cpu-s must be above 0 and at most 5 (the problem's CPU limit is 10 s)")
    become_subreaper()
    server = FakePolicyServer(latency_s=0)
    url = f"http://127.0.0.1:{server.start()}"
    work = Path(tempfile.mkdtemp(prefix="bench_vs_openevolve_"))
    try:
        evolve_problem, openevolve_problem = write_problem(work, args.burn_cpu_s)
        source = snapshot_evolve(work / "src", args.evolve_commit)
        evolve_environment(work / "src")
        baseline_src = None
        if args.evolve_baseline:
            source += f"; evolve@base: {snapshot_evolve(work / 'base', args.evolve_baseline)}"
            evolve_environment(work / "base")
            baseline_src = work / "base"
        bench = Bench(url, work / "src", baseline_src, evolve_problem, openevolve_problem, args.timeout_s)
        engines = [("evolve", run_evolve)] + ([("evolve@base", run_evolve_baseline)] if baseline_src else []) \
            + [("openevolve", run_openevolve)]
        print(f"bench: {source}; OpenEvolve {OPENEVOLVE_VERSION}; fake policy server at {url}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        for latency_ms, in_flight, iterations in itertools.product(args.latency_ms, args.in_flight, args.iterations):
            setting = Setting(latency_ms, in_flight, args.workers, args.openevolve_workers or args.workers,
                              iterations, args.burn_cpu_s)
            server.latency_s = latency_ms / 1000
            measures = []
            for rep in range(args.reps):
                for engine, runner in engines:
                    folder = work / f"{engine}-{latency_ms}ms-{in_flight}-{iterations}-{rep}"
                    folder.mkdir()
                    measure = runner(setting, bench, folder, rep)
                    print(f"  {engine:>11} rep {rep}: {measure.wall_s:6.1f} s whole, {measure.loop_s:6.1f} s loop, "
                          f"{measure.cpu_s:6.1f} CPU-s, {measure.tree_mb:4.0f} MB tree, {measure.children} children, "
                          f"load {measure.load:.1f}"
                          + (f", {measure.outlived} processes outlived it" if measure.outlived else ""),
                          flush=True)
                    measures.append(measure)
            report(setting, measures)
        if server.unparsed:
            print(f"bench: {server.unparsed} OpenEvolve prompts showed no current value(): answered without a diff")
    except BaseException:
        args.keep = True  # the logs named in the error line stay readable
        raise
    finally:
        server.stop()
        if args.keep:
            print(f"bench: logs and stores kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
