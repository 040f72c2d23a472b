"""Prompts a 135M model can answer: one EVOLVE-BLOCK shown, its first line prefilled, stops and a budget fit to it.

The wording lives in a template folder (prompt_templates.py); this module decides what the template is given
(the block without docstrings, the weakest objectives, short feedback) and the mechanics around it: prefill,
stop strings, token budget, and the raw text for completion APIs.
"""

from __future__ import annotations

import ast
import re
import string
import textwrap
from dataclasses import dataclass
from typing import Literal

from evolve.evaluator_api import FEEDBACK_CHARS
from evolve.policy_config import BasePolicySection
from evolve.problems.problem import ProblemPrompt
from evolve.records import MutationRequest, Program
from evolve.search.edits import EditError, block_body, defined_names, find_blocks
from evolve.search.prompt_templates import PromptTemplate, load_template

_CHARS_PER_TOKEN = 3.0  # SmolLM2's tokenizer on indented Python, measured on the example programs
_WEAKEST_SHOWN = 3
_INSPIRATION_CHARS = 600
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROBLEM_DEFAULTS = ProblemPrompt()  # a problem without a [prompt] table
# a line that starts at column 0 after a one-function block is never part of it: stop there
_TOP_LEVEL_STARTS = tuple("\n" + c for c in string.ascii_letters + "_#@")
DIFF_PREFILL = "<<<<<<< SEARCH\n"
_REWRITE_STOPS = ("```", "<|im_end|>", "\n\n\n", "\nif __name__", "\nprint(")


@dataclass(frozen=True)
class PromptOptions:
    """What a policy asks for and how; the defaults are what worked best with SmolLM2-135M."""

    edit_format: Literal["rewrite", "diff"] = "rewrite"
    answers: int = 1  # m answers in one completion, in numbered tags
    answer_tag: str = "response"  # <response_1>...</response_1>
    max_new_tokens_cap: int = 384  # per answer (policy.max_new_tokens): a completion of m answers gets m times it
    api: Literal["chat", "completions"] = "chat"  # completions: the template also renders the whole text
    prefill: bool = True  # open the answer with the block's first line (needs a backend that continues it)
    prefill_docstring: bool = False  # and, for a benchmark with a specification, its docstring: the body is left
    example: bool = True  # the template's worked example of a rewrite, in the answer format asked for (m tags)
    docstrings: bool = False  # show the block's docstrings
    imports: bool = True  # name the imports outside the block
    feedback: bool = True  # the evaluator's short message about the parent

    @classmethod
    def from_policy(cls, policy: BasePolicySection) -> PromptOptions:
        """What a policy's prompting settings ask for; fields a policy section does not have keep their defaults."""
        return cls(edit_format=policy.edit_format, answers=policy.answers, answer_tag=policy.answer_tag,
                   max_new_tokens_cap=policy.max_new_tokens, api=policy.api, prefill=policy.prefill,
                   prefill_docstring=policy.prefill_docstring, feedback=policy.feedback)


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]  # chat messages, system first
    prefill: str  # the start of the assistant turn; the answer continues it (pass prefill + text to edits)
    stop: tuple[str, ...]  # the completion ends before the first of these
    max_new_tokens: int  # per completion: fit to the block's length, at most answers x the per-answer cap
    # the whole text to continue, for raw-completion APIs: when set, a backend sends it as is (no chat template)
    text: str | None = None


def score_summary(program: Program) -> str:
    """'score 0.41; weakest: a 0.1, b 0.2' (objectives only when there are several)."""
    if len(program.scores) <= 1:
        return f"score {program.scalar:.4g}"
    weakest = sorted(program.scores.items(), key=lambda item: item[1])[:_WEAKEST_SHOWN]
    return f"score {program.scalar:.4g}; weakest: " + ", ".join(f"{name} {value:.3g}" for name, value in weakest)


def _block(code: str) -> str:
    """The first EVOLVE block, dedented; the whole program when it has no block."""
    try:
        return textwrap.dedent(block_body(code)).strip("\n")
    except EditError:
        return code.strip("\n")


def _tree(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def without_docstrings(block: str) -> str:
    """The block without its docstrings: a small model copies them back verbatim and spends its tokens there."""
    tree = _tree(block)
    if tree is None:
        return block
    dropped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not body or len(body) < 2:
            continue
        first, after = body[0], body[1]
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
                and first.lineno > node.lineno and after.lineno > (first.end_lineno or first.lineno)):
            dropped.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = block.split("\n")
    kept = "\n".join(line for number, line in enumerate(lines, 1) if number not in dropped)
    return kept if _tree(kept) is not None else block


def first_code_line(block: str) -> str:
    return next((line.strip() for line in block.split("\n") if line.strip()), "")


def prefill_for(parent_code: str, edit_format: Literal["rewrite", "diff"] = "rewrite", answers: int = 1,
                tag: str = "response", opening: str = "") -> str:
    """The start of the assistant turn; the policy's text continues it, so edits get prefill + text.

    For a rewrite it is `opening` when given (docstring_prefill's signature and specification), else the block's
    first code line (e.g. its `def` line), ending without a newline so that the model writes the newline and
    indentation itself (a prefill ending in "\\n" splits SmolLM2's newline-plus-indent tokens, and the model then
    leaves the body empty). For a diff it opens the first SEARCH section.
    """
    start = DIFF_PREFILL if edit_format == "diff" else opening or first_code_line(_block(parent_code))
    return f"<{tag}_1>\n{start}" if answers > 1 else start


def docstring_prefill(block: str) -> str:
    """The block from its `def` line through the end of that function's docstring (no newline after it: the model
    writes the newline and the body's indentation, as after a one-line prefill), or "" when the block does not open
    with a top-level function whose first statement is a docstring on lines of its own."""
    tree = _tree(block)
    if tree is None or not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    function = tree.body[0]
    lines = block.split("\n")
    opening = function.lineno - 1
    if (function.decorator_list or ast.get_docstring(function) is None
            or function.body[0].lineno == function.lineno or lines[opening].strip() != first_code_line(block)):
        return ""
    return "\n".join(lines[opening:function.body[0].end_lineno])


def _is_one_definition(block: str) -> bool:
    """True when the block is one function or class, so any unindented line after it is not part of the answer."""
    top_level = [line for line in block.split("\n") if line.strip() and not line[0].isspace()]
    return (len(defined_names(block)) == 1 and first_code_line(block).startswith(("def ", "async def ", "class "))
            and all(line.startswith(("def ", "async def ", "class ", ")", "#")) for line in top_level))


def token_budget(block: str, cap: int, answers: int = 1) -> int:
    """The tokens one completion of `answers` answers may generate: per answer about twice the block's length in
    tokens plus room to grow, at most `cap` (the per-answer cap), times `answers`; so an answer of an m-answer
    completion gets the tokens a one-answer completion's answer gets."""
    estimate = len(block) / _CHARS_PER_TOKEN
    return answers * max(16, min(cap, int(2 * estimate + 64)))


def _name_of(block: str) -> str:
    head = first_code_line(block)
    for keyword in ("async def ", "def ", "class "):
        if head.startswith(keyword):
            return f"`{head[len(keyword):].split('(')[0].split(':')[0].strip()}`"
    return "the code"


def _imports(code: str) -> str:
    """The imports outside the EVOLVE blocks, as a one-line reminder of what the code may use."""
    tree = _tree(code)
    block = _tree(_block(code))
    if tree is None:
        return ""
    inside = {ast.unparse(node) for node in (block.body if block else []) if isinstance(node, (ast.Import,
                                                                                             ast.ImportFrom))}
    lines = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    lines = [line for line in lines if line not in inside]
    return "; ".join(lines)


def _feedback(program: Program) -> str:
    """A short evaluator message about the parent (an error, a hint), or nothing."""
    for key in ("feedback", "error", "stderr"):
        text = " ".join(program.artifacts.get(key, "").split())
        if text:
            return text if len(text) <= FEEDBACK_CHARS else ""
    return ""


def with_docstring(block: str, docstring: str) -> str:
    """`block` with its first function's docstring replaced by `docstring` (source lines, quotes included), or put
    in after the signature where the function has none; the block unchanged when it does not parse or holds no
    function with a body on lines of its own."""
    tree = _tree(block)
    function = next((node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))),
                    None) if tree is not None else None
    if function is None or function.body[0].lineno == function.lineno:
        return block
    first = function.body[0]
    lines = block.split("\n")
    indented = textwrap.indent(docstring, " " * first.col_offset).split("\n")
    if ast.get_docstring(function) is not None:
        lines[first.lineno - 1:first.end_lineno] = indented
    else:
        lines[first.lineno - 1:first.lineno - 1] = indented
    return "\n".join(lines)


def _inspiration(request: MutationRequest, show_docstrings: bool, specification: str = "") -> dict[str, str] | None:
    """The best inspiration that beats the parent, if it is short enough to show."""
    better = [p for p in request.inspirations if p.scalar > request.parent.scalar]
    if not better:
        return None
    best = max(better, key=lambda p: p.scalar)
    block = _block(best.code) if show_docstrings else without_docstrings(_block(best.code))
    if specification:
        block = with_docstring(block, specification)
    return {"code": block, "score": score_summary(best)} if len(block) <= _INSPIRATION_CHARS else None


def _description(request: MutationRequest, shown: ProblemPrompt) -> str:
    """The problem's description on one line or as written, cut past shown.description_chars (0: never)."""
    text = request.problem_description
    if shown.description == "flattened":
        text = " ".join(text.split())
    limit = shown.description_chars
    if not limit or len(text) <= limit:
        return text
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))  # cut at a word's end; a text with no space is cut where it is
    return (cut[:space] if space > 0 else cut).rstrip() + " ..."


def _top_level_outside(code: str) -> list[tuple[ast.stmt, str]]:
    """The top-level statements outside the EVOLVE blocks, with their source as written, in file order; imports,
    the module docstring and an `if __name__ == ...` part are left out (imports are listed on their own)."""
    tree = _tree(code)
    if tree is None:
        return []
    lines = code.split("\n")
    inside = [range(start, end) for start, end in find_blocks(code)]
    kept = []
    for index, node in enumerate(tree.body):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        if any(first in span for span in inside) or isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        kept.append((node, "\n".join(lines[first:node.end_lineno or node.lineno]).rstrip()))
    return kept


def _defines(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return {name.id for target in targets if target is not None for name in ast.walk(target)
            if isinstance(name, ast.Name)}


def context_code(code: str, which: str) -> str:
    """The code outside the block that a prompt shows: "all" of it, or what the block "used" (the definitions
    whose names the block mentions, in code or docstrings, and the ones those mention in turn), as written."""
    if which == "none":
        return ""
    pieces = _top_level_outside(code)
    if which == "used":
        words = set(_WORD.findall(_block(code)))
        chosen: set[int] = set()
        grew = True
        while grew:
            grew = False
            for index, (node, source) in enumerate(pieces):
                if index not in chosen and _defines(node) & words:
                    chosen.add(index)
                    words |= set(_WORD.findall(source))
                    grew = True
        pieces = [piece for index, piece in enumerate(pieces) if index in chosen]
    return "\n\n".join(source for _, source in pieces)


def build_prompt(request: MutationRequest, options: PromptOptions = PromptOptions(),
                 template: PromptTemplate | None = None, problem: ProblemPrompt = _PROBLEM_DEFAULTS) -> Prompt:
    """Messages (and raw text, for completion APIs), prefill, stops and token budget for one mutation; `problem`
    is the problem's [prompt] settings (docstrings, description, context)."""
    template = template or load_template("default")
    parent = request.parent
    block = _block(parent.code)
    diff = options.edit_format == "diff"
    docstrings = diff or options.docstrings or problem.docstrings  # a diff's SEARCH must match the block
    shown = block if docstrings else without_docstrings(block)
    # a benchmark's specification stays in view whatever a child did to its docstring (not for a diff, whose
    # SEARCH text must match the parent as it is)
    specification = problem.specification if docstrings and not diff else ""
    if specification:
        shown = with_docstring(shown, specification)
    messages = template.messages(
        description=_description(request, problem), code=shown, target=_name_of(block), score=score_summary(parent),
        scalar=parent.scalar, scores=dict(parent.scores), imports=_imports(parent.code) if options.imports else "",
        context=context_code(parent.code, problem.context),
        inspiration=_inspiration(request, docstrings, specification),
        feedback=_feedback(parent) if options.feedback else "",
        edit_format=options.edit_format, answers=options.answers, tag=options.answer_tag,
        example=options.example and not diff,
        iteration=request.iteration, island=request.island, objectives=list(request.objective_names),
    )
    # with prefill_docstring the specification is the answer's own start: the model writes the body only
    opening = docstring_prefill(shown) if options.prefill and options.prefill_docstring and specification else ""
    prefill = prefill_for(parent.code, options.edit_format, options.answers, options.answer_tag, opening) \
        if options.prefill else ""
    stop: tuple[str, ...] = ("<|im_end|>",)
    if options.answers > 1:
        stop = (f"</{options.answer_tag}_{options.answers}>", *stop)
    elif options.prefill and not diff:  # without a prefill the answer may open with a fence or a prose line
        stop = _REWRITE_STOPS + (_TOP_LEVEL_STARTS if _is_one_definition(block) else ())
    text = template.completion_text(messages, prefill) if options.api == "completions" else None
    return Prompt(messages, prefill, stop, token_budget(shown, options.max_new_tokens_cap, options.answers), text)
