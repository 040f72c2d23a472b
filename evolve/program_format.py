"""The program format every problem's code is written in: EVOLVE-BLOCK markers around the lines a policy may
change. Problems (the seed program, `evolve check`, the HumanEval import) and the search (prompts, edits) both read
it; it imports nothing of evolve."""

from __future__ import annotations

import ast
import textwrap

EVOLVE_START = "# EVOLVE-BLOCK-START"
EVOLVE_END = "# EVOLVE-BLOCK-END"
_REASON_CHARS = 200


class EditError(ValueError):
    """An answer that cannot become a program; `reason` is one short line for the attempts table."""

    def __init__(self, reason: str) -> None:
        reason = " ".join(reason.split())[:_REASON_CHARS]
        super().__init__(reason)
        self.reason = reason


def lines_of(code: str) -> list[str]:
    """The lines of `code` as Python reads them."""
    # str.splitlines would also split on \f, \x1c, \u2028 ... which Python source treats as ordinary characters
    return code.split("\n")


def find_blocks(code: str) -> list[tuple[int, int]]:
    """Line spans (start, end) of each block body: lines start..end-1 lie between a START and an END marker."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for number, line in enumerate(lines_of(code)):
        marker = line.strip()
        if marker.startswith(EVOLVE_START):
            start = number + 1
        elif marker.startswith(EVOLVE_END) and start is not None:
            spans.append((start, number))
            start = None
    return spans


def _span(code: str, index: int) -> tuple[int, int]:
    blocks = find_blocks(code)
    if not blocks:
        raise EditError("no EVOLVE-BLOCK in the parent")
    if not -len(blocks) <= index < len(blocks):
        raise EditError(f"no EVOLVE-BLOCK number {index}")
    return blocks[index]


def block_body(code: str, index: int = 0) -> str:
    """The lines between the markers of block `index`, as written (indentation kept)."""
    start, end = _span(code, index)
    return "\n".join(lines_of(code)[start:end])


def replace_block(code: str, new_body: str, index: int = 0) -> str:
    """`code` with the body of block `index` replaced by `new_body`; the markers and all other lines are kept."""
    start, end = _span(code, index)
    lines = lines_of(code)
    body = lines_of(new_body.rstrip("\n")) if new_body.strip() else []
    return "\n".join(lines[:start] + body + lines[end:])


def block_indent(body: str) -> str:
    """The indentation of the block's first code line."""
    first = next((line for line in lines_of(body) if line.strip()), "")
    return first[: len(first) - len(first.lstrip())]


def block_docstring(code: str) -> str:
    """The docstring of the first function in the program's first EVOLVE block, as its source lines are written
    (quotes included, dedented to the function body's indentation), or "" when there is none. For a benchmark
    whose seed is its prompt (HumanEval, the generated problems) this is the specification."""
    try:
        body = textwrap.dedent(block_body(code))
        tree = ast.parse(body)
    except (EditError, SyntaxError):
        return ""
    function = next((node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if function is None or ast.get_docstring(function) is None:
        return ""
    first = function.body[0]
    if first.lineno == function.lineno:  # `def f(): "doc"` on one line
        return ""
    lines = lines_of(body)[first.lineno - 1:first.end_lineno]
    return textwrap.dedent("\n".join(lines))
