"""Warm trusted evaluators: long-lived evaluator processes per problem, each serving one evaluation at a time.

`evaluate_program` (evaluation.py) starts a fresh interpreter per evaluation, and importing it costs more CPU
than most candidates. An `EvaluatorPool` keeps up to `size` idle processes per problem instead, each running this
module's __main__: it imports the problem's evaluator.py once (on its first job, as OpenEvolve's warm workers
do) and then reads one JSON job per line ({"problem_dir", "program_path"}) and writes one JSON result per line.
Jobs and results travel on private copies of its stdin and stdout; the evaluator's own stdout goes to stderr,
so nothing it prints can be taken for a result. Each process is still apart from the engine (its own session)
and from the candidate (the evaluator runs it through the Sandbox, in a child of its own), and whatever an
evaluation left running below the process (its group, and daemons that called setsid, which come back to it as their
subreaper) is killed before the result is sent. The process keeps one Sandbox
(and so its fork server, with the problem's preload imported) for its life.

Module-level state of an evaluator outlives a job. Evaluators must not let it change scores; to bound what can
leak, a process is recycled after `recycle_after` jobs, after any evaluator_error (the evaluator's own exception
or mistake), a timeout (the process group is killed, as evaluate_program does), a malformed reply or its death.
The hard deadline of each evaluation (evaluation_timeout) is timed here, on the engine side. A warm process
(one that had served a job) that dies before replying is replaced and the job retried once on a fresh process,
whose outcome is the job's; a fresh process that dies is an evaluator_error, as with evaluate_program.

The pool belongs to one event loop and to whoever scores (a Controller, an experiment, a training run), which
closes it at the end; `close` leaves no process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from evolve.interpreters import module_command
from evolve.problems.evaluation import (
    FOLDER_PREFIX,
    REPLY_LIMIT,
    EvaluatorRunner,
    _evaluation_from,
    _stop,
    _worker_failure,
    evaluation_timeout,
    keep_tail,
    read_job,
)
from evolve.problems.problem import Problem, ProblemError, load_problem
from evolve.problems.returned import conform
from evolve.problems.worker_processes import Stopped, become_subreaper, end_leftovers, signal_group, stop_children
from evolve.records import Evaluation
from evolve.sandbox.housekeeping import make_owned_folder, remove_stale_folders

DEFAULT_RECYCLE_AFTER = 100
_RETIRE_S = 1.0  # a recycled process exits when its job pipe closes; past this its group is killed
_DRAIN_S = 1.0  # after a process is killed, for its stderr to reach its end (something it left may hold the pipe)


@dataclass(eq=False)
class _Worker:
    """One warm evaluator process and what the engine knows of it."""

    process: asyncio.subprocess.Process
    problem_dir: str
    served: int = 0
    idle_since: float = 0.0
    stderr_tail: bytearray = field(default_factory=bytearray)
    drain: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class _Attempt:
    """One job on one process: the evaluation, or None when the process died before replying."""

    evaluation: Evaluation | None
    warm: bool  # the process had served a job before this one
    detail: str = ""


class EvaluatorPool:
    """Up to `size` idle warm evaluator processes per problem, each recycled after `recycle_after` jobs.

    Callers bound how many evaluations run at once (the ChildScorer's slots); a job finding no idle process of its
    problem starts one, and a process coming back to a full idle list is retired. `max_idle` (default 2 x size)
    bounds the idle processes of all problems together, the longest idle retired first, so that an experiment
    over many problems does not keep a process for each problem it has finished."""

    def __init__(self, size: int = 2, recycle_after: int = DEFAULT_RECYCLE_AFTER, max_idle: int | None = None) -> None:
        if size < 1 or recycle_after < 1 or (max_idle is not None and max_idle < 1):
            raise ValueError("an evaluator pool needs size >= 1, recycle_after >= 1 and max_idle >= 1")
        self.size = size
        self.recycle_after = recycle_after
        self.max_idle = max_idle or 2 * size
        self.started = 0  # processes started over the pool's life
        self.retried = 0  # jobs retried after a warm process died
        self._idle: dict[str, list[_Worker]] = {}
        self._live: set[_Worker] = set()
        self._retiring: set[asyncio.Task[None]] = set()
        self._folder: Path | None = None
        self._closed = False

    async def __aenter__(self) -> EvaluatorPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def pids(self) -> list[int]:
        """The process ids of the pool's live evaluator processes (busy or idle)."""
        return [worker.process.pid for worker in self._live]

    async def evaluate(self, problem: Problem, code: str, timeout_s: float | None = None) -> Evaluation:
        """Score `code` on a warm evaluator process; every failure comes back as an Evaluation."""
        if self._closed:
            raise RuntimeError("this evaluator pool is closed")
        deadline = timeout_s if timeout_s is not None else evaluation_timeout(problem)
        started = time.monotonic()
        job_folder = Path(tempfile.mkdtemp(prefix="job-", dir=self._pool_folder()))
        try:
            program_path = job_folder / "program.py"
            program_path.write_text(code)
            job = json.dumps({"problem_dir": str(problem.path), "program_path": str(program_path)}).encode() + b"\n"
            attempt = await self._attempt(str(problem.path), job, started + deadline, deadline)
            if attempt.evaluation is None and attempt.warm and not self._closed:
                self.retried += 1
                attempt = await self._attempt(str(problem.path), job, started + deadline, deadline, fresh=True)
        finally:
            shutil.rmtree(job_folder, ignore_errors=True)
        evaluation = attempt.evaluation or Evaluation(ok=False, failure="evaluator_error", detail=attempt.detail)
        return conform(problem, Evaluation(ok=evaluation.ok, scores=evaluation.scores, failure=evaluation.failure,
                                           detail=evaluation.detail, artifacts=evaluation.artifacts,
                                           wall_s=time.monotonic() - started))

    async def close(self) -> None:
        """Stop every process of the pool (idle or busy) and remove its temporary folder."""
        self._closed = True
        self._idle.clear()
        await asyncio.gather(*self._retiring, return_exceptions=True)
        await asyncio.gather(*(self._discard(worker) for worker in list(self._live)), return_exceptions=True)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _pool_folder(self) -> Path:
        if self._folder is None:
            remove_stale_folders(FOLDER_PREFIX)
            self._folder = make_owned_folder(FOLDER_PREFIX)
        return self._folder

    async def _attempt(self, problem_dir: str, job: bytes, ends_at: float, deadline: float,
                       fresh: bool = False) -> _Attempt:
        idle = self._idle.setdefault(problem_dir, [])
        worker = None if fresh or not idle else idle.pop()
        if worker is None and self._closed:  # a job in flight while the pool closes starts nothing more
            return _Attempt(None, False, "the evaluator pool was closed during the evaluation")
        if worker is None:
            try:
                worker = await self._start(problem_dir)
            except OSError as exc:
                return _Attempt(None, False, f"the evaluator process could not start: {exc}")
        warm = worker.served > 0
        worker.stderr_tail.clear()
        try:
            assert worker.process.stdin is not None and worker.process.stdout is not None
            worker.process.stdin.write(job)
            await worker.process.stdin.drain()
            line = await asyncio.wait_for(worker.process.stdout.readline(), max(ends_at - time.monotonic(), 0.0))
        except TimeoutError:
            await self._discard(worker)
            return _Attempt(Evaluation(ok=False, failure="timeout", detail=f"the evaluation took over {deadline:g}s"),
                            warm)
        except asyncio.CancelledError:
            await self._discard(worker)
            raise
        except (ConnectionError, ValueError):  # a dead process's pipe, or a reply past _REPLY_LIMIT
            line = b""
        evaluation = _reply(line)
        if evaluation is None:
            await self._discard(worker)
            if line:
                return _Attempt(Evaluation(ok=False, failure="evaluator_error",
                                           detail="the evaluator process sent a malformed result"), warm)
            return _Attempt(None, warm, _worker_failure(worker.process.returncode, bytes(worker.stderr_tail)))
        worker.served += 1
        if evaluation.failure == "evaluator_error" or worker.served >= self.recycle_after or self._closed \
                or len(idle) >= self.size:
            self._retire_later(worker)
        else:
            worker.idle_since = time.monotonic()
            idle.append(worker)
            self._trim_idle()
        return _Attempt(evaluation, warm)

    async def _start(self, problem_dir: str) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            *module_command("evolve.problems.evaluator_pool"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=REPLY_LIMIT,
        )
        worker = _Worker(process, problem_dir)
        worker.drain = asyncio.ensure_future(keep_tail(process, worker.stderr_tail))
        self._live.add(worker)
        self.started += 1
        return worker

    def _retire_later(self, worker: _Worker) -> None:
        """Retire in the background: the job's result is ready now."""
        retiring = asyncio.ensure_future(self._retire(worker))
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)

    def _trim_idle(self) -> None:
        idle = sorted((worker for workers in self._idle.values() for worker in workers), key=lambda w: w.idle_since)
        for worker in idle[:max(len(idle) - self.max_idle, 0)]:
            self._idle[worker.problem_dir].remove(worker)
            self._retire_later(worker)

    async def _retire(self, worker: _Worker) -> None:
        """End a healthy process: close its job pipe (it exits), then kill whatever is left of its group."""
        assert worker.process.stdin is not None
        worker.process.stdin.close()
        try:
            await asyncio.wait_for(worker.process.wait(), _RETIRE_S)
        except TimeoutError:
            pass
        await self._discard(worker)

    async def _discard(self, worker: _Worker) -> None:
        """Stop a process and its group (SIGTERM, a grace, SIGKILL) and forget it."""
        self._live.discard(worker)
        for idle in self._idle.values():
            if worker in idle:
                idle.remove(worker)
        if worker.process.returncode is None:
            await _stop(worker.process)
        else:
            signal_group(worker.process.pid, signal.SIGKILL)
        if worker.drain is not None:
            try:
                await asyncio.wait_for(worker.drain, _DRAIN_S)
            except (TimeoutError, ConnectionError):
                pass  # wait_for cancelled the reader


def _reply(line: bytes) -> Evaluation | None:
    try:
        return _evaluation_from(json.loads(line)) if line.strip() else None
    except (ValueError, RecursionError):
        return None


# ---------------------------------------------------------------- the warm process


def serve() -> int:
    """Serve jobs from stdin until it closes: one result line per job, on a private copy of stdout."""
    jobs = os.fdopen(os.dup(0), "rb")
    results = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the evaluator reads nothing from the engine
    os.close(devnull)
    os.dup2(2, 1)  # whatever the evaluator prints goes to stderr and cannot be taken for a result
    signal.signal(signal.SIGTERM, stop_children)
    become_subreaper()
    runner: EvaluatorRunner | None = None
    served_dir = ""
    try:
        for line in jobs:
            job = read_job(line)
            if job is None:
                print("evaluator_pool: a job line is not {problem_dir, program_path}", file=sys.stderr)
                return 2
            problem_dir, program_path = job
            if runner is None:
                served_dir = problem_dir
                try:
                    runner = EvaluatorRunner(load_problem(problem_dir, Path(problem_dir).parent))
                except ProblemError as exc:
                    _send(results, Evaluation(ok=False, failure="evaluator_error", detail=str(exc)[:500]))
                    return 0
            if problem_dir != served_dir:
                _send(results, Evaluation(ok=False, failure="evaluator_error",
                                          detail=f"this evaluator process serves {served_dir} only"))
                return 0
            evaluation = runner.evaluate(Path(program_path))
            end_leftovers(keep=runner.kept_processes())  # nothing of this job runs on once it is answered
            _send(results, evaluation)
            if evaluation.failure == "evaluator_error":
                return 0  # recycled: the evaluator's state may be anything after its own exception
    except Stopped:
        if runner is not None:
            runner.close()
            runner = None
        end_leftovers()
        return 143
    finally:
        if runner is not None:
            runner.close()
    return 0


def _send(results: TextIO, evaluation: Evaluation) -> None:
    results.write(json.dumps(asdict(evaluation)) + "\n")
    results.flush()


if __name__ == "__main__":
    sys.exit(serve())
