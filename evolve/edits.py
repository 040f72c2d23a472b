"""Turning a policy's answer into a child program: EVOLVE-BLOCK rewrites, SEARCH/REPLACE diffs, m answers."""

from __future__ import annotations

import ast
import re
import textwrap

EVOLVE_START = "# EVOLVE-BLOCK-START"
EVOLVE_END = "# EVOLVE-BLOCK-END"
_FENCE = re.compile(r"^\s*```[\w+-]*\s*$")
_DIFF = re.compile(r"<{5,}\s*SEARCH\s*\n(.*?)\n={5,}\s*\n(.*?)\n?>{5,}\s*REPLACE", re.DOTALL)


class EditError(ValueError):
    """An answer that cannot become a program; `reason` is one short line for the attempts table."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def find_blocks(code: str) -> list[tuple[int, int]]:
    """Line spans (start, end) of each block body: lines start..end-1 lie between the markers."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for number, line in enumerate(code.splitlines()):
        marker = line.strip()
        if marker.startswith(EVOLVE_START):
            start = number + 1
        elif marker.startswith(EVOLVE_END) and start is not None:
            spans.append((start, number))
            start = None
    return spans


def block_body(code: str, index: int = 0) -> str:
    start, end = find_blocks(code)[index]
    return "\n".join(code.splitlines()[start:end])


def replace_block(code: str, new_body: str, index: int = 0) -> str:
    lines = code.splitlines()
    start, end = find_blocks(code)[index]
    trailing = "\n" if code.endswith("\n") else ""
    return "\n".join(lines[:start] + new_body.rstrip("\n").splitlines() + lines[end:]) + trailing


def defined_names(code: str) -> set[str]:
    """Top-level function and class names a block defines."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def split_answers(text: str, m: int, tag: str = "response") -> list[str]:
    """Up to m answers from `<tag_i>...</tag_i>` sections (VPO's format); m == 1 is the whole text."""
    if m <= 1:
        return [text]
    answers = []
    pattern = re.compile(rf"<{tag}_(\d+)>\s*\n?(.*?)(?:</{tag}_\1>|(?=<{tag}_\d+>)|\Z)", re.DOTALL)
    for match in pattern.finditer(text):
        answer = match.group(2).strip("\n")
        if answer.strip():
            answers.append(answer)
        if len(answers) == m:
            break
    return answers


def _strip_fences(text: str) -> str:
    lines = text.splitlines()
    kept: list[str] = []
    for line in lines:
        if _FENCE.match(line):
            if kept:  # a closing fence ends the code
                break
            continue
        kept.append(line)
    return "\n".join(kept)


def _longest_parsing_prefix(code: str) -> str:
    """Drop trailing prose or half-written lines: the longest prefix of whole lines that parses."""
    lines = code.rstrip().splitlines()
    # cut at the first top-level line that is neither code we keep nor blank (prose, a call, a print)
    for number, line in enumerate(lines):
        if number and line and not line[0].isspace() and not line.startswith(("def ", "async def ", "class ", "@",
                                                                                "import ", "from ", "#", ")", "]")):
            if not re.match(r"^[A-Za-z_][\w, ]*\s*(:[^=]+)?=[^=]", line):  # a module-level assignment is code
                lines = lines[:number]
                break
    for end in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:end])
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        return candidate
    return ""


def apply_rewrite(parent_code: str, answer: str, prefill: str = "", index: int = 0) -> str:
    """Replace the parent's EVOLVE block `index` with prefill + answer, salvaging what a small model writes."""
    blocks = find_blocks(parent_code)
    if not blocks:
        raise EditError("parent has no EVOLVE-BLOCK")
    old_body = block_body(parent_code, index)
    indent = re.match(r"\s*", next((line for line in old_body.splitlines() if line.strip()), "")).group(0)
    text = _strip_fences(prefill + answer)
    text = text.replace(EVOLVE_START, "").replace(EVOLVE_END, "")
    code = _longest_parsing_prefix(textwrap.dedent(text))
    if not code.strip():
        raise EditError("answer holds no code that parses")
    missing = sorted(defined_names(old_body) - defined_names(code))
    if missing:
        raise EditError(f"dropped required function '{missing[0]}'")
    child = replace_block(parent_code, textwrap.indent(code, indent), index)
    try:
        ast.parse(child)
    except SyntaxError as exc:
        raise EditError(f"child does not parse: {exc.msg} (line {exc.lineno})") from None
    if child.strip() == parent_code.strip():
        raise EditError("no change")
    return child


def apply_diff(parent_code: str, answer: str) -> str:
    """Apply OpenEvolve-style SEARCH/REPLACE blocks; every SEARCH text must lie inside an EVOLVE block."""
    edits = _DIFF.findall(_strip_fences_keep_all(answer))
    if not edits:
        raise EditError("no SEARCH/REPLACE block")
    child = parent_code
    for search, replace in edits:
        if not search.strip():
            raise EditError("empty SEARCH text")
        position = _locate(child, search)
        if position is None:
            raise EditError("SEARCH text not found")
        start, end = position
        if not _inside_blocks(child, start, end):
            raise EditError("edit outside EVOLVE-BLOCK")
        child = child[:start] + replace + child[end:]
    if not find_blocks(child):
        raise EditError("edit removed the EVOLVE-BLOCK markers")
    try:
        ast.parse(child)
    except SyntaxError as exc:
        raise EditError(f"child does not parse: {exc.msg} (line {exc.lineno})") from None
    missing = sorted(defined_names(block_body(parent_code)) - defined_names(block_body(child)))
    if missing:
        raise EditError(f"dropped required function '{missing[0]}'")
    if child.strip() == parent_code.strip():
        raise EditError("no change")
    return child


def _strip_fences_keep_all(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not _FENCE.match(line))


def _locate(code: str, search: str) -> tuple[int, int] | None:
    """Exact match first, then a match that ignores trailing whitespace on each line."""
    start = code.find(search)
    if start >= 0:
        return start, start + len(search)
    wanted = [line.rstrip() for line in search.splitlines()]
    lines = code.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for first in range(len(lines) - len(wanted) + 1):
        if [line.rstrip() for line in lines[first:first + len(wanted)]] == wanted:
            end = offsets[first + len(wanted)]
            return offsets[first], end - (1 if lines[first + len(wanted) - 1].endswith("\n") else 0)
    return None


def _inside_blocks(code: str, start: int, end: int) -> bool:
    first_line = code.count("\n", 0, start)
    last_line = code.count("\n", 0, max(start, end - 1))
    return any(block_start <= first_line and last_line < block_end for block_start, block_end in find_blocks(code))
