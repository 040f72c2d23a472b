"""Problem authoring: objectives by count or pattern, the io-tests scaffold, the ''' hint for a broken
problem.toml, and the problem's [prompt] table (defaults byte-identical to the prompts rendered before it existed)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

import evolve
from evolve.cli.main import main
from evolve.errors import UserError
from evolve.problems.check import check_problem, check_solution, new_problem
from evolve.problems.evaluation import evaluate_program, resolve_objectives
from evolve.problems.problem import ProblemError, ProblemPrompt, load_problem
from evolve.records import MutationRequest, Program
from evolve.search.prompts import PromptOptions, build_prompt
from evolve.toml_files import read_toml
from tests.scripted_policy_server import ScriptedPolicyServer

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden_prompts"
GCD = "import math\n    return math.gcd(a, b)"


def with_objectives(folder: Path, declaration: str, extra: str = "") -> Path:
    """The scaffold's problem.toml with its objectives list replaced by `declaration` (and `extra` appended)."""
    toml = folder / "problem.toml"
    text = re.sub(r"^objectives = \[.*?\]\n", f"objectives = {declaration}\n", toml.read_text(), flags=re.S | re.M)
    toml.write_text(text + extra)
    return folder


def stairs(tmp_path: Path, declaration: str, extra: str = "") -> Path:
    return with_objectives(new_problem("stairs", tmp_path), declaration, extra)


# ---------------------------------------------------------------- objectives by count


def test_a_count_makes_the_names_and_the_scaffold_passes_the_check_with_them(tmp_path: Path) -> None:
    stairs(tmp_path, '{count = 14, name = "test_{i:02d}"}')
    problem = load_problem("stairs", tmp_path)
    assert problem.objectives == tuple(f"test_{i:02d}" for i in range(14))
    report = check_problem("stairs", tmp_path)
    assert report.ok, report.findings
    assert report.initial is not None and list(report.initial.scores) == list(problem.objectives)


def test_a_count_without_a_name_numbers_test_i(tmp_path: Path) -> None:
    stairs(tmp_path, "{count = 3}")
    assert load_problem("stairs", tmp_path).objectives == ("test_0", "test_1", "test_2")


@pytest.mark.parametrize(("declaration", "said"), [
    ("{count = 0}", "count"),
    ('{count = 3, name = "same"}', "must hold {i}"),
    ('{count = 3, name = "x{j}"}', "no other {...}"),
    ('{count = 3, nmae = "x{i}"}', "unknown key 'nmae'"),
    ('{count = 3, pattern = "t*"}', "{count = N"),
    ('{pattern = "test_0"}', "no wildcard"),
    ("[]", "at least one objective"),
    ('"test_0"', "a list of names"),
])
def test_a_bad_objectives_declaration_is_one_line_naming_the_key(tmp_path: Path, declaration: str,
                                                                   said: str) -> None:
    stairs(tmp_path, declaration)
    with pytest.raises(ProblemError) as caught:
        load_problem("stairs", tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "problem.toml" in message and "'objectives'" in message and said in message


# ---------------------------------------------------------------- objectives by pattern


def test_a_pattern_is_resolved_by_the_seed_evaluation_in_the_check(tmp_path: Path) -> None:
    stairs(tmp_path, '{pattern = "test_*"}')
    problem = load_problem("stairs", tmp_path)
    assert problem.objectives == () and not problem.objectives_known and problem.declared_objectives() == \
        "pattern test_*"
    report = check_problem("stairs", tmp_path)
    assert report.ok, report.findings
    assert report.problem is not None and report.problem.objectives == tuple(f"test_{i:02d}" for i in range(14))
    assert "14 objectives matching 'test_*' (test_00 .. test_13)" in report.findings[0].message


def test_an_unresolved_pattern_reduces_and_judges_the_matching_scores_in_natural_order(tmp_path: Path) -> None:
    stairs(tmp_path, '{pattern = "test_*"}')
    problem = load_problem("stairs", tmp_path)
    scores = {"test_10": 1.0, "test_2": 0.0, "test_1": 1.0}
    assert problem.objective_names(scores) == ("test_1", "test_2", "test_10")
    assert problem.scalar(scores) == pytest.approx(2 / 3)
    assert not problem.is_solved(scores) and problem.is_solved({**scores, "test_2": 1.0})
    resolved = problem.resolved(scores)
    assert resolved.objectives == ("test_1", "test_2", "test_10") and resolved.resolved(["x"]) is resolved
    with pytest.raises(ProblemError, match="does not match names evaluate\\(\\) returned \\(other_1\\)"):
        problem.resolved(["test_1", "other_1"])
    with pytest.raises(ProblemError, match="matched no name"):
        problem.resolved([])


def test_a_pattern_refuses_weights_and_features_it_cannot_name(tmp_path: Path) -> None:
    stairs(tmp_path, '{pattern = "test_*"}')
    toml = tmp_path / "stairs" / "problem.toml"
    original = toml.read_text()
    toml.write_text(original.replace('reduction = "mean"', 'reduction = "weighted"\nweights = { test_00 = 1.0 }'))
    with pytest.raises(ProblemError, match="needs named objectives"):
        load_problem("stairs", tmp_path)
    toml.write_text(original.replace('features = ["code_length", "scalar"]', 'features = ["scalar", "speed"]'))
    with pytest.raises(ProblemError, match="matching 'test_\\*'"):
        load_problem("stairs", tmp_path)
    toml.write_text(original.replace('features = ["code_length", "scalar"]', 'features = ["scalar", "test_03"]'))
    assert load_problem("stairs", tmp_path).features == ("scalar", "test_03")


def test_names_outside_the_pattern_are_the_evaluators_error(tmp_path: Path) -> None:
    stairs(tmp_path, '{pattern = "test_0*"}')  # the evaluator also returns test_10 .. test_13
    report = check_problem("stairs", tmp_path)
    assert not report.ok
    assert report.initial is not None and report.initial.failure == "evaluator_error"
    assert "match 'test_0*'" in report.initial.detail and "test_13" in report.initial.detail
    with pytest.raises(ProblemError, match="named by the seed program's evaluation"):
        asyncio.run(resolve_objectives(load_problem("stairs", tmp_path)))


COUNTING_EVALUATOR = '''
from evolve.evaluator_api import EvaluationResult, Sandbox, fail_unless_ok


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    count = fail_unless_ok(sandbox.call(program_path, "solve", 0)).value
    return EvaluationResult(scores={f"test_{i}": 1.0 for i in range(count)})
'''


def test_after_resolution_every_evaluation_must_return_the_seeds_names(tmp_path: Path) -> None:
    folder = stairs(tmp_path, '{pattern = "test_*"}')
    (folder / "evaluator.py").write_text(COUNTING_EVALUATOR)
    (folder / "initial.py").write_text("# EVOLVE-BLOCK-START\ndef solve(n):\n    return 3\n# EVOLVE-BLOCK-END\n")
    problem = asyncio.run(resolve_objectives(load_problem("stairs", tmp_path)))
    assert problem.objectives == ("test_0", "test_1", "test_2")
    same = asyncio.run(evaluate_program(problem, problem.initial_code))
    assert same.ok and list(same.scores) == ["test_0", "test_1", "test_2"]
    other = asyncio.run(evaluate_program(problem, problem.initial_code.replace("return 3", "return 4")))
    assert other.failure == "evaluator_error" and "other objectives than the seed program's" in other.detail
    assert "test_3" in other.detail


# ---------------------------------------------------------------- the io-tests scaffold


def test_the_io_tests_scaffold_passes_the_check_out_of_the_box(tmp_path: Path) -> None:
    folder = new_problem("gcd", tmp_path, "io-tests")
    assert sorted(path.name for path in folder.iterdir()) == ["evaluator.py", "initial.py", "problem.toml",
                                                              "tests.toml"]
    report = check_problem("gcd", tmp_path)
    assert report.ok, report.findings
    assert not any(finding.severity == "warning" for finding in report.findings), report.findings
    tests = read_toml(folder / "tests.toml", UserError)["tests"]
    assert report.problem is not None and len(report.problem.objectives) == len(tests)
    assert report.initial is not None and 0 < report.problem.scalar(report.initial.scores) < 1
    assert "expected 6" in report.initial.artifacts["feedback"]


def test_an_io_tests_solution_is_solved_and_tests_json_works_as_well(tmp_path: Path) -> None:
    folder = new_problem("gcd", tmp_path, "io-tests")
    solution = tmp_path / "solution.py"
    solution.write_text((folder / "initial.py").read_text().replace("return min(a, b)", GCD))
    assert check_solution("gcd", tmp_path, solution).ok
    (folder / "tests.toml").unlink()
    (folder / "tests.json").write_text(json.dumps({"tests": [{"input": [4, 6], "expected": 2},
                                                            {"input": [5, 5], "expected": 5.0}]}))
    report = check_solution("gcd", tmp_path, solution)
    assert report.initial is not None and report.initial.scores == {"test_0": 1.0, "test_1": 0.0}  # 5 is not 5.0


def test_new_problem_refuses_an_unknown_template(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="templates are default, io-tests"):
        new_problem("x", tmp_path, "nope")


def test_the_cli_writes_the_io_tests_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-problem", "gcd", "--template", "io-tests", "--programs-dir", str(tmp_path)]) == 0
    assert "tests.toml" in capsys.readouterr().out and (tmp_path / "gcd" / "tests.toml").is_file()


@pytest.fixture
def gcd_server() -> Iterator[str]:
    """A real OpenAI-compatible endpoint on loopback whose every chat answer is a correct gcd."""
    with ScriptedPolicyServer(lambda number, body: f"def solve(a: int, b: int) -> int:\n    {GCD}\n",
                              tokens=(50, 20)) as server:
        yield server.url


def test_a_run_on_a_pattern_problem_stores_the_resolved_vector_and_solves_it(tmp_path: Path, gcd_server: str) -> None:
    new_problem("gcd", tmp_path / "programs", "io-tests")
    db = tmp_path / "runs.db"
    overrides = {"run.problem": "gcd", "run.programs_dir": str(tmp_path / "programs"), "run.iterations": 1,
                 "run.seed": 1, "run.db": str(db), "run.concurrency": 1, "run.eval_workers": 1,
                 "policy.backend": "openai", "policy.url": gcd_server, "policy.model": "m", "policy.name": "scripted",
                 "policy.prefill": False, "policy.retries": 0}
    outcome = evolve.run(overrides=overrides)
    assert outcome.status == "finished"
    best = evolve.ProgramStore(str(db), mode="read").best_programs(outcome.run_id, 1)[0]
    assert best.iteration == 1 and best.solved and best.scalar == 1.0
    assert list(best.scores) == [f"test_{i}" for i in range(12)]


# ---------------------------------------------------------------- the ''' hint


def test_a_description_holding_triple_quotes_gets_the_literal_string_hint(tmp_path: Path) -> None:
    folder = new_problem("doc", tmp_path)
    toml = folder / "problem.toml"
    original = toml.read_text()
    docstring = 'Complete this.\ndef solve(n):\n    """Return the count."""\n'
    toml.write_text(re.sub(r'^description = """.*?"""', lambda _: f'description = """{docstring}"""', original,
                           flags=re.S | re.M))
    with pytest.raises(ProblemError) as caught:
        load_problem("doc", tmp_path)
    message = str(caught.value)
    assert "not valid TOML" in message and "'''...'''" in message and "\n" not in message
    toml.write_text(re.sub(r'^description = """.*?"""', lambda _: f"description = '''{docstring}'''", original,
                           flags=re.S | re.M))
    assert '"""Return the count."""' in load_problem("doc", tmp_path).description


def test_other_toml_mistakes_get_no_triple_quote_hint(tmp_path: Path) -> None:
    broken = tmp_path / "problem.toml"
    broken.write_text('name = "x"\ndescription = """fine"""\nobjectives = [\n')
    with pytest.raises(ProblemError) as caught:
        read_toml(broken, ProblemError)
    assert "not valid TOML" in str(caught.value) and "'''" not in str(caught.value)


# ---------------------------------------------------------------- the [prompt] table


def parent_of(problem: evolve.Problem) -> Program:
    """The parent the golden prompts were rendered with (tests/golden_prompts, captured before [prompt] changes)."""
    scores = {name: round(0.1 * (i % 7), 2) for i, name in enumerate(problem.objectives)}
    return Program(id=1, run_id=1, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                   edit="", scores=scores, scalar=problem.scalar(scores), solved=False,
                   artifacts={"feedback": "test_01 failed"})


def request_for(problem: evolve.Problem, code: str | None = None) -> MutationRequest:
    parent = parent_of(problem)
    if code is not None:
        parent = Program(**{**asdict(parent), "code": code})
    return MutationRequest(iteration=3, island=0, parent=parent, inspirations=(),
                           problem_description=problem.description, objective_names=problem.objectives)


@pytest.mark.parametrize("name", ["lis", "symbolic_regression", "bin_packing"])
def test_default_prompts_are_byte_identical_to_the_ones_rendered_before(name: str) -> None:
    problem = load_problem(name, ROOT / "programs")
    assert problem.prompt == ProblemPrompt()  # the shipped problems have no [prompt] table
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    options = {"rewrite": PromptOptions(), "diff": PromptOptions(edit_format="diff", answers=2),
               "completions": PromptOptions(api="completions")}
    for label, option in options.items():
        prompt = build_prompt(request_for(problem), option, None, problem.prompt)
        rendered = {"messages": prompt.messages, "prefill": prompt.prefill, "stop": list(prompt.stop),
                    "max_new_tokens": prompt.max_new_tokens, "text": prompt.text}
        assert rendered == golden[label], (name, label)


HELPER_PROGRAM = '''"""A program with a helper outside the block."""
import math

SCALE = 3


def helper(x: float) -> float:
    return x * SCALE


def unrelated() -> int:
    return 7


# EVOLVE-BLOCK-START
def f(x: float) -> float:
    """Scale x with helper()."""
    return helper(x) + math.pi
# EVOLVE-BLOCK-END
'''


def prompt_table_problem(tmp_path: Path, table: str) -> evolve.Problem:
    folder = new_problem("shaped", tmp_path)
    toml = folder / "problem.toml"
    long_description = "First line of the task.\n    Indented second line. " + "word " * 200
    text = re.sub(r'^description = """.*?"""', f'description = """{long_description}"""', toml.read_text(),
                  flags=re.S | re.M)
    toml.write_text(text + "\n[prompt]\n" + table)
    return load_problem("shaped", tmp_path)


def user_turn(problem: evolve.Problem) -> str:
    prompt = build_prompt(request_for(problem, HELPER_PROGRAM), PromptOptions(example=False), None, problem.prompt)
    return prompt.messages[-1]["content"]


def test_prompt_defaults_flatten_cut_at_700_and_hide_docstrings_and_helpers(tmp_path: Path) -> None:
    text = user_turn(prompt_table_problem(tmp_path, ""))
    task = text.split("\n")[0]
    assert task.startswith("Task: First line of the task. Indented second line.") and task.endswith(" ...")
    assert len(task) <= len("Task: ") + 700 + 4
    assert "Scale x with helper()" not in text and "def helper" not in text


def test_prompt_table_shows_the_description_as_written_uncut_with_docstrings_and_used_helpers(tmp_path: Path) -> None:
    problem = prompt_table_problem(tmp_path, 'description = "as_written"\ndescription_chars = 0\n'
                                             'docstrings = true\ncontext = "used"\n')
    text = user_turn(problem)
    assert "First line of the task.\n    Indented second line." in text and "word word" in text
    assert not text.split("\n\n")[0].endswith("...")
    assert '"""Scale x with helper()."""' in text
    assert "def helper(x: float) -> float:" in text and "SCALE = 3" in text and "def unrelated" not in text
    every = user_turn(prompt_table_problem(tmp_path / "all", 'context = "all"\ndescription_chars = 40\n'))
    assert "def unrelated() -> int:" in every and "Task: First line of the task. Indented second ...\n" in every


def test_a_prompt_table_key_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="unknown key 'prompt.keep_docstring'"):
        prompt_table_problem(tmp_path, "keep_docstring = true\n")
    with pytest.raises(ProblemError, match="prompt.context"):
        prompt_table_problem(tmp_path / "b", 'context = "helpers"\n')


def test_check_prompt_prints_what_the_policy_sees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new_problem("gcd", tmp_path, "io-tests")
    assert main(["check", "gcd", "--programs-dir", str(tmp_path), "--prompt"]) == 0
    out = capsys.readouterr().out
    assert "--- system ---" in out and "--- user ---" in out and "Task: Write solve(a: int, b: int)" in out
    assert "def solve(a: int, b: int) -> int:\n    return min(a, b)" in out
    assert "--- assistant (prefilled; the policy continues it) ---\ndef solve(a: int, b: int) -> int:" in out
    assert "The greatest common divisor of a and b." not in out  # docstrings hidden by default


# ---------------------------------------------------------------- the experiment report on a pattern problem


def test_the_report_judges_a_pattern_problem_by_its_current_rule_in_natural_order(tmp_path: Path) -> None:
    from evolve.engine.experiment_spec import ExperimentSpec
    from evolve.report.results import collect
    from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

    new_problem("gcd", tmp_path / "programs", "io-tests")
    spec = ExperimentSpec.model_validate({
        "name": "pattern", "db": str(tmp_path / "report.db"), "problems": ["gcd"], "seeds": [0, 1], "iterations": 1,
        "run": {"programs_dir": str(tmp_path / "programs")}, "policies": [{"name": "A"}]})
    store = ProgramStore(spec.db)
    store.save_experiment(spec.name, spec.model_dump_json())
    for seed, passed in ((0, 12), (1, 11)):
        config = spec.cell_config("gcd", "A", seed)
        run_id = store.create_run(name=config.run.name, problem="gcd", policy="A", seed=seed,
                                  config_json=config.model_dump_json(), iterations_target=1, experiment=spec.name)
        vectors = [{f"test_{i}": float(i < tests) for i in range(12)} for tests in (4, passed)]
        # the stored flags say neither is solved; the problem's rule (every test passes) says seed 0 is
        records = [ChildRecord(code=f"x = {tests}\n", parent_id=None, island=0, policy="A" if n else "", edit="",
                               scores=vector, scalar=tests / 12, solved=False)
                   for n, (tests, vector) in enumerate(zip((4, passed), vectors, strict=True))]
        (seed_program,) = store.record_iteration(run_id, 0, [records[0]], run_elapsed_s=0.1)
        call = AttemptRecord("policy_call", "stop", prompt="p", completion="c", latency_s=0.1, prompt_tokens=1,
                             completion_tokens=1)
        child = ChildRecord(**{**asdict(records[1]), "parent_id": seed_program.id})
        store.record_iteration(run_id, 1, [call, child], policy="A", run_elapsed_s=0.2)
        store.set_run_status(run_id, "finished")
    results = collect(store, spec)
    assert results.row("gcd", "A").cracked == 1 and {cell.rule for cell in results.cells} == {"current"}
    reach = [o.objective for o in results.objectives if o.problem == "gcd"]
    assert reach == [f"test_{i}" for i in range(12)]  # natural order: test_2 before test_10
    last = next(o for o in results.objectives if o.objective == "test_11")
    assert (last.threshold, last.seeds, last.reached) == (1.0, 2, 1)


def test_the_verl_reward_resolves_a_pattern_problem_inside_an_event_loop(tmp_path: Path) -> None:
    from evolve.rl.verl_reward import compute_score_async, decode_vectors

    new_problem("gcd", tmp_path, "io-tests")
    text = "<response_1>\ndef solve(a: int, b: int) -> int:\n    return a + b\n</response_1>\n" \
           f"<response_2>\ndef solve(a: int, b: int) -> int:\n    {GCD}\n</response_2>\n"
    result = asyncio.run(compute_score_async("evolve", text, "gcd", {"answers": 2}, programs_dir=str(tmp_path)))
    matrix = decode_vectors(result["reward_vectors"])
    assert matrix.shape == (2, 12) and matrix[1].tolist() == [1.0] * 12 and 0 < matrix[0].sum() < 12
    assert result["score"] == 1.0
