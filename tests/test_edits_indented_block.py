"""edits.py: SEARCH/REPLACE diffs written against the block as the prompt shows it (dedented) apply to an
indented EVOLVE block; unindented blocks and diffs that carry the block's indentation apply as before."""

from __future__ import annotations

import ast
import textwrap

import pytest

from evolve.records import MutationRequest, Program
from evolve.search.edits import EditError, apply_diff, block_body
from evolve.search.prompts import PromptOptions, build_prompt

INDENTED = '''class Solver:
    # EVOLVE-BLOCK-START
    def step(self, x):
        if x > 0:
            return x
        return -x
    # EVOLVE-BLOCK-END

    def other(self):
        return 0
'''

TOP_LEVEL = '''import math

# EVOLVE-BLOCK-START
def step(x):
    if x > 0:
        return x
    return -x
# EVOLVE-BLOCK-END


def other():
    return 0
'''

TWICE = '''class Solver:
    # EVOLVE-BLOCK-START
    def step(self, x):
        x = x + 1
        return x

    def back(self, x):
        x = x + 1
        return x
    # EVOLVE-BLOCK-END
'''


def diff(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def shown_block(code: str) -> str:
    """The block as a diff prompt shows it."""
    parent = Program(id=1, run_id=1, code=code, parent_id=None, island=0, iteration=0, policy="", edit="",
                     scores={"a": 0.1}, scalar=0.1, solved=False)
    prompt = build_prompt(MutationRequest(iteration=1, island=0, parent=parent, inspirations=(),
                                          problem_description="d", objective_names=("a",)),
                          PromptOptions(edit_format="diff"))
    user = prompt.messages[-1]["content"]
    return user.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_a_diff_against_the_dedented_block_shown_applies_to_the_indented_block() -> None:
    shown = shown_block(INDENTED)
    assert shown == textwrap.dedent(block_body(INDENTED))
    search = "    if x > 0:\n        return x"
    assert search in shown  # exactly the lines the prompt shows
    child = apply_diff(INDENTED, diff(search, "    if x > 1:\n        return 2 * x\n\n    # doubled"))
    assert block_body(child) == ("    def step(self, x):\n        if x > 1:\n            return 2 * x\n\n"
                                 "        # doubled\n        return -x")
    assert child.endswith("    # EVOLVE-BLOCK-END\n\n    def other(self):\n        return 0\n")
    ast.parse(child)


def test_a_dedented_diff_may_add_and_replace_whole_functions() -> None:
    answer = diff("def step(self, x):\n    if x > 0:", "def helper(self):\n    return 3\n\ndef step(self, x):\n"
                  "    if x > self.helper():") + diff("    return -x", "    return x * x")
    body = block_body(apply_diff(INDENTED, answer))
    assert body == ("    def helper(self):\n        return 3\n\n    def step(self, x):\n        if x > self.helper():\n"
                    "            return x\n        return x * x")


def test_a_diff_that_carries_the_blocks_full_indentation_still_applies() -> None:
    child = apply_diff(INDENTED, diff("        if x > 0:\n            return x", "        if x >= 0:\n            return x"))
    assert "        if x >= 0:\n            return x\n        return -x" in block_body(child)
    ast.parse(child)


def test_an_unindented_block_is_edited_exactly_as_before() -> None:
    answers = [
        diff("    if x > 0:\n        return x", "    if x > 1:\n        return 2 * x"),
        diff("    return -x   ", "    return x * x"),  # whitespace at line ends
        diff("    return -x", ""),  # a deleted line leaves an empty one, as it always did
        diff("def step(x):", "def helper():\n    return 1\n\n\ndef step(x):"),
    ]
    for answer in answers:
        search, replace = answer.split("<<<<<<< SEARCH\n")[1].split("\n>>>>>>> REPLACE")[0].split("\n=======\n")
        lines = TOP_LEVEL.split("\n")
        wanted = [line.rstrip() for line in search.split("\n")]
        first = next(n for n in range(len(lines)) if [line.rstrip() for line in lines[n:n + len(wanted)]] == wanted)
        expected = "\n".join(lines[:first] + replace.strip("\n").split("\n") + lines[first + len(wanted):])
        assert apply_diff(TOP_LEVEL, answer) == expected


def test_search_text_that_occurs_twice_replaces_the_first_occurrence() -> None:
    child = apply_diff(TWICE, diff("    x = x + 1", "    x = x + 2"))
    body = block_body(child)
    assert body.count("x = x + 2") == 1 and body.index("x = x + 2") < body.index("def back")
    top = textwrap.dedent(TWICE.split("\n", 1)[1])  # the same block at the top level
    assert top.startswith("# EVOLVE-BLOCK-START\ndef step(self, x):")
    top_child = apply_diff(top, diff("    x = x + 1", "    x = x + 2"))
    assert block_body(top_child).index("x = x + 2") < block_body(top_child).index("def back")


def test_the_block_as_shown_wins_when_a_search_also_matches_the_lines_as_written() -> None:
    """`        y = 1` is the inner line of the dedented block the prompt shows, and the outer line as written."""
    code = ("class A:\n    # EVOLVE-BLOCK-START\n    def f(self, x):\n        if x:\n            y = 1\n"
            "        y = 1\n        return y\n    # EVOLVE-BLOCK-END\n")
    body = block_body(apply_diff(code, diff("        y = 1", "        y = 2")))
    assert body == "    def f(self, x):\n        if x:\n            y = 2\n        y = 1\n        return y"


def test_a_dedented_search_outside_the_block_or_absent_is_still_rejected() -> None:
    with pytest.raises(EditError, match="SEARCH text not found"):
        apply_diff(INDENTED, diff("    return y", "    return 1"))
    with pytest.raises(EditError, match="edit outside EVOLVE-BLOCK"):
        apply_diff(INDENTED, diff("    def other(self):\n        return 0", "    def other(self):\n        return 1"))
    with pytest.raises(EditError, match="does not parse"):
        apply_diff(INDENTED, diff("    return -x", "    return (x"))
    with pytest.raises(EditError, match="dropped required function 'step'"):
        apply_diff(INDENTED, diff("def step(self, x):", "def stop(self, x):"))
