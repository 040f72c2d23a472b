"""A small model's answer read as the code it meant: out of fences, without the prose and junk around it, stray or
missing brackets mended, dedented; and the parser's verdict on code, as one line (used by edits.py)."""

from __future__ import annotations

import ast
import re
import textwrap
import warnings

from evolve.program_format import EVOLVE_END, EVOLVE_START, EditError, find_blocks, lines_of

FENCE = re.compile(r"^\s*```")  # a markdown fence line
# top-level lines that belong to a module's code; any other unindented line ends the code (prose, a call, a print)
_CODE_HEAD = re.compile(
    r"(async\s+def|def|class|import|from)\s|[@#)\]}]"
    r"|[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*(:[^=]+)?([-+*/%&|^@]|//|\*\*|>>|<<)?=[^=]"
)
_PROSE_CUTS_TRIED = 8


def parse_module(code: str) -> ast.Module | SyntaxError:
    """The module's tree, or the parser's error (odd input such as NUL bytes or deep nesting becomes one too)."""
    try:
        with warnings.catch_warnings():  # invalid escapes in junk text would print a warning per parse
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return SyntaxError(f"{type(exc).__name__}: {exc}")


def _syntax_error(code: str) -> SyntaxError | None:
    tree = parse_module(code)
    return tree if isinstance(tree, SyntaxError) else None


def parse_error_reason(code: str) -> str | None:
    error = _syntax_error(code)
    if error is None:
        return None
    where = f" (line {error.lineno})" if error.lineno else ""
    return f"child does not parse: {error.msg}{where}"


def defined_names(code: str) -> set[str]:
    """Top-level function and class names a block defines (empty when it does not parse)."""
    tree = parse_module(textwrap.dedent(code))
    if isinstance(tree, SyntaxError):
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _fenced_segments(text: str) -> list[str]:
    """The non-empty pieces of the text between markdown fence lines, in order."""
    lines = lines_of(text)
    fences = [number for number, line in enumerate(lines) if FENCE.match(line)]
    bounds = [-1, *fences, len(lines)]
    segments = ["\n".join(lines[bounds[i] + 1 : bounds[i + 1]]) for i in range(len(bounds) - 1)]
    return [segment for segment in segments if segment.strip()]


def _between_markers(text: str) -> str:
    """An answer that repeats the markers is cut to what lies between them; stray marker lines are dropped."""
    blocks = find_blocks(text)
    if blocks:
        start, end = blocks[0]
        text = "\n".join(lines_of(text)[start:end])
    # find_blocks takes any line that starts with a marker for one: a child must hold none of its own
    return "\n".join(line for line in lines_of(text) if not line.strip().startswith((EVOLVE_START, EVOLVE_END)))


def _is_top_level_prose(line: str) -> bool:
    return bool(line.strip()) and not line[0].isspace() and not _CODE_HEAD.match(line)


def _longest_parsing_prefix(lines: list[str]) -> int:
    """The number of leading lines that parse, cutting at prose first when the code before it parses."""
    end = len(lines)
    prose = [number for number, line in enumerate(lines) if _is_top_level_prose(line)]
    for number in prose[:_PROSE_CUTS_TRIED]:  # prose inside a multi-line string is no place to cut
        if _syntax_error("\n".join(lines[:number])) is None:
            end = number
            break
    while end > 0:
        error = _syntax_error("\n".join(lines[:end]))
        if error is None:
            break
        # the parser failed at error.lineno, so no prefix longer than that line can parse: jump there
        end = min(end - 1, error.lineno) if isinstance(error.lineno, int) and error.lineno > 0 else end - 1
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def _runs_at_import(node: ast.stmt, block_names: set[str]) -> bool:
    """Statements a small model appends after its function: calls, prints, tests, `if __name__ == ...`."""
    if isinstance(node, ast.Expr):
        return not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))
    if isinstance(node, ast.AnnAssign):
        return node.value is None or _calls_any(node.value, block_names)
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        return _calls_any(node.value, block_names)
    return not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))


def _calls_any(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in names
               for sub in ast.walk(node))


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [decorator.lineno for decorator in getattr(node, "decorator_list", [])])


def _live_end(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The last line of the function that can run: statements after a top-level return or raise never do."""
    for statement in function.body[:-1]:
        if isinstance(statement, (ast.Return, ast.Raise)):
            return statement.end_lineno or statement.lineno
    return function.end_lineno or function.lineno


def _drop_junk(code: str) -> str:
    """`code` without statements that would run at import and without code after a function's return.

    Both are what a small model appends after the function; the code is returned unchanged if dropping breaks it.
    """
    tree = parse_module(code)
    if isinstance(tree, SyntaxError):
        return code
    names = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    dropped: set[int] = set()
    kept: set[int] = set()
    for node in tree.body:
        end = node.end_lineno or node.lineno
        if _runs_at_import(node, names):
            dropped.update(range(node.lineno, end + 1))
            continue
        live_end = _live_end(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else end
        kept.update(range(_first_line(node), live_end + 1))
        dropped.update(range(live_end + 1, end + 1))
    dropped -= kept
    if not dropped:
        return code
    filtered = "\n".join(line for number, line in enumerate(lines_of(code), 1) if number not in dropped)
    return filtered if _syntax_error(filtered) is None else code


_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def _bracket_fix(lines: list[str], error: SyntaxError) -> list[str] | None:
    """The lines with one bracket mistake of the kind small models make fixed, or None.

    An unmatched closing bracket is deleted; a bracket never closed on a one-line statement is closed at the
    end of that line.
    """
    number, offset = error.lineno, error.offset
    if not isinstance(number, int) or not isinstance(offset, int) or not 0 < number <= len(lines):
        return None
    line = lines[number - 1]
    position = offset - 1
    if not 0 <= position < len(line):
        return None
    message = str(error.msg)
    if message.startswith("unmatched '") and line[position] in ")]}":
        fixed = line[:position] + line[position + 1 :]
    elif message.endswith("was never closed") and line[position] in _CLOSERS:
        following = next((later for later in lines[number:] if later.strip()), "")
        indent = len(line) - len(line.lstrip())
        if following and len(following) - len(following.lstrip()) > indent:
            return None  # the statement may go on over the next lines
        fixed = line.rstrip() + _CLOSERS[line[position]]
    else:
        return None
    return lines[: number - 1] + [fixed] + lines[number:]


def _with_brackets_fixed(lines: list[str], rounds: int = 6) -> list[str]:
    for _ in range(rounds):
        error = _syntax_error("\n".join(lines))
        fixed = _bracket_fix(lines, error) if error else None
        if fixed is None:
            break
        lines = fixed
    return lines


def extract_code(text: str) -> str:
    """Module-level code from one piece of an answer: leading prose and trailing junk dropped, dedented.

    When fixing a stray or missing bracket lets more lines parse, the fixed lines are used.
    """
    lines = lines_of(text)
    start = next((n for n, line in enumerate(lines) if line.strip() and _CODE_HEAD.match(line.lstrip())), 0)
    lines = lines_of(textwrap.dedent("\n".join(lines[start:])).rstrip())
    end = _longest_parsing_prefix(lines)
    if end < len(lines):
        fixed = _with_brackets_fixed(lines)
        fixed_end = _longest_parsing_prefix(fixed) if fixed is not lines else 0
        if fixed_end > end:
            lines, end = fixed, fixed_end
    code = _drop_junk("\n".join(lines[:end])).rstrip()
    # stripping can break what parsed: a line-continuation backslash followed only by blank lines (form feeds)
    return code if code.strip() and parse_error_reason(code) is None else ""


def salvage_code(text: str, required: set[str]) -> str:
    """The code a small model meant: out of fences, without prose or junk around it, dedented.

    Pieces between fence lines are tried in order and the first that defines every `required` name wins
    (with nothing required, the longest piece of code); EditError when none does.
    """
    text = _between_markers(text.replace("\r\n", "\n"))
    pieces = [code for code in map(extract_code, _fenced_segments(text)) if code.strip()]
    if not pieces:
        raise EditError("answer holds no code that parses")
    if not required:
        return max(pieces, key=len)
    for code in pieces:
        if required <= defined_names(code):
            return code
    missing = min((sorted(required - defined_names(code)) for code in pieces), key=len)
    raise EditError(f"dropped required function '{missing[0]}'")
