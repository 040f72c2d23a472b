"""A problem folder's bad input is one line naming the file (and the key), never a traceback nor a run that crashes
later: problem.toml's weights, [solved] thresholds and [limits] must be finite and bounded; a candidate's finite but
huge scores are ranked (the scalar never overflows); initial.py and evaluator.py that are not UTF-8 text or hold a
null byte; `evolve problems` over a broken folder or no folder; `evolve new-problem` under a file."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from scripted_policy_server import ScriptedPolicyServer

import evolve
from evolve.cli.main import main
from evolve.problems.problem import Problem, ProblemError, load_problem
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
LARGEST = sys.float_info.max

HEAD = 'name = "toy"\ndescription = "Make f(2) large."\nprovenance = "a test fixture"\nobjectives = ["a", "b"]\n'
INITIAL = "# EVOLVE-BLOCK-START\ndef f(x):\n    return x\n# EVOLVE-BLOCK-END\n"
EVALUATOR = """\
from evolve.evaluator_api import fail_unless_ok


def evaluate(program_path, sandbox):
    value = fail_unless_ok(sandbox.call(program_path, "f", 2)).value
    return {"a": value / 4, "b": 1.0}
"""


def toy(programs: Path, toml: str = HEAD, initial: bytes | str = INITIAL, evaluator: bytes | str = EVALUATOR) -> Path:
    folder = programs / "toy"
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text(toml)
    for name, text in (("initial.py", initial), ("evaluator.py", evaluator)):
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


def load_error(programs: Path) -> str:
    with pytest.raises(ProblemError) as error:
        load_problem("toy", programs)
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ---------------------------------------------------------------- problem.toml: finite, bounded numbers


@pytest.mark.parametrize(("table", "key"), [
    ("[score]\nreduction = \"weighted\"\nweights = {a = nan, b = 1.0}\n", "score.weights.a': nan (Input should be a "
                                                                          "finite number)"),
    ("[score]\nreduction = \"weighted\"\nweights = {a = 1.0, b = inf}\n", "score.weights.b': inf"),
    ("[solved]\nall_at_least = nan\n", "solved.all_at_least': nan (Input should be a finite number)"),
    ("[solved]\nscalar_at_least = -inf\n", "solved.scalar_at_least': -inf"),
    ("[limits]\nwall_time_s = inf\n", "limits.wall_time_s': inf (Input should be a finite number)"),
    ("[limits]\nwall_time_s = 86401\n", "limits.wall_time_s': 86401 (Input should be less than or equal to 86400"),
    ("[limits]\ncpu_time_s = inf\n", "limits.cpu_time_s': inf"),
    ("[limits]\ncpu_time_s = nan\n", "limits.cpu_time_s': nan"),
    ("[limits]\ntime_scale = 1e308\n", "limits.time_scale': 1e+308 (Input should be less than or equal to 1000"),
    ("[limits]\ntime_scale = nan\n", "limits.time_scale': nan"),
    ("[limits]\nmemory_mb = 99999999999999\n", "limits.memory_mb': 99999999999999 (Input should be less than or "
                                               "equal to 1048576"),
    ("[limits]\nmax_processes = 100000000000000000000\n", "limits.max_processes'"),
    ("[limits]\nmax_written_mb = 100000000000000000000\n", "limits.max_written_mb'"),
])
def test_a_non_finite_or_unbounded_number_is_one_line_naming_the_file_and_key(tmp_path: Path, table: str,
                                                                               key: str) -> None:
    folder = toy(tmp_path / "programs", HEAD + table)
    message = load_error(tmp_path / "programs")
    assert message.startswith(f"{folder / 'problem.toml'}: invalid value for '") and key in message, message


def test_limits_at_their_bounds_load(tmp_path: Path) -> None:
    toy(tmp_path / "programs", HEAD + "[limits]\nwall_time_s = 86400\ncpu_time_s = 86400\nmemory_mb = 1048576\n"
                                      "time_scale = 1000\n")
    limits = load_problem("toy", tmp_path / "programs").limits
    assert (limits.wall_time_s, limits.cpu_time_s, limits.memory_mb, limits.time_scale) == (86400, 86400, 1048576,
                                                                                            1000)


def test_evolve_check_refuses_a_nan_weight_in_one_line_before_scoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    toy(tmp_path / "programs", HEAD + "[score]\nreduction = \"weighted\"\nweights = {a = nan, b = 1.0}\n")
    assert main(["check", "toy", "--programs-dir", str(tmp_path / "programs")]) == 1
    out = capsys.readouterr().out
    assert "error: " in out and "score.weights.a': nan" in out and "initial vector" not in out, out
    assert "toy: FAILS the check" in out


# ---------------------------------------------------------------- the scalar of huge scores


def problem(reduction: str = "mean", weights: dict[str, float] | None = None) -> Problem:
    return Problem(name="t", path=Path("t"), description="d", initial_code="", objectives=("a", "b"),
                   reduction=reduction, weights=weights or {})  # type: ignore[arg-type]


@pytest.mark.parametrize(("reduction", "weights", "scores", "expected"), [
    ("mean", None, (1e308, 1e308), 1e308),  # fsum: intermediate overflow
    ("mean", None, (LARGEST, LARGEST), LARGEST),
    ("mean", None, (-LARGEST, -LARGEST), -LARGEST),
    ("mean", None, (1e308, -1e308), 0.0),
    ("weighted", {"a": 2.0, "b": 2.0}, (1.5e308, -1.5e308), 0.0),  # 2 x 1.5e308 = inf, then inf - inf
    ("weighted", {"a": 2.0, "b": 3.0}, (1e308, 1e308), 1e308),
    ("weighted", {"a": 1.0, "b": 3.0}, (1.2e308, -1.6e308), -0.9e308),
    ("weighted", {"a": 1e308, "b": 1e308}, (1.0, 2.0), 1.5),  # weights whose total overflows
    ("weighted", {"a": 1e308, "b": 1e308}, (LARGEST, LARGEST), LARGEST),
])
def test_huge_finite_scores_give_a_finite_deterministic_scalar_not_an_error(
        reduction: str, weights: dict[str, float] | None, scores: tuple[float, float], expected: float) -> None:
    judge = problem(reduction, weights)
    vector = dict(zip(("a", "b"), scores, strict=True))
    scalar = judge.scalar(vector)
    assert math.isfinite(scalar) and scalar == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert judge.scalar(vector) == scalar  # the same every time
    assert judge.is_solved(vector) is False  # no [solved] rule: never, and no error either


def test_ordinary_scores_keep_their_exact_scalar() -> None:
    assert problem().scalar({"a": 0.1, "b": 0.2}) == math.fsum([0.1, 0.2]) / 2
    weighted = problem("weighted", {"a": 1.0, "b": 3.0})
    assert weighted.scalar({"a": 0.1, "b": 0.7}) == math.fsum([0.1, 3.0 * 0.7]) / 4.0


HUGE_EVALUATOR = """\
import re


def evaluate(program_path):
    number = int(re.search(r"^x = (\\d+)$", open(program_path).read(), re.MULTILINE).group(1))
    return {"a": 1.5e308, "b": 1.5e308 if number % 2 == 0 else -1.5e308}
"""


def test_a_run_whose_candidates_score_past_the_largest_sum_stores_them_and_finishes(tmp_path: Path) -> None:
    folder = tmp_path / "programs" / "huge"
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text(
        'name = "huge"\ndescription = "Set x."\nprovenance = "a test fixture"\nobjectives = ["a", "b"]\n'
        '[score]\nreduction = "weighted"\nweights = {a = 2.0, b = 2.0}\n'
        '[map_elites]\nfeatures = ["code_length"]\n')  # the grid bins the scalar apart (search/map_elites.py)
    (folder / "initial.py").write_text("# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n")
    (folder / "evaluator.py").write_text(HUGE_EVALUATOR)
    db = tmp_path / "huge.db"
    with ScriptedPolicyServer("climber") as server:
        outcome = evolve.run(overrides={
            "run.problem": "huge", "run.programs_dir": str(tmp_path / "programs"), "run.iterations": 2,
            "run.db": str(db), "run.concurrency": 1, "run.eval_workers": 1, "policy.backend": "openai",
            "policy.url": server.url, "policy.model": "m", "policy.prefill": False, "policy.retries": 0})
    assert outcome.status == "finished"
    store = ProgramStore(str(db), mode="read")
    programs = store.programs(outcome.run_id)
    assert store.get_run(outcome.run_id).status == "finished" and len(programs) >= 2
    for program in programs:  # the seed (x = 1: a weighted inf - inf) and its children, every one ranked
        number = int(re.search(r"^x = (\d+)$", program.code, re.MULTILINE).group(1))  # type: ignore[union-attr]
        assert program.scalar == (1.5e308 if number % 2 == 0 else 0.0), (program.code, program.scalar)


# ---------------------------------------------------------------- initial.py and evaluator.py that are no text


@pytest.mark.parametrize("name", ["initial.py", "evaluator.py"])
def test_a_python_file_that_is_not_utf8_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    broken = {"initial": INITIAL, "evaluator": EVALUATOR}
    broken[name.removesuffix(".py")] = (INITIAL if name == "initial.py" else EVALUATOR).encode() + b"# caf\xe9\n"
    folder = toy(tmp_path / "programs", initial=broken["initial"], evaluator=broken["evaluator"])
    message = load_error(tmp_path / "programs")
    assert message.startswith(f"{folder / name}: not UTF-8 text (byte ") and "save it as UTF-8" in message, message


@pytest.mark.parametrize("name", ["initial.py", "evaluator.py"])
def test_a_null_byte_is_named_with_its_line_not_as_line_none(tmp_path: Path, name: str) -> None:
    text = (INITIAL if name == "initial.py" else EVALUATOR).replace("return", "return\0", 1)
    folder = toy(tmp_path / "programs", **{name.removesuffix(".py"): text})  # type: ignore[arg-type]
    line = 1 + text[:text.index("\0")].count("\n")
    message = load_error(tmp_path / "programs")
    assert message.startswith(f"{folder / name}: line {line}: holds a null byte") and "None" not in message, message


def test_evolve_check_of_a_non_utf8_initial_program_is_one_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    toy(tmp_path / "programs", initial=b"# EVOLVE-BLOCK-START\ndef f(x):\n    return x  # \xff\n# EVOLVE-BLOCK-END\n")
    assert main(["check", "toy", "--programs-dir", str(tmp_path / "programs")]) == 1
    out = capsys.readouterr().out
    assert "initial.py: not UTF-8 text" in out and "Traceback" not in out, out


# ---------------------------------------------------------------- evolve problems and evolve new-problem


def test_evolve_problems_lists_every_folder_and_marks_a_broken_one_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    monkeypatch.setenv("COLUMNS", "1000")
    programs = tmp_path / "programs"
    for name in ("fizzbuzz", "lis"):
        shutil.copytree(ROOT / "programs" / name, programs / name)
    toy(programs, initial=b"# EVOLVE-BLOCK-START\ndef f(x):\n    return x  # \xff\n# EVOLVE-BLOCK-END\n")
    assert main(["problems", "--programs-dir", str(programs)]) == 1
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    assert {"fizzbuzz", "lis", "toy"} <= set(rows), out
    assert "broken" not in rows["fizzbuzz"] + rows["lis"] and "20" in rows["fizzbuzz"]
    assert "broken:" in rows["toy"] and "not UTF-8 text" in out and "Traceback" not in out, out
    assert out.splitlines()[-1].startswith(f"error: 1 problem folder in {programs} does not load (toy): "), out


@pytest.mark.parametrize(("make", "said"), [(None, "no such folder"), ("file", "not a folder")])
def test_evolve_problems_of_a_folder_that_is_not_there_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], make: str | None,
        said: str) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    if make:
        Path("nonexist").write_text("")
    assert main(["problems", "--programs-dir", "nonexist"]) == 1
    out = capsys.readouterr().out
    assert out == f"error: nonexist: {said}; --programs-dir names the folder that holds the problem folders\n", out


@pytest.mark.parametrize("programs_dir", ["afile", "afile/below"])
def test_evolve_new_problem_under_a_file_is_one_line_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], programs_dir: str) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("kept\n")
    assert main(["new-problem", "abc", "--programs-dir", programs_dir]) == 1
    out = capsys.readouterr().out
    assert out.startswith("error: afile: not a folder, so ") and out.count("\n") == 1, out
    assert Path("afile").read_text() == "kept\n" and sorted(path.name for path in tmp_path.iterdir()) == ["afile"]


def test_evolve_new_problem_still_makes_its_folder_and_the_folders_above_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["new-problem", "abc", "--programs-dir", "new/programs"]) == 0
    assert load_problem("abc", Path("new/programs")).name == "abc"
