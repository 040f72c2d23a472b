"""The trusted evaluator process: runs a problem's evaluator.py on one candidate, apart from the engine.

The engine calls `evaluate_program`, which starts `python -m evolve.evaluation PROBLEM_DIR PROGRAM`
in a child process (its own session, killed as a group on its deadline). That worker imports the
problem's evaluator.py, which runs the candidate only through the sandbox and so sees only its
outputs; the worker checks what the evaluator returned and prints one JSON object.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evolve.evaluator_api import CandidateFailure, EvaluationResult
from evolve.problems import Problem, load_problem
from evolve.records import Evaluation
from evolve.sandbox import Sandbox

_MARGIN_S = 20.0  # interpreter start and the evaluator's own work, on top of the candidate's limits


def _check_scores(problem: Problem, raw: Any) -> tuple[dict[str, float], dict[str, str]]:
    """Validate what evaluate() returned; raise ValueError with a message naming what is wrong."""
    artifacts: dict[str, str] = {}
    if isinstance(raw, EvaluationResult):
        raw, artifacts = raw.scores, {str(k): str(v) for k, v in raw.artifacts.items()}
    if not isinstance(raw, dict):
        raise ValueError(f"evaluate() returned {type(raw).__name__}, expected dict[str, float] or EvaluationResult")
    missing = [name for name in problem.objectives if name not in raw]
    extra = [str(name) for name in raw if name not in problem.objectives]
    if missing or extra:
        raise ValueError(f"evaluate() returned objectives that differ from problem.toml: missing {missing}, "
                         f"unexpected {extra}")
    scores: dict[str, float] = {}
    for name in problem.objectives:
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise ValueError(f"objective '{name}' is {type(value).__name__}, expected a number")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"objective '{name}' is {value}, expected a finite number")
        scores[name] = value
    return scores, artifacts


def evaluate_in_this_process(problem: Problem, program_path: Path) -> Evaluation:
    """The worker's job; runs the problem's trusted evaluator, never the candidate itself."""
    started = time.monotonic()
    try:
        spec = importlib.util.spec_from_file_location("problem_evaluator", problem.evaluator_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        evaluate = getattr(module, "evaluate", None)
        if not callable(evaluate):
            raise ValueError(f"{problem.evaluator_path} defines no evaluate(program_path[, sandbox]) function")
        takes_sandbox = len(inspect.signature(evaluate).parameters) >= 2
        sandbox = Sandbox(problem.limits)
        raw = evaluate(str(program_path), sandbox) if takes_sandbox else evaluate(str(program_path))
        scores, artifacts = _check_scores(problem, raw)
    except CandidateFailure as failure:
        return Evaluation(ok=False, failure=failure.kind, detail=failure.detail[:500],
                          wall_s=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - the evaluator's own mistakes are reported, not raised
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return Evaluation(ok=False, failure="evaluator_error", detail=f"{problem.evaluator_path.name}: {last}"[:500],
                          wall_s=time.monotonic() - started)
    return Evaluation(ok=True, scores=scores, artifacts=artifacts, wall_s=time.monotonic() - started)


def _overall_timeout(problem: Problem) -> float:
    return problem.limits.wall_time_s * 4 + _MARGIN_S


async def evaluate_program(problem: Problem, code: str, timeout_s: float | None = None) -> Evaluation:
    """Score one program in a separate trusted evaluator process; every failure is an Evaluation."""
    timeout_s = timeout_s or _overall_timeout(problem)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evolve-eval-") as folder:
        program_path = Path(folder) / "program.py"
        program_path.write_text(code)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "evolve.evaluation", str(problem.path), str(program_path),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await process.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return Evaluation(ok=False, failure="timeout", detail=f"evaluation took over {timeout_s:g}s",
                              wall_s=time.monotonic() - started)
    try:
        return Evaluation(**json.loads(stdout.decode().strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {process.returncode}"]
        return Evaluation(ok=False, failure="evaluator_error", detail=f"evaluator process failed: {tail[0]}"[:500],
                          wall_s=time.monotonic() - started)


def main(argv: list[str]) -> None:
    problem_dir, program_path = argv
    problem = load_problem(problem_dir, Path(problem_dir).parent)
    evaluation = evaluate_in_this_process(problem, Path(program_path))
    print(json.dumps(asdict(evaluation)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
