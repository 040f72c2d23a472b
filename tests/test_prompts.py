"""prompts.py: short prompts that show only the EVOLVE block, with a prefill, stops and a budget fit to the block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evolve.problems.check import new_problem
from evolve.problems.problem import ProblemError, ProblemPrompt, load_problem
from evolve.records import MutationRequest, Program
from evolve.search.edits import apply_diff, apply_rewrite, split_answers
from evolve.search.prompts import PromptOptions, build_prompt, context_code, prefill_for, without_docstrings

ROOT = Path(__file__).resolve().parents[1]

PARENT_CODE = '''"""Symbolic regression: this module docstring is not part of the block."""

import math

SECRET_CONSTANT = 12345


# EVOLVE-BLOCK-START
def f(x: float) -> float:
    """Approximate the hidden target function on [-3, 3]."""
    return x
# EVOLVE-BLOCK-END


def evaluate_locally() -> float:
    return sum(f(x) for x in range(3))
'''

BETTER_CODE = PARENT_CODE.replace("    return x\n", "    return x * x * x + x\n")
LONG_BLOCK = "# EVOLVE-BLOCK-START\ndef f(x):\n" + "".join(f"    y{i} = x * {i}\n" for i in range(150)) + \
    "    return x\n# EVOLVE-BLOCK-END\n"


def program(code: str, scalar: float, scores: dict[str, float] | None = None, **artifacts: str) -> Program:
    return Program(id=1, run_id=1, code=code, parent_id=None, island=0, iteration=0, policy="", edit="",
                   scores=scores or {"a": scalar}, scalar=scalar, solved=False, artifacts=dict(artifacts))


def request(parent: Program, *inspirations: Program) -> MutationRequest:
    return MutationRequest(iteration=3, island=0, parent=parent, inspirations=inspirations,
                           problem_description="Write f(x) so that it matches a hidden function on [-3, 3].",
                           objective_names=tuple(parent.scores))


def user_text(prompt_messages: list[dict[str, str]]) -> str:
    return prompt_messages[-1]["content"]


def test_rewrite_prompt_shows_the_block_and_not_the_rest_of_the_file() -> None:
    scores = {f"region_{i}": 0.1 * i for i in range(6)}
    prompt = build_prompt(request(program(PARENT_CODE, 0.25, scores)))
    text = user_text(prompt.messages)
    assert "def f(x: float) -> float:\n    return x\n" in text
    for outside in ("module docstring", "SECRET_CONSTANT", "evaluate_locally", "EVOLVE-BLOCK"):
        assert outside not in text
    assert "Write f(x) so that it matches" in text
    assert "score 0.25; weakest: region_0 0, region_1 0.1, region_2 0.2" in text and "region_5" not in text
    assert "Already imported: import math" in text
    assert prompt.messages[0]["role"] == "system" and prompt.messages[-1]["role"] == "user"


def test_rewrite_prompt_stays_short() -> None:
    prompt = build_prompt(request(program(PARENT_CODE, 0.25), program(BETTER_CODE, 0.5)))
    assert sum(len(message["content"]) for message in prompt.messages) < 2000


def test_prefill_is_the_blocks_first_line_without_a_newline() -> None:
    prompt = build_prompt(request(program(PARENT_CODE, 0.25)))
    assert prompt.prefill == "def f(x: float) -> float:" == prefill_for(PARENT_CODE)
    assert prefill_for(PARENT_CODE, answers=3) == "<response_1>\ndef f(x: float) -> float:"
    assert prefill_for(PARENT_CODE, "diff") == "<<<<<<< SEARCH\n"


def test_stops_end_the_answer_at_a_fence_or_a_new_top_level_line() -> None:
    prompt = build_prompt(request(program(PARENT_CODE, 0.25)))
    for stop in ("```", "\n\n\n", "\nprint(", "\nif __name__", "\ndef", "\n#", "\nT"):
        assert any(stop.startswith(s) for s in prompt.stop), stop
    assert not any(s.startswith("\n ") for s in prompt.stop)  # the body's indented lines never stop it


def test_a_block_with_several_definitions_keeps_top_level_lines() -> None:
    code = "# EVOLVE-BLOCK-START\nimport math\n\ndef f(x):\n    return g(x)\n\ndef g(x):\n    return x\n# EVOLVE-BLOCK-END\n"
    prompt = build_prompt(request(program(code, 0.1)))
    assert prompt.prefill == "import math"
    assert "\nd" not in prompt.stop and "```" in prompt.stop


def test_token_budget_fits_the_block_and_respects_the_cap() -> None:
    small = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(max_new_tokens_cap=384))
    assert 64 <= small.max_new_tokens < 160
    large = build_prompt(request(program(LONG_BLOCK, 0.25)), PromptOptions(max_new_tokens_cap=384))
    assert large.max_new_tokens == 384
    capped = build_prompt(request(program(LONG_BLOCK, 0.25)), PromptOptions(max_new_tokens_cap=100))
    assert capped.max_new_tokens == 100


@pytest.mark.parametrize("code", [PARENT_CODE, LONG_BLOCK])
def test_the_token_cap_is_per_answer_so_m_answers_may_take_m_times_one_answers_tokens(code: str) -> None:
    for cap in (100, 384):
        one = build_prompt(request(program(code, 0.25)), PromptOptions(max_new_tokens_cap=cap))
        three = build_prompt(request(program(code, 0.25)), PromptOptions(answers=3, max_new_tokens_cap=cap))
        assert three.max_new_tokens == 3 * one.max_new_tokens and one.max_new_tokens <= cap


def test_a_higher_scoring_inspiration_is_shown_and_a_lower_one_is_not() -> None:
    better = build_prompt(request(program(PARENT_CODE, 0.25), program(BETTER_CODE, 0.5)))
    assert "return x * x * x + x" in user_text(better.messages)
    worse = build_prompt(request(program(PARENT_CODE, 0.25), program(BETTER_CODE, 0.1)))
    assert "return x * x * x + x" not in user_text(worse.messages)


def test_short_feedback_is_shown_and_long_feedback_is_not() -> None:
    short = build_prompt(request(program(PARENT_CODE, 0.25, feedback="f(2) raised ZeroDivisionError")))
    assert "f(2) raised ZeroDivisionError" in user_text(short.messages)
    table = "; ".join(f"region_{i}: mean(f - target) = +{i}.25" for i in range(12))
    long = build_prompt(request(program(PARENT_CODE, 0.25, feedback=table)))
    assert "region_3: mean" not in user_text(long.messages)


def test_a_policy_with_feedback_off_shows_the_score_but_not_the_evaluators_message() -> None:
    from evolve.policy_config import LlamaCppPolicySection

    parent = program(PARENT_CODE, 0.25, feedback="f(2) raised ZeroDivisionError")
    off = PromptOptions.from_policy(LlamaCppPolicySection(feedback=False))
    shown, hidden = build_prompt(request(parent)), build_prompt(request(parent), off)
    assert "ZeroDivisionError" in user_text(shown.messages) and "ZeroDivisionError" not in user_text(hidden.messages)
    assert "score 0.25" in user_text(hidden.messages)  # the score stays
    assert PromptOptions.from_policy(LlamaCppPolicySection()).feedback  # on unless a policy says otherwise


def test_docstrings_are_hidden_from_the_rewrite_prompt_but_kept_for_diffs() -> None:
    parent = program(PARENT_CODE, 0.25)
    assert "Approximate the hidden" not in user_text(build_prompt(request(parent)).messages)
    shown = build_prompt(request(parent), PromptOptions(docstrings=True))
    assert "Approximate the hidden" in user_text(shown.messages)
    diff = build_prompt(request(parent), PromptOptions(edit_format="diff"))
    assert '    """Approximate the hidden target function on [-3, 3]."""\n    return x' in user_text(diff.messages)
    assert diff.prefill == "<<<<<<< SEARCH\n" and ">>>>>>> REPLACE" in user_text(diff.messages)
    assert len(diff.messages) == 2  # the worked example is a rewrite, so a diff prompt goes without it
    assert without_docstrings('def g():\n    """only a docstring"""') == 'def g():\n    """only a docstring"""'


def test_the_worked_example_comes_before_the_request_and_can_be_left_out() -> None:
    roles = [m["role"] for m in build_prompt(request(program(PARENT_CODE, 0.25))).messages]
    assert roles == ["system", "user", "assistant", "user"]
    plain = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(example=False))
    assert [m["role"] for m in plain.messages] == ["system", "user"]


def test_the_worked_example_of_an_m_answer_prompt_writes_m_different_answers_in_their_tags() -> None:
    prompt = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(answers=3))
    assert [m["role"] for m in prompt.messages] == ["system", "user", "assistant", "user"]
    assert "Write 3 different answers, in tags <response_1>" in prompt.messages[1]["content"]
    answers = split_answers(prompt.messages[2]["content"], 3)
    assert len(set(answers)) == 3 and all(answer.startswith("def area(w: float, h: float)") for answer in answers)
    assert prompt.messages[2]["content"].endswith("</response_3>")
    diff = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(answers=3, edit_format="diff"))
    assert len(diff.messages) == 2  # the example is a rewrite: a diff prompt goes without it, m tags or not


def test_several_answers_are_asked_for_in_numbered_tags() -> None:
    prompt = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(answers=3))
    assert "<response_1>" in user_text(prompt.messages) and "</response_3>" in user_text(prompt.messages)
    assert prompt.prefill.startswith("<response_1>\ndef f(")
    assert "</response_3>" in prompt.stop
    single = build_prompt(request(program(PARENT_CODE, 0.25)))
    assert prompt.max_new_tokens > single.max_new_tokens


def test_prefill_plus_a_typical_completion_becomes_a_child() -> None:
    prompt = build_prompt(request(program(PARENT_CODE, 0.25)))
    child = apply_rewrite(PARENT_CODE, prompt.prefill + "\n    return x * x + 1\n")
    assert "    return x * x + 1\n# EVOLVE-BLOCK-END" in child
    several = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(answers=2))
    text = several.prefill + "\n    return x + 1\n</response_1>\n<response_2>\ndef f(x: float) -> float:\n    return 2 * x"
    answers = split_answers(text, 2)
    assert [apply_rewrite(PARENT_CODE, answer).count("return") for answer in answers] == [2, 2]
    diff = build_prompt(request(program(PARENT_CODE, 0.25)), PromptOptions(edit_format="diff"))
    child = apply_diff(PARENT_CODE, diff.prefill + "    return x\n=======\n    return x * 2\n>>>>>>> REPLACE\n")
    assert "    return x * 2\n# EVOLVE-BLOCK-END" in child


@pytest.mark.parametrize("name", ["symbolic_regression", "bin_packing", "run_length"])
def test_prompts_for_the_shipped_problems_show_their_function(name: str) -> None:
    path = ROOT / "programs" / name / "initial.py"
    if not path.is_file():
        pytest.skip(f"{name} is not in programs/")
    code = path.read_text()
    prompt = build_prompt(request(program(code, 0.5)))
    assert prompt.prefill.startswith("def ") and prompt.prefill in user_text(prompt.messages)
    assert len(user_text(prompt.messages)) < 1500


HELPERS_CODE = '''"""A module docstring that no prompt shows."""

import math

SCALE = 3.0
UNRELATED = 99


def helper(x: float) -> float:
    """Scaled, by SCALE."""
    return x * SCALE


def cousin(x: float) -> float:
    return x


# EVOLVE-BLOCK-START
def f(x: float) -> float:
    """Use helper() on x,
    keeping these line breaks."""
    return x
# EVOLVE-BLOCK-END


if __name__ == "__main__":
    print(f(1.0))
'''

LONG_DESCRIPTION = "Write f(x).\n  Line two, indented.\n" + "More words to make it long. " * 40


def described(code: str, description: str = LONG_DESCRIPTION) -> MutationRequest:
    parent = program(code, 0.25)
    return MutationRequest(iteration=3, island=0, parent=parent, inspirations=(), problem_description=description,
                           objective_names=tuple(parent.scores))


def test_default_prompt_settings_flatten_and_cut_the_description_and_hide_docstrings_and_context() -> None:
    text = user_text(build_prompt(described(HELPERS_CODE)).messages)
    assert "Write f(x). Line two, indented. More words" in text and text.count("More words") < 40
    assert " ...\n" in text and "keeping these line breaks" not in text
    assert "def helper" not in text and "SCALE" not in text and "Already imported: import math" in text
    assert build_prompt(described(HELPERS_CODE)) == build_prompt(described(HELPERS_CODE), problem=ProblemPrompt())


def test_description_as_written_keeps_line_breaks_and_zero_chars_never_cuts() -> None:
    shown = ProblemPrompt(description="as_written", description_chars=0, docstrings=True)
    text = user_text(build_prompt(described(HELPERS_CODE), problem=shown).messages)
    assert "Task: " + LONG_DESCRIPTION in text
    assert '    """Use helper() on x,\n    keeping these line breaks."""\n    return x' in text
    cut = user_text(build_prompt(described(HELPERS_CODE), problem=ProblemPrompt(description_chars=100)).messages)
    assert "Line two, indented. More" in cut and len(cut.split("Task: ")[1].split("\n")[0]) <= 104


def test_context_used_shows_the_helpers_the_block_mentions_and_what_they_use() -> None:
    assert context_code(HELPERS_CODE, "used") == 'SCALE = 3.0\n\n\ndef helper(x: float) -> float:\n' \
        '    """Scaled, by SCALE."""\n    return x * SCALE'.replace("\n\n\n", "\n\n")
    everything = context_code(HELPERS_CODE, "all")
    assert "UNRELATED = 99" in everything and "def cousin" in everything
    for never in ("module docstring", "import math", "__main__", "def f("):
        assert never not in everything
    assert context_code(HELPERS_CODE, "none") == ""
    text = user_text(build_prompt(described(HELPERS_CODE), problem=ProblemPrompt(context="used")).messages)
    assert "```python\nSCALE = 3.0\n\ndef helper(x: float) -> float:" in text and "def cousin" not in text
    assert text.index("def helper") < text.index("Current code")


@pytest.mark.parametrize("table, fragment", [
    ("[prompt]\ndocstring = true\n", "unknown key 'prompt.docstring'"),
    ("[prompt]\ndescription = 'verbatim'\n", "invalid value for 'prompt.description'"),
    ("[prompt]\ndescription_chars = -1\n", "invalid value for 'prompt.description_chars'"),
    ("[prompt]\ncontext = true\n", "invalid value for 'prompt.context'"),
])
def test_a_mistake_in_the_prompt_table_is_one_line(tmp_path: Path, table: str, fragment: str) -> None:
    folder = new_problem("toy", tmp_path)
    (folder / "problem.toml").write_text((folder / "problem.toml").read_text() + "\n" + table)
    with pytest.raises(ProblemError, match=re.escape(fragment)) as caught:
        load_problem("toy", tmp_path)
    assert "\n" not in str(caught.value) and "problem.toml" in str(caught.value)


def test_the_prompt_table_reaches_the_problem(tmp_path: Path) -> None:
    folder = new_problem("toy", tmp_path)
    toml = (folder / "problem.toml").read_text()
    flat = load_problem("toy", tmp_path)
    assert flat.prompt == ProblemPrompt() and "\n" not in flat.description
    (folder / "problem.toml").write_text(toml + "\n[prompt]\ndocstrings = true\ndescription = 'as_written'\n"
                                         "description_chars = 0\ncontext = 'used'\n")
    problem = load_problem("toy", tmp_path)
    assert problem.prompt == ProblemPrompt(True, "as_written", 0, "used")
    assert "\n" in problem.description and " ".join(problem.description.split()) == flat.description


def test_a_benchmarks_specification_stays_in_the_prompt_whatever_a_child_did_to_its_docstring(tmp_path) -> None:
    """A stub-seed benchmark (here a generated problem) keeps its specification in the seed's docstring; a child
    that rewrote or dropped it is shown with the seed's, in a rewrite prompt (a diff's SEARCH must match the parent
    as it is, so a diff prompt shows the parent unchanged); a problem that is no stub seed gets nothing."""
    from evolve.problems.generated.folders import import_generated
    from evolve.problems.problem import load_problem
    from evolve.program_format import block_docstring

    import_generated(1, 1, 0, tmp_path)
    problem = load_problem("gl_d1_0001", tmp_path)
    spec = problem.prompt.specification
    assert spec.startswith('"""Take the list of integers') and ">>> " in spec and spec.endswith('"""')
    assert spec == block_docstring(problem.initial_code)
    name = problem.initial_code.split("def ", 1)[1].split("(", 1)[0]
    signature = next(line for line in problem.initial_code.splitlines() if line.startswith("def "))
    rewritten = f'# EVOLVE-BLOCK-START\n{signature}\n    """Something else."""\n    return 1\n# EVOLVE-BLOCK-END\n'
    dropped = f"# EVOLVE-BLOCK-START\n{signature}\n    return 2\n# EVOLVE-BLOCK-END\n"
    for code, body in ((rewritten, "return 1"), (dropped, "return 2")):
        parent = program(code, 0.25)
        shown = user_text(build_prompt(request(parent), problem=problem.prompt).messages)
        assert spec.split("\n")[0] in shown and "Something else" not in shown and body in shown
        diff = user_text(build_prompt(request(parent), PromptOptions(edit_format="diff"),
                                      problem=problem.prompt).messages)
        assert spec.split("\n")[0] not in diff  # the parent as it is
    assert f"`{name}`" in shown
    assert load_problem("fizzbuzz", ROOT / "programs").prompt.specification == ""


def test_the_docstring_prefill_opens_the_answer_with_the_specification_so_the_model_writes_the_body(tmp_path) -> None:
    """With `prefill_docstring`, a stub-seed benchmark's answer starts with the signature and the seed's docstring
    (whatever the parent did to its own), so the child keeps the specification as written; off by default, and a
    problem without a specification, a diff or a block that is no documented function keeps the one-line prefill."""
    from evolve.problems.generated.folders import import_generated
    from evolve.search.prompts import docstring_prefill

    import_generated(1, 1, 0, tmp_path)
    problem = load_problem("gl_d1_0001", tmp_path)
    spec = problem.prompt.specification
    signature = next(line for line in problem.initial_code.splitlines() if line.startswith("def "))
    dropped = program(f"# EVOLVE-BLOCK-START\n{signature}\n    return 2\n# EVOLVE-BLOCK-END\n", 0.25)
    on = PromptOptions(prefill_docstring=True)
    prompt = build_prompt(request(dropped), on, problem=problem.prompt)
    assert prompt.prefill == signature + "\n" + "\n".join("    " + line if line else line
                                                          for line in spec.split("\n"))
    assert prompt.prefill.endswith('"""') and prompt.prefill in user_text(prompt.messages)
    child = apply_rewrite(dropped.code, prompt.prefill + "\n    return len(numbers)\n")
    assert spec.split("\n")[0] in child and "return len(numbers)" in child and "return 2" not in child
    several = build_prompt(request(dropped), PromptOptions(prefill_docstring=True, answers=3), problem=problem.prompt)
    assert several.prefill == "<response_1>\n" + prompt.prefill
    assert build_prompt(request(dropped), problem=problem.prompt).prefill == signature  # off by default
    assert build_prompt(request(dropped), PromptOptions(prefill_docstring=True, edit_format="diff"),
                        problem=problem.prompt).prefill == "<<<<<<< SEARCH\n"
    assert build_prompt(request(program(PARENT_CODE, 0.5)), on).prefill == "def f(x: float) -> float:"
    assert docstring_prefill("import math\ndef f(x):\n    '''Doc.'''\n    return x") == ""
    assert docstring_prefill("@cache\ndef f(x):\n    '''Doc.'''\n    return x") == ""
    assert docstring_prefill("def f(x): return x") == ""
    assert docstring_prefill("def f(\n    x,\n):\n    '''Doc\n    more.'''\n    return x") == \
        "def f(\n    x,\n):\n    '''Doc\n    more.'''"
