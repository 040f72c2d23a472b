"""`evolve check` and `evolve new-problem`: validate a problem folder end to end (or score a solution with it),
and scaffold a working one."""

from __future__ import annotations

import asyncio
import keyword
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import Problem, ProblemError, load_problem
from evolve.problems.returned import conform
from evolve.program_format import block_body, replace_block
from evolve.records import Evaluation

SCAFFOLD = Path(__file__).parent / "scaffold"
# template name -> (its folder of FILE.txt files, the files it writes)
TEMPLATES: dict[str, tuple[Path, tuple[str, ...]]] = {
    "default": (SCAFFOLD, ("problem.toml", "initial.py", "evaluator.py", "driver.py")),
    "io-tests": (SCAFFOLD / "io_tests", ("problem.toml", "initial.py", "evaluator.py", "tests.toml")),
}
SCAFFOLD_FILES = TEMPLATES["default"][1]
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# a candidate that fails on import: a sound evaluator reports it as the candidate's failure, not its own
_BROKEN_BODY = 'raise RuntimeError("evolve check: a deliberately broken candidate")\n'

Severity = Literal["error", "warning", "ok"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    message: str  # one line: what is wrong (or right) and, for problems, the file and what to fix


@dataclass
class CheckReport:
    problem: Problem | None
    findings: list[Finding] = field(default_factory=list)
    initial: Evaluation | None = None

    @property
    def ok(self) -> bool:
        return not any(finding.severity == "error" for finding in self.findings)

    def add(self, severity: Severity, message: str) -> None:
        self.findings.append(Finding(severity, message))


def solved_rule(problem: Problem) -> str:
    rules = []
    if problem.solved_all_at_least is not None:
        rules.append(f"every objective >= {problem.solved_all_at_least:g}")
    if problem.solved_scalar_at_least is not None:
        rules.append(f"scalar >= {problem.solved_scalar_at_least:g}")
    return " and ".join(rules) or "never (no [solved] rule)"


def reduction_rule(problem: Problem) -> str:
    if problem.reduction == "weighted":
        return "weighted mean (" + ", ".join(f"{k} {v:g}" for k, v in problem.weights.items()) + ")"
    return "mean"


def _loaded(name_or_path: str, programs_dir: Path) -> CheckReport:
    """A report on the loaded problem, or one holding the load error (report.problem is None)."""
    try:
        return CheckReport(load_problem(name_or_path, programs_dir))
    except ProblemError as exc:
        report = CheckReport(None)
        report.add("error", str(exc))
        return report


def check_problem(name_or_path: str, programs_dir: Path) -> CheckReport:
    """Load the folder, then score initial.py twice and a broken candidate once, in the real sandbox."""
    report = _loaded(name_or_path, programs_dir)
    if report.problem is None:
        return report
    problem = report.problem
    first, second, broken = asyncio.run(_evaluations(problem))
    report.initial = first
    evaluator = problem.evaluator_path
    if first.ok and not problem.objectives_known:
        problem = report.problem = problem.resolved(first.scores)
        second, broken = conform(problem, second), conform(problem, broken)
    if problem.objectives_known:
        report.add("ok", f"{problem.path / 'problem.toml'}: {_objectives_line(problem)}, scalar = "
                         f"{reduction_rule(problem)}, solved when {solved_rule(problem)}")
    if not first.ok:
        where = evaluator if first.failure == "evaluator_error" else problem.path / "initial.py"
        fix = ("fix evaluate() so that it returns a dict with exactly the objectives of problem.toml, as finite "
               "numbers" if first.failure == "evaluator_error" else "the seed program must run and be scored")
        report.add("error", f"{where}: the initial program's evaluation failed ({first.failure}: "
                            f"{first.detail}); {fix}")
        return report
    report.add("ok", f"initial.py scores {problem.scalar(first.scores):.4g} in {first.wall_s:.2f} s")
    if second.ok and second.scores != first.scores:
        changed = [name for name in problem.objectives if first.scores[name] != second.scores.get(name)]
        report.add("warning", f"{evaluator}: two evaluations of initial.py disagree on {', '.join(changed[:5])}; "
                              "seed every random generator so that scores are reproducible")
    elif not second.ok:
        report.add("error", f"{evaluator}: a second evaluation of initial.py failed ({second.failure}: "
                            f"{second.detail}); the evaluator must give the same vector every time")
    if problem.is_solved(first.scores):
        report.add("warning", f"{problem.path / 'initial.py'}: the initial program already meets the solved rule "
                              f"({solved_rule(problem)}); nothing is left to discover")
    if all(value == 0 for value in first.scores.values()):
        if problem.stub_seed:
            report.add("ok", "initial.py scores 0 on every objective, as the stub seed it is should "
                             "(problem.toml: stub_seed = true)")
        else:
            report.add("warning", f"{evaluator}: every objective of initial.py is 0; selection has no signal "
                                  "to start from (give partial credit, or a better seed program; a stub seed meant "
                                  "to fail every test says so in problem.toml: stub_seed = true)")
    limit = problem.limits.in_force().wall_time_s
    if first.wall_s > 0.5 * limit:
        report.add("warning", f"{problem.path / 'problem.toml'}: initial.py took {first.wall_s:.1f} s of the "
                              f"{limit:g} s wall limit; raise [limits] wall_time_s or make the tests cheaper")
    if broken.failure == "evaluator_error":
        report.add("error", f"{evaluator}: a candidate that raises on import made the evaluator itself fail "
                            f"({broken.detail}); pass the sandbox's result through fail_unless_ok, or raise "
                            "CandidateFailure, so the candidate is blamed")
    elif broken.ok and problem.is_solved(broken.scores):
        report.add("error", f"{evaluator}: a candidate that raises on import was scored as solved; the "
                            "evaluator must not trust what the candidate's process returns")
    else:
        report.add("ok", "a broken candidate is reported as the candidate's failure"
                         + (f" ({broken.failure})" if broken.failure else " (scored low)"))
    return report


def _objectives_line(problem: Problem) -> str:
    """'14 objectives', or for a pattern: '100 objectives matching test_* (test_0 .. test_99)'."""
    count = f"{len(problem.objectives)} objectives"
    if not problem.objective_pattern:
        return count
    names = problem.objectives
    shown = f" ({names[0]} .. {names[-1]})" if len(names) > 1 else f" ({names[0]})" if names else ""
    return f"{count} matching {problem.objective_pattern!r}{shown}"


def check_solution(name_or_path: str, programs_dir: Path, solution: Path) -> CheckReport:
    """Load the folder and score `solution` (a whole program) with its evaluator in the real sandbox; an error
    finding unless it meets the solved rule. The report's `initial` holds the solution's evaluation."""
    report = _loaded(name_or_path, programs_dir)
    if report.problem is None:
        return report
    problem = report.problem
    try:
        code = solution.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        report.add("error", f"{solution}: cannot be read ({exc.strerror if isinstance(exc, OSError) else exc})")
        return report
    evaluation = asyncio.run(evaluate_program(problem, code))
    report.initial = evaluation
    if not evaluation.ok:
        report.add("error", f"{solution}: its evaluation failed ({evaluation.failure}: {evaluation.detail})")
        return report
    scores = evaluation.scores
    names = problem.objective_names(scores)
    passed = sum(1 for name in names if scores[name] >= (problem.solved_all_at_least or 1.0))
    summary = (f"{solution}: scalar {problem.scalar(scores):.4g}, {passed} of {len(names)} objectives "
               f"pass, in {evaluation.wall_s:.2f} s")
    if problem.is_solved(scores):
        report.add("ok", f"{summary}: solved ({solved_rule(problem)})")
        return report
    feedback = " ".join(evaluation.artifacts.get("feedback", "").split())
    report.add("error", f"{summary}: not solved ({solved_rule(problem)})" + (f"; {feedback}" if feedback else ""))
    return report


async def _evaluations(problem: Problem) -> tuple[Evaluation, Evaluation, Evaluation]:
    broken_code = replace_block(problem.initial_code, _indent_like(problem.initial_code, _BROKEN_BODY))
    first = await evaluate_program(problem, problem.initial_code)
    second = await evaluate_program(problem, problem.initial_code)
    broken = await evaluate_program(problem, broken_code)
    return first, second, broken


def _indent_like(code: str, body: str) -> str:
    block = block_body(code)
    indent = next((line[: len(line) - len(line.lstrip())] for line in block.split("\n") if line.strip()), "")
    return "".join(indent + line for line in body.splitlines(keepends=True))


def new_problem(name: str, programs_dir: Path, template: str = "default") -> Path:
    """Write a working problem folder `programs_dir/name` from a scaffold template (TEMPLATES: "default", a driver
    looping over inputs; "io-tests", tests as data in tests.toml); it passes `evolve check`."""
    if template not in TEMPLATES:
        raise ProblemError(f"no problem template {template!r}; the templates are {', '.join(TEMPLATES)}")
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ProblemError(f"'{name}': a problem name is lower-case letters, digits and underscores, "
                           "starting with a letter")
    folder = programs_dir / name
    above = next((parent for parent in (programs_dir, *programs_dir.parents) if parent.exists()), None)
    if above is not None and not above.is_dir():
        raise ProblemError(f"{above}: not a folder, so {folder} cannot be made in it; give --programs-dir a folder "
                           "(made if it does not exist)")
    if folder.exists():
        raise ProblemError(f"{folder}: already exists; choose another name or remove it")
    source, filenames = TEMPLATES[template]
    texts = {filename: (source / f"{filename}.txt").read_text(encoding="utf-8").replace("{name}", name)
             for filename in filenames}
    try:
        folder.mkdir(parents=True)
    except OSError as exc:
        raise ProblemError(f"{folder}: cannot make the folder ({exc.strerror or exc})") from None
    try:
        for filename, text in texts.items():
            (folder / filename).write_text(text, encoding="utf-8")
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)  # ours, made just now: no half-written problem is left
        raise ProblemError(f"{folder}: cannot write its files ({exc.strerror or exc})") from None
    return folder
