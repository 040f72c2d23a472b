"""edits.py: EVOLVE blocks, salvaging what a small model writes, SEARCH/REPLACE diffs, m answers."""

from __future__ import annotations

import ast
import random
import string

import pytest

from evolve.search.edits import (
    EditError,
    apply_diff,
    apply_rewrite,
    block_body,
    find_blocks,
    replace_block,
    salvage_code,
    split_answers,
)

PARENT = '''"""Symbolic regression."""

import math


# EVOLVE-BLOCK-START
def f(x: float) -> float:
    """Approximate the hidden function at x."""
    return x
# EVOLVE-BLOCK-END


def helper() -> int:
    return 1
'''

BIN_PACKING = '''import numpy as np

# EVOLVE-BLOCK-START
def priority(item: float, bins: list[float]) -> list[float]:
    """Score each bin's remaining capacity for placing the item; the highest score wins."""
    return [-(b - item) for b in bins]
# EVOLVE-BLOCK-END
'''

INDENTED = '''class Solver:
    # EVOLVE-BLOCK-START
    def step(self, x):
        return x
    # EVOLVE-BLOCK-END

    def other(self):
        return 0
'''

TWO_FUNCTIONS = '''# EVOLVE-BLOCK-START
def f(x):
    return g(x)

def g(x):
    return x
# EVOLVE-BLOCK-END
'''

PREFILL = "def f(x: float) -> float:"


def child_block(code: str) -> str:
    return block_body(code)


def test_find_blocks_gives_the_body_lines_between_markers_even_when_indented() -> None:
    assert find_blocks(PARENT) == [(6, 9)]
    assert find_blocks(INDENTED) == [(2, 4)]
    assert block_body(INDENTED) == "    def step(self, x):\n        return x"
    assert find_blocks("x = 1\n") == []


def test_replace_block_keeps_everything_outside_the_block() -> None:
    child = replace_block(PARENT, "def f(x):\n    return 2 * x")
    assert child.startswith('"""Symbolic regression."""\n\nimport math\n')
    assert child.endswith("# EVOLVE-BLOCK-END\n\n\ndef helper() -> int:\n    return 1\n")
    assert block_body(child) == "def f(x):\n    return 2 * x"


def test_block_functions_raise_edit_error_without_a_block() -> None:
    with pytest.raises(EditError):
        block_body("x = 1")
    with pytest.raises(EditError):
        replace_block(PARENT, "x = 1", index=3)


def test_rewrite_of_a_prefilled_body_followed_by_a_fence_and_explanation() -> None:
    answer = "\n    return x * x + 1\n```\n\nThis version adds a square term, which fits better.\n"
    child = apply_rewrite(PARENT, answer, prefill=PREFILL)
    assert child_block(child) == "def f(x: float) -> float:\n    return x * x + 1"
    assert "def helper() -> int:" in child
    ast.parse(child)


def test_rewrite_takes_the_code_out_of_fences_after_leading_prose() -> None:
    answer = ("Sure! Here is an improved version:\n\n```python\ndef f(x: float) -> float:\n    return x ** 3\n```\n"
              "Example:\n```python\nprint(f(2))\n```\n")
    assert child_block(apply_rewrite(PARENT, answer)) == "def f(x: float) -> float:\n    return x ** 3"


def test_rewrite_drops_a_trailing_print_call_and_test_code() -> None:
    answer = ("\n    return x ** 2 + x\n\nprint(f(3))\nresult = f(2)\nOutput: 12\n"
              "if __name__ == '__main__':\n    print(f(1))\n")
    assert child_block(apply_rewrite(PARENT, answer, prefill=PREFILL)) == PREFILL + "\n    return x ** 2 + x"


def test_rewrite_keeps_new_imports_helpers_and_constants() -> None:
    answer = "import math\n\nSCALE = 2.0\n\n\ndef f(x: float) -> float:\n    return SCALE * math.sin(x) + h(x)\n\n\n" \
             "def h(x):\n    return x\n"
    body = child_block(apply_rewrite(PARENT, answer))
    assert body.startswith("import math\n\nSCALE = 2.0")
    assert "def h(x):" in body


def test_rewrite_cuts_a_completion_truncated_mid_statement() -> None:
    answer = "\n    y = x * x\n    return y + x\n\ndef unfinished(a, b):\n    return (a +"
    assert child_block(apply_rewrite(PARENT, answer, prefill=PREFILL)) == PREFILL + "\n    y = x * x\n    return y + x"


def test_rewrite_without_the_required_function_is_rejected() -> None:
    with pytest.raises(EditError, match="dropped required function 'f'"):
        apply_rewrite(PARENT, "def g(x: float) -> float:\n    return x * 2\n")
    with pytest.raises(EditError, match="dropped required function 'g'"):
        apply_rewrite(TWO_FUNCTIONS, "def f(x):\n    return x + 1\n")


def test_rewrite_identical_to_the_parent_is_no_change() -> None:
    for answer in ('\n    """Approximate the hidden function at x."""\n    return x\n```',
                   "\n    return x  # the same, without the docstring\n",
                   "\n    return (x)\n"):
        with pytest.raises(EditError, match="^no change$"):
            apply_rewrite(PARENT, answer, prefill=PREFILL)


def test_rewrite_drops_dead_code_after_the_return() -> None:
    answer = "\n    return x * 2\n    return x * 3\n    y = f(x)\n"
    assert child_block(apply_rewrite(PARENT, answer, prefill=PREFILL)) == PREFILL + "\n    return x * 2"
    with pytest.raises(EditError, match="^no change$"):
        apply_rewrite(PARENT, "\n    return x\n    return x ** 2\n", prefill=PREFILL)


def test_rewrite_fixes_a_stray_or_missing_closing_bracket() -> None:
    stray = "\n    return math.fabs(x) * (1 + x)) * (2 + x))\n"
    assert child_block(apply_rewrite(PARENT, stray, PREFILL)).endswith("return math.fabs(x) * (1 + x) * (2 + x)")
    missing = "\n    y = max(x, (1 + x)\n    return y\n"
    assert child_block(apply_rewrite(PARENT, missing, PREFILL)).endswith("    y = max(x, (1 + x))\n    return y")


def test_rewrite_reindents_to_the_blocks_indentation() -> None:
    child = apply_rewrite(INDENTED, "\n    return x + 1\n```", prefill="def step(self, x):")
    assert block_body(child) == "    def step(self, x):\n        return x + 1"
    assert "    def other(self):" in child
    ast.parse(child)


def test_rewrite_of_an_answer_that_repeats_the_markers_and_the_whole_file() -> None:
    answer = PARENT.replace("return x\n", "return -x\n")
    child = apply_rewrite(PARENT, answer)
    assert child.count("def helper") == 1
    assert block_body(child).endswith("return -x")


def test_rewrite_with_no_code_at_all() -> None:
    for answer in ("", "   \n", "I cannot help with that.", "```\n```"):
        with pytest.raises(EditError):
            apply_rewrite(PARENT, answer)


def test_rewrite_of_the_list_based_bin_packing_block() -> None:
    prefill = "def priority(item: float, bins: list[float]) -> list[float]:"
    answer = "\n    return [b - item for b in bins]\n```\nThis picks the emptiest bin."
    assert block_body(apply_rewrite(BIN_PACKING, answer, prefill)).endswith("return [b - item for b in bins]")


def test_diff_inside_the_block_is_applied() -> None:
    answer = "```\n<<<<<<< SEARCH\n    return x\n=======\n    return x * x\n>>>>>>> REPLACE\n```\n"
    child = apply_diff(PARENT, answer)
    assert block_body(child).endswith("    return x * x")
    assert child.count("return 1") == 1


def test_diff_tolerates_whitespace_at_line_ends_and_a_missing_final_marker() -> None:
    answer = "<<<<<<< SEARCH\n    return x   \n=======\n    return x + 1"
    assert block_body(apply_diff(PARENT, answer)).endswith("    return x + 1")


def test_diff_applies_several_blocks_in_order() -> None:
    answer = ("<<<<<<< SEARCH\ndef f(x):\n    return g(x)\n=======\ndef f(x):\n    return g(x) + 1\n>>>>>>> REPLACE\n"
              "<<<<<<< SEARCH\ndef g(x):\n    return x\n=======\ndef g(x):\n    return 2 * x\n>>>>>>> REPLACE\n")
    body = block_body(apply_diff(TWO_FUNCTIONS, answer))
    assert "return g(x) + 1" in body and "return 2 * x" in body


def test_diff_outside_the_block_is_rejected() -> None:
    answer = "<<<<<<< SEARCH\ndef helper() -> int:\n    return 1\n=======\ndef helper() -> int:\n    return 2\n" \
             ">>>>>>> REPLACE\n"
    with pytest.raises(EditError, match="edit outside EVOLVE-BLOCK"):
        apply_diff(PARENT, answer)
    touching_marker = "<<<<<<< SEARCH\n    return x\n# EVOLVE-BLOCK-END\n=======\n    return 2\n>>>>>>> REPLACE"
    with pytest.raises(EditError, match="edit outside EVOLVE-BLOCK"):
        apply_diff(PARENT, touching_marker)
    adding_marker = "<<<<<<< SEARCH\n    return x\n=======\n    return x\n# EVOLVE-BLOCK-END\nx = 1\n>>>>>>> REPLACE"
    with pytest.raises(EditError, match="edit outside EVOLVE-BLOCK"):
        apply_diff(PARENT, adding_marker)


def test_diff_with_unknown_search_text_or_no_block_or_broken_result() -> None:
    with pytest.raises(EditError, match="SEARCH text not found"):
        apply_diff(PARENT, "<<<<<<< SEARCH\n    return y\n=======\n    return 1\n>>>>>>> REPLACE")
    with pytest.raises(EditError, match="no SEARCH/REPLACE block"):
        apply_diff(PARENT, "def f(x):\n    return 2\n")
    with pytest.raises(EditError, match="no SEARCH/REPLACE block"):
        apply_diff(PARENT, "<<<<<<< SEARCH\n    return x\n>>>>>>> REPLACE\n")
    with pytest.raises(EditError, match="does not parse"):
        apply_diff(PARENT, "<<<<<<< SEARCH\n    return x\n=======\n    return (x\n>>>>>>> REPLACE")
    with pytest.raises(EditError, match="dropped required function 'f'"):
        apply_diff(PARENT, "<<<<<<< SEARCH\ndef f(x: float) -> float:\n=======\ndef g(x: float) -> float:\n"
                           ">>>>>>> REPLACE")
    with pytest.raises(EditError, match="^no change$"):
        apply_diff(PARENT, "<<<<<<< SEARCH\n    return x\n=======\n    return x\n>>>>>>> REPLACE")


def test_split_answers_reads_numbered_tags() -> None:
    text = "<response_1>\nA\n</response_1>\n<response_2>\nB\n</response_2>\n<response_3>C</response_3>"
    assert split_answers(text, 3) == ["A", "B", "C"]
    assert split_answers(text, 2) == ["A", "B"]


def test_split_answers_tolerates_a_missing_closing_tag_and_drops_empty_answers() -> None:
    assert split_answers("<response_1>\nA\n</response_1>\n<response_2>\nB cut off", 2) == ["A", "B cut off"]
    assert split_answers("<response_1>A<response_2>B</response_2>", 2) == ["A", "B"]
    assert split_answers("<response_1>\n\n</response_1><response_2>B</response_2>", 2) == ["B"]
    assert split_answers("<answer_1>X</answer_1>", 2, tag="answer") == ["X"]


def test_split_answers_with_m_1_or_without_tags() -> None:
    assert split_answers("<response_1>A</response_1>", 1) == ["<response_1>A</response_1>"]
    assert split_answers("def f(x):\n    return 1", 3) == ["def f(x):\n    return 1"]
    assert split_answers("", 3) == []


GARBAGE_PIECES = [
    "", "\n", "```", "```python", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "# EVOLVE-BLOCK-START",
    "# EVOLVE-BLOCK-END", "def f(x: float) -> float:", "    return x", "return", "\x00", "\r\n", "\t", "(((", ")))",
    '"""', "'''", "<response_1>", "</response_1>", "import math", "class", "@", "\\", "lambda:", "\u2028", "\x0c",
    "if __name__ == '__main__':", "print(f(2))", "x = [", "def f(", "async def f(x):", "    ", "é", "🙂",
]


def random_answers(count: int) -> list[str]:
    rng = random.Random(7)
    answers = ["(" * 300, "[" * 5000, "\n" * 2000, "x" * 10_000, "def f(x):\n" + "    if x:\n" * 120 + "pass"]
    for _ in range(count):
        pieces = [rng.choice(GARBAGE_PIECES) if rng.random() < 0.7 else
                  "".join(rng.choice(string.printable) for _ in range(rng.randint(1, 30)))
                  for _ in range(rng.randint(1, 25))]
        answers.append(rng.choice(["\n", "", " "]).join(pieces))
    return answers


def test_any_input_gives_a_child_or_an_edit_error_with_a_one_line_reason() -> None:
    for answer in random_answers(400):
        for attempt in (lambda: apply_rewrite(PARENT, answer, prefill=PREFILL), lambda: apply_rewrite(PARENT, answer),
                        lambda: apply_diff(PARENT, answer), lambda: apply_rewrite(answer, answer),
                        lambda: apply_diff(answer, answer)):
            try:
                child = attempt()
            except EditError as exc:
                assert exc.reason and "\n" not in exc.reason and len(exc.reason) <= 200
            else:
                ast.parse(child)
                assert child != PARENT
        assert isinstance(split_answers(answer, 4), list)


def test_a_line_continuation_left_alone_by_stripping_is_no_code() -> None:
    """' \\' followed by a form-feed line parses; stripped of the form feed it does not (found by test_fuzz)."""
    with pytest.raises(EditError, match="no code that parses"):
        salvage_code(" \\\n\x0c\n~~~\n", set())
