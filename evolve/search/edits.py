"""Turning a policy's answer into a child program: EVOLVE-BLOCK rewrites, SEARCH/REPLACE diffs, m answers."""

from __future__ import annotations

import ast
import re
import textwrap

from evolve.program_format import (
    EditError,
    block_body,
    block_indent,
    find_blocks,
    lines_of,
    replace_block,
)
from evolve.search.salvage import FENCE, defined_names, parse_error_reason, parse_module, salvage_code

_SEARCH = re.compile(r"^\s*<{5,}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,}\s*$")
_REPLACE = re.compile(r"^\s*>{5,}\s*REPLACE\s*$")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _same_program(first: str, second: str) -> bool:
    """Equal code, or code that differs only in comments, docstrings and layout (it would score the same)."""
    if first.strip() == second.strip():
        return True
    trees = [parse_module(first), parse_module(second)]
    if any(isinstance(tree, SyntaxError) for tree in trees):
        return False
    return ast.dump(_without_docstrings(trees[0])) == ast.dump(_without_docstrings(trees[1]))


def _outside_blocks(code: str) -> list[str]:
    """Every line that is not inside an EVOLVE block, with one placeholder per block body."""
    lines = lines_of(code)
    kept: list[str] = []
    position = 0
    for start, end in find_blocks(code):
        kept += [line.rstrip() for line in lines[position:start]] + ["\0block"]
        position = end
    return kept + [line.rstrip() for line in lines[position:]]


def split_answers(text: str, m: int, tag: str = "response") -> list[str]:
    """Up to m non-empty answers from `<tag_i>...</tag_i>` sections (VPO's format); m == 1 is the whole text.

    A missing closing tag ends the answer at the next opening tag or at the end of the text. When m > 1 and the
    text holds no tag at all, the whole text is taken as the one answer.
    """
    if m <= 1:
        return [text]
    name = re.escape(tag)
    opening = re.compile(rf"<{name}_\d+\s*>", re.IGNORECASE)
    closing = re.compile(rf"</{name}_\d+\s*>", re.IGNORECASE)
    starts = list(opening.finditer(text))
    if not starts:
        return [text] if text.strip() and not closing.search(text) else []
    answers: list[str] = []
    for number, match in enumerate(starts):
        stop = starts[number + 1].start() if number + 1 < len(starts) else len(text)
        section = text[match.end() : stop]
        end_tag = closing.search(section)
        answer = (section[: end_tag.start()] if end_tag else section).strip("\n")
        if answer.strip():
            answers.append(answer)
        if len(answers) == m:
            break
    return answers


def apply_rewrite(parent_code: str, answer: str, prefill: str = "", index: int = 0) -> str:
    """The parent with EVOLVE block `index` replaced by prefill + answer, salvaged (see salvage_code)."""
    old_body = block_body(parent_code, index)
    code = salvage_code(prefill + answer, defined_names(old_body))
    child = replace_block(parent_code, textwrap.indent(code, block_indent(old_body)), index)
    if _outside_blocks(child) != _outside_blocks(parent_code):  # e.g. a marker inside a string of the answer's
        raise EditError("answer holds an EVOLVE-BLOCK marker")
    reason = parse_error_reason(child)
    if reason:
        raise EditError(reason)
    if _same_program(child, parent_code):
        raise EditError("no change")
    return child


def _parse_diff(answer: str) -> list[tuple[str, str]]:
    """(search, replace) pairs; a final block cut off before its REPLACE marker is kept."""
    edits: list[tuple[str, str]] = []
    state, search, replace = "", [], []  # state: "" outside, "search", "replace"
    for line in lines_of(answer.replace("\r\n", "\n")):
        if _SEARCH.match(line):
            state, search, replace = "search", [], []
        elif state == "search" and _DIVIDER.match(line):
            state = "replace"
        elif state == "replace" and _REPLACE.match(line):
            edits.append(("\n".join(search), "\n".join(replace)))
            state = ""
        elif state == "search":
            search.append(line)
        elif state == "replace" and not FENCE.match(line):
            replace.append(line)
    if state == "replace":
        edits.append(("\n".join(search), "\n".join(replace)))
    return edits


def _matches(code: str, search: str) -> list[tuple[int, int]]:
    """Character spans of whole-line matches of `search` in `code`, ignoring whitespace at line ends."""
    wanted = [line.rstrip() for line in lines_of(search.strip("\n"))]
    lines = [line.rstrip() for line in lines_of(code)]
    offsets = [0]
    for line in lines_of(code):
        offsets.append(offsets[-1] + len(line) + 1)
    spans = []
    for first in range(len(lines) - len(wanted) + 1):
        if lines[first : first + len(wanted)] == wanted:
            spans.append((offsets[first], offsets[first + len(wanted)] - 1))
    return spans


def _inside_blocks(code: str, start: int, end: int) -> bool:
    first_line = code.count("\n", 0, start)
    last_line = code.count("\n", 0, max(start, end - 1))
    return any(block_start <= first_line and last_line < block_end for block_start, block_end in find_blocks(code))


def _indented(text: str, margin: str) -> str:
    """`text` with `margin` put before each line that is not blank (textwrap.indent, split on newlines only)."""
    if not margin:
        return text
    return "\n".join(margin + line if line.strip() else line for line in lines_of(text))


def _apply_to_shown_block(code: str, search: str, replace: str) -> str | None:
    """`code` with the first whole-line match of `search` in an EVOLVE block, as the prompt shows the block
    (dedented by its common indentation; line ends ignored), replaced by `replace` indented by that indentation;
    None when no block holds it. Blocks are tried in order; for an unindented block this is the plain match."""
    wanted = [line.rstrip() for line in lines_of(search.strip("\n"))]
    lines = lines_of(code)
    for start, end in find_blocks(code):
        body = lines[start:end]
        shown = lines_of(textwrap.dedent("\n".join(body)))
        if len(shown) != len(body):  # dedent keeps every line; a guard, not a case
            continue
        first_code = next((number for number, line in enumerate(shown) if line.strip()), None)
        margin = "" if first_code is None else body[first_code][: len(body[first_code]) - len(shown[first_code])]
        shown = [line.rstrip() for line in shown]
        for first in range(len(shown) - len(wanted) + 1):
            if shown[first : first + len(wanted)] == wanted:
                new = lines_of(_indented(replace.strip("\n"), margin))
                return "\n".join(lines[: start + first] + new + lines[start + first + len(wanted) :])
    return None


def apply_diff(parent_code: str, answer: str) -> str:
    """Apply OpenEvolve-style SEARCH/REPLACE blocks, in order; every SEARCH text must lie inside an EVOLVE block.

    SEARCH is matched line by line (whitespace at line ends ignored) against each block as the prompt shows it:
    dedented by the block's common indentation, and the REPLACE text is then indented by it. A SEARCH that
    carries the block's full indentation instead (matching the lines as written) is applied as written. When
    the SEARCH text occurs more than once, only its first occurrence is replaced, as in OpenEvolve: the first in
    the first block that holds it, a match in the dedented view before one in the lines as written.
    """
    if not find_blocks(parent_code):
        raise EditError("no EVOLVE-BLOCK in the parent")
    edits = _parse_diff(answer)
    if not edits:
        raise EditError("no SEARCH/REPLACE block")
    child = parent_code
    for search, replace in edits:
        if not search.strip():
            raise EditError("empty SEARCH text")
        edited = _apply_to_shown_block(child, search, replace)
        if edited is not None:
            child = edited
            continue
        spans = _matches(child, search)
        if not spans:
            raise EditError("SEARCH text not found")
        inside = [span for span in spans if _inside_blocks(child, *span)]
        if not inside:
            raise EditError("edit outside EVOLVE-BLOCK")
        start, end = inside[0]
        child = child[:start] + replace.strip("\n") + child[end:]
    if _outside_blocks(child) != _outside_blocks(parent_code):
        raise EditError("edit outside EVOLVE-BLOCK")
    reason = parse_error_reason(child)
    if reason:
        raise EditError(reason)
    for index in range(len(find_blocks(parent_code))):
        missing = sorted(defined_names(block_body(parent_code, index)) - defined_names(block_body(child, index)))
        if missing:
            raise EditError(f"dropped required function '{missing[0]}'")
    if _same_program(child, parent_code):
        raise EditError("no change")
    return child

