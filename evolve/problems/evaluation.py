"""The trusted evaluator process: scores one program with its problem's evaluator.py, apart from the engine.

`evaluate_program` (engine side) writes the code to a temporary file and starts
`python -m evolve.problems.evaluation` in its own session under a hard deadline; the problem folder and the
program path go in on its stdin as one JSON object, never in its argv (which any process may read).
Its temporary folder is named after the engine process, and each evaluation first removes the folders of
engine processes that were killed before they could (evolve/sandbox/housekeeping.py).
That worker (this module's __main__) imports the problem's evaluator.py, calls
`evaluate(program_path, sandbox)` (or OpenEvolve's `evaluate(program_path)`), checks what came back
against the declared objectives and writes one JSON object on stdout. The worker never imports the
candidate; the evaluator runs it only through the sandbox, in a child process of its own. The engine's loops
(runs, experiments, sampling, training) score on warm worker processes instead (evaluator_pool.py), which run the
same EvaluatorRunner; `evolve check` and other one-off callers use this fresh process.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, get_args

from evolve.evaluator_api import CandidateFailure
from evolve.interpreters import module_command
from evolve.problems.cascade import CASCADE_ARTIFACT, FINAL_FUNCTION, CascadeNote
from evolve.problems.problem import Problem, ProblemError, load_problem
from evolve.problems.returned import (
    MAX_ARTIFACT_CHARS,
    MAX_DETAIL_CHARS,
    EvaluatorMistake,
    check_result,
    clipped,
    conform,
)
from evolve.problems.worker_processes import (
    Stopped,
    become_subreaper,
    end_leftovers,
    kill_session,
    signal_group,
    stop_children,
)
from evolve.records import Evaluation, FailureKind
from evolve.sandbox.core import Sandbox
from evolve.sandbox.housekeeping import make_owned_folder, remove_stale_folders

_MARGIN_S = 15.0  # two interpreter starts, imports and the evaluator's own work, beyond the candidate's limit
_GRACE_S = 1.0  # after SIGTERM the worker stops its sandbox children; then the whole group gets SIGKILL
_PIPE_GRACE_S = 1.0  # for an exiting worker to exit, and for what it wrote to be read, before it is killed
REPLY_LIMIT = 1 << 24  # bytes in one result line; artifacts are cut to a few kB each, so only a broken one is longer
_STDERR_TAIL = 4096
FOLDER_PREFIX = "evolve-eval-"


def evaluation_timeout(problem: Problem) -> float:
    """The default hard deadline for one evaluation: room for two sandbox runs (and one more per cascade stage)
    plus a margin."""
    return (2 + len(problem.cascade)) * problem.limits.in_force().wall_time_s + _MARGIN_S


# ---------------------------------------------------------------- engine side


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM (the worker then kills its sandbox children), a short grace, then SIGKILL to the group."""
    signal_group(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), _GRACE_S)
    except TimeoutError:
        pass
    finally:
        signal_group(process.pid, signal.SIGKILL)
        if process.returncode is None:
            await process.wait()


def _worker_failure(returncode: int | None, stderr: bytes) -> str:
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    tail = lines[-1].strip() if lines else f"exit code {returncode}"
    return f"the evaluator process ended without a result: {tail}"[:MAX_DETAIL_CHARS]


def _parse_worker_output(stdout: bytes) -> Evaluation | None:
    """The Evaluation on the worker's last JSON line; None when there is none or its fields are not what it writes."""
    for line in reversed(stdout.decode(errors="replace").splitlines()):
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue
        return _evaluation_from(data)
    return None


def _evaluation_from(data: Any) -> Evaluation | None:
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        return None
    ok, scores, artifacts = data["ok"], data.get("scores", {}), data.get("artifacts", {})
    failure, detail = data.get("failure"), data.get("detail", "")
    if not isinstance(scores, dict) or not isinstance(artifacts, dict) or not isinstance(detail, str):
        return None
    if not all(type(value) is float and math.isfinite(value) for value in scores.values()):
        return None
    if (failure is not None) if ok else (failure not in get_args(FailureKind)):
        return None
    return Evaluation(ok=ok, scores={clipped(name, 200): value for name, value in scores.items()},
                      failure=failure, detail=clipped(detail, MAX_DETAIL_CHARS) or ("" if ok else "no detail given"),
                      artifacts={clipped(key, 200): clipped(text, MAX_ARTIFACT_CHARS)
                                 for key, text in artifacts.items()})


async def evaluate_program(problem: Problem, code: str, timeout_s: float | None = None) -> Evaluation:
    """Score `code` in a fresh trusted evaluator process; every failure comes back as an Evaluation.

    The worker's answer is taken as soon as its line is in (not at the end of its output: a process the evaluator
    left behind may hold the pipes open), then its session is ended; the worker itself ends every process below it
    before it answers (end_leftovers), setsid daemons included."""
    deadline = timeout_s if timeout_s is not None else evaluation_timeout(problem)
    started = time.monotonic()
    remove_stale_folders(FOLDER_PREFIX)
    folder = make_owned_folder(FOLDER_PREFIX)
    stderr_tail = bytearray()
    try:
        program_path = folder / "program.py"
        program_path.write_text(code)
        job = json.dumps({"problem_dir": str(problem.path), "program_path": str(program_path)}).encode()
        process = await asyncio.create_subprocess_exec(
            *module_command("evolve.problems.evaluation"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=REPLY_LIMIT,
        )
        drain = asyncio.ensure_future(keep_tail(process, stderr_tail))
        try:
            line = await asyncio.wait_for(_answer(process, job), deadline)
        except TimeoutError:
            await _stop(process)
            return Evaluation(ok=False, failure="timeout", detail=f"the evaluation took over {deadline:g}s",
                              wall_s=time.monotonic() - started)
        except asyncio.CancelledError:
            await _stop(process)
            raise
        finally:
            await _end_session(process, drain)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    wall_s = time.monotonic() - started
    evaluation = _parse_worker_output(line)
    if evaluation is None:
        return Evaluation(ok=False, failure="evaluator_error",
                          detail=_worker_failure(process.returncode, bytes(stderr_tail)), wall_s=wall_s)
    return conform(problem, Evaluation(ok=evaluation.ok, scores=evaluation.scores, failure=evaluation.failure,
                                       detail=evaluation.detail, artifacts=evaluation.artifacts, wall_s=wall_s))


async def _answer(process: asyncio.subprocess.Process, job: bytes) -> bytes:
    """Send the job, then the worker's result line as soon as it is in; b"" when the worker ended without one (once
    it has exited, what it wrote is already in the pipe, so a process it left holding the pipe changes nothing)."""
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(job)
        await process.stdin.drain()
        process.stdin.close()
    except ConnectionError:  # the worker died before it read the job: its exit code and stderr say why
        pass
    reader = asyncio.ensure_future(process.stdout.readline())
    exited = asyncio.ensure_future(process.wait())
    try:
        done, _ = await asyncio.wait({reader, exited}, return_when=asyncio.FIRST_COMPLETED)
        if reader not in done:
            done, _ = await asyncio.wait({reader}, timeout=_PIPE_GRACE_S)
        return reader.result() if reader in done else b""
    except ValueError:  # a line past REPLY_LIMIT: no result the engine reads
        return b""
    finally:
        for task in (reader, exited):
            task.cancel()
        await asyncio.gather(reader, exited, return_exceptions=True)


async def _end_session(process: asyncio.subprocess.Process, drain: asyncio.Future[None]) -> None:
    """After the answer (or a timeout): the worker is exiting; kill its session whatever is left of it (a process
    that left the worker's group but not its session included), reap the worker, and stop reading its stderr even
    if something still holds that pipe."""
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), _PIPE_GRACE_S)
    except TimeoutError:
        pass
    kill_session(process.pid)
    if process.returncode is None:
        await process.wait()
    try:
        await asyncio.wait_for(drain, _PIPE_GRACE_S)
    except TimeoutError:
        pass  # wait_for cancelled the reader


async def keep_tail(process: asyncio.subprocess.Process, tail: bytearray) -> None:
    """Read the process's stderr (what the evaluator prints) to its end, keeping the last few kB for errors."""
    assert process.stderr is not None
    while chunk := await process.stderr.read(65536):
        tail.extend(chunk)
        del tail[:-_STDERR_TAIL]


# ---------------------------------------------------------------- worker side


def _last_line(exc: BaseException, evaluator_path: Path, tb: TracebackType | None) -> str:
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    lines = [frame.lineno for frame in traceback.extract_tb(tb) if Path(frame.filename) == evaluator_path]
    where = f" (line {lines[-1]})" if lines else ""
    return f"{evaluator_path.name}{where} raised {text}"


def _load_evaluator(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("problem_evaluator", path)
    if spec is None or spec.loader is None:
        raise EvaluatorMistake(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _takes_sandbox(function: Any) -> bool:
    positional = [p for p in inspect.signature(function).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)


async def resolve_objectives(problem: Problem) -> Problem:
    """A pattern problem with its objectives fixed from the seed program's evaluation (the problem itself when
    they are declared); ProblemError when the seed cannot be scored, since nothing else names them."""
    if problem.objectives_known:
        return problem
    evaluation = await evaluate_program(problem, problem.initial_code)
    if not evaluation.ok:
        raise ProblemError(f"{problem.path / 'problem.toml'}: objectives = "
                           f"{{pattern = {problem.objective_pattern!r}}} are named by the seed program's evaluation, "
                           f"which failed ({evaluation.failure}: {evaluation.detail})")
    return problem.resolved(evaluation.scores)


class EvaluatorRunner:
    """The problem's evaluator.py, imported on the first call and kept, with one Sandbox, scoring one program per
    call. A warm evaluator process (evaluator_pool) keeps one for its life, so module-level state of the evaluator
    outlives a call: evaluators must not let it change scores, and the process is recycled after any
    evaluator_error (the evaluator's own exception or mistake)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self._module: ModuleType | None = None
        self._sandbox: Sandbox | None = None

    def _load(self, name: str = FINAL_FUNCTION) -> Callable[..., Any]:
        """evaluate, or a cascade stage's function, from the evaluator (imported once)."""
        if self._module is None:
            self._module = _load_evaluator(self.problem.evaluator_path)
        function = getattr(self._module, name, None)
        if not callable(function):
            raise EvaluatorMistake(f"{self.problem.evaluator_path.name} defines no {name}(program_path, sandbox)")
        return function  # type: ignore[no-any-return]

    def _score(self, name: str, program_path: Path) -> tuple[dict[str, float], dict[str, str]]:
        """Call evaluate() or a stage function on the program; its checked scores and artifacts."""
        function = self._load(name)
        if _takes_sandbox(function):
            if self._sandbox is None:
                self._sandbox = Sandbox(self.problem.limits)
            return check_result(self.problem, function(str(program_path), self._sandbox))
        return check_result(self.problem, function(str(program_path)))

    def _cascade(self, program_path: Path) -> tuple[dict[str, float], dict[str, str]]:
        """The stages in order, then evaluate(): the scores of the first stage below its threshold, with the
        cascade note (CascadeNote) among the artifacts, or evaluate()'s. A candidate failing in a stage raises
        CandidateFailure naming the stage."""
        stages = self.problem.cascade
        seconds: list[float] = []
        for number, stage in enumerate((*stages, None), start=1):
            function = stage.function if stage is not None else FINAL_FUNCTION
            started = time.monotonic()
            try:
                scores, artifacts = self._score(function, program_path)
            except CandidateFailure as failure:
                if stage is None:
                    raise
                # the stage first: a stored reason is cut to a few hundred characters
                raise CandidateFailure(failure.kind, f"cascade stage {number} ({function}): {failure.detail}") \
                    from None
            finally:
                seconds.append(time.monotonic() - started)
            scalar = self.problem.scalar(scores)
            stopped = stage is not None and scalar < stage.threshold
            if stopped or stage is None:
                note = CascadeNote(stage=number, stages=len(stages) + 1, function=function, stopped=stopped,
                                   scalar=scalar, threshold=stage.threshold if stage is not None else None,
                                   seconds=tuple(round(value, 4) for value in seconds))
                return scores, {**artifacts, CASCADE_ARTIFACT: note.to_artifact()}
        raise AssertionError("the cascade ends with evaluate()")  # pragma: no cover - the loop returns at None

    def close(self) -> None:
        """Stop the sandbox's fork server, if one was started."""
        if self._sandbox is not None:
            self._sandbox.close()

    def kept_processes(self) -> set[int]:
        """The processes this runner keeps between evaluations: its sandbox's fork server, if one runs."""
        server = getattr(self._sandbox, "_fork_server", None)
        pid = getattr(server, "pid", None)
        return {pid} if isinstance(pid, int) else set()

    def evaluate(self, program_path: Path) -> Evaluation:
        """Run the problem's evaluator on the program (which only the sandbox imports)."""
        evaluator_path = self.problem.evaluator_path
        try:
            if self.problem.cascade:
                scores, artifacts = self._cascade(program_path)
            else:
                scores, artifacts = self._score(FINAL_FUNCTION, program_path)
        except CandidateFailure as failure:
            return Evaluation(ok=False, failure=failure.kind, detail=failure.detail[:MAX_DETAIL_CHARS])  # type: ignore[arg-type]
        except EvaluatorMistake as mistake:
            detail = f"{evaluator_path.name}: {mistake}"
            return Evaluation(ok=False, failure="evaluator_error", detail=detail[:MAX_DETAIL_CHARS])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the evaluator's own bugs are reported, not raised
            detail = _last_line(exc, evaluator_path, exc.__traceback__)
            return Evaluation(ok=False, failure="evaluator_error", detail=detail[:MAX_DETAIL_CHARS])
        return Evaluation(ok=True, scores=scores, artifacts=artifacts)


def evaluate_in_this_process(problem: Problem, program_path: Path) -> Evaluation:
    """The fresh worker's job: import the problem's evaluator and run it on the program once (the candidate in the
    Sandbox, whose fork server, if one started, is stopped after)."""
    runner = EvaluatorRunner(problem)
    try:
        return runner.evaluate(program_path)
    finally:
        runner.close()


def read_job(stdin: bytes) -> tuple[str, str] | None:
    """(problem folder, program path) from the JSON object on the worker's stdin; None if it is not one."""
    try:
        job = json.loads(stdin)
    except ValueError:
        return None
    if not isinstance(job, dict) or not all(isinstance(job.get(key), str) for key in ("problem_dir", "program_path")):
        return None
    return job["problem_dir"], job["program_path"]


def main(argv: list[str]) -> int:
    job = read_job(sys.stdin.buffer.read()) if not argv else None
    if job is None:
        print('usage: echo \'{"problem_dir": DIR, "program_path": FILE}\' | python -m evolve.problems.evaluation',
              file=sys.stderr)
        return 2
    problem_dir, program_path = job
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the evaluator reads nothing more from the engine
    os.close(devnull)
    result_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the evaluator prints goes to stderr and cannot be taken for the result
    signal.signal(signal.SIGTERM, stop_children)
    become_subreaper()
    try:
        try:
            problem = load_problem(problem_dir, Path(problem_dir).parent)
        except ProblemError as exc:
            evaluation = Evaluation(ok=False, failure="evaluator_error", detail=str(exc)[:MAX_DETAIL_CHARS])
        else:
            evaluation = evaluate_in_this_process(problem, Path(program_path))
        end_leftovers()  # nothing of the evaluation runs on once the engine has the answer
    except Stopped:
        end_leftovers()
        return 143
    result_stream.write(json.dumps(asdict(evaluation)) + "\n")
    result_stream.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
