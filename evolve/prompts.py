"""Prompts a 135M model can answer: one EVOLVE-BLOCK shown, its first line prefilled, stops and a budget fit to it."""

from __future__ import annotations

import string
import textwrap
from dataclasses import dataclass
from typing import Literal

from evolve.edits import EditError, block_body, defined_names
from evolve.records import MutationRequest, Program

SYSTEM = "You are an expert Python programmer. You improve one Python function at a time."
_CHARS_PER_TOKEN = 3.0  # SmolLM2's tokenizer on indented Python, measured on the example programs
_WEAKEST_SHOWN = 3
_DESCRIPTION_CHARS = 700
_FEEDBACK_CHARS = 300
_INSPIRATION_CHARS = 600
# a line that starts at column 0 after a one-function block is never part of it: stop there
_TOP_LEVEL_STARTS = tuple("\n" + c for c in string.ascii_letters + "_#@")
_REWRITE_STOPS = ("```", "<|im_end|>", "\n\n\n", "\nif __name__", "\nprint(")


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]  # chat messages, system first
    prefill: str  # the start of the assistant turn; the answer continues it (pass prefill + text to edits)
    stop: tuple[str, ...]  # the completion ends before the first of these
    max_new_tokens: int  # fit to the block's length, at most the configured cap


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


def first_code_line(block: str) -> str:
    return next((line.strip() for line in block.split("\n") if line.strip()), "")


def rewrite_prefill(parent_code: str, answers: int = 1) -> str:
    """The assistant-turn start for a rewrite: the block's first code line (e.g. its `def` line).

    It ends without a newline so that the model writes the newline and indentation itself (a prefill ending
    in "\\n" splits SmolLM2's newline-plus-indent tokens and the model then leaves the body empty).
    """
    head = first_code_line(_block(parent_code))
    return f"<response_1>\n{head}" if answers > 1 else head


def _is_one_definition(block: str) -> bool:
    """True when the block is a single function or class, so any unindented line after it is not ours."""
    names = defined_names(block)
    lines = [line for line in block.split("\n") if line.strip() and not line[0].isspace()]
    return len(names) == 1 and first_code_line(block).startswith(("def ", "async def ", "class ")) and all(
        line.startswith(("def ", "async def ", "class ", ")", "#")) for line in lines)


def token_budget(block: str, cap: int, answers: int = 1) -> int:
    """About twice the block's length in tokens plus room to grow, per answer, at most `cap`."""
    estimate = len(block) / _CHARS_PER_TOKEN
    return max(16, min(cap, int(answers * (2 * estimate + 64))))


def _name_of(block: str) -> str:
    head = first_code_line(block)
    for keyword in ("async def ", "def ", "class "):
        if head.startswith(keyword):
            return f"`{head[len(keyword):].split('(')[0].split(':')[0].strip()}`"
    return "the code"


def _feedback(program: Program) -> str:
    """A short evaluator message about the parent (an error, a hint), or nothing."""
    for key in ("feedback", "error", "stderr"):
        text = program.artifacts.get(key, "").strip()
        if text:
            text = " ".join(text.split())
            return f"Evaluator feedback: {text[:_FEEDBACK_CHARS]}"
    return ""


def _inspiration(request: MutationRequest) -> str:
    better = [p for p in request.inspirations if p.scalar > request.parent.scalar]
    if not better:
        return ""
    best = max(better, key=lambda p: p.scalar)
    block = _block(best.code)
    if len(block) > _INSPIRATION_CHARS:
        return ""
    return f"A different version with a higher score ({score_summary(best)}):\n```python\n{block}\n```"


def _description(request: MutationRequest) -> str:
    text = " ".join(request.problem_description.split())
    return text if len(text) <= _DESCRIPTION_CHARS else text[:_DESCRIPTION_CHARS].rsplit(" ", 1)[0] + " ..."


def build_prompt(request: MutationRequest, edit_format: Literal["rewrite", "diff"] = "rewrite", answers: int = 1,
                 max_new_tokens_cap: int = 384) -> Prompt:
    """Messages, prefill, stops and token budget for one mutation of the parent's first EVOLVE block."""
    parent = request.parent
    block = _block(parent.code)
    name = _name_of(block)
    sections = [
        _description(request),
        f"Current code ({score_summary(parent)}):\n```python\n{block}\n```",
        _inspiration(request),
        _feedback(parent),
    ]
    budget = token_budget(block, max_new_tokens_cap, answers)
    if edit_format == "diff":
        sections.append(
            f"Improve {name} to get a higher score. Answer with one or more edits, each in this format:\n"
            "<<<<<<< SEARCH\n(exact lines of the current code)\n=======\n(new lines)\n>>>>>>> REPLACE")
        return Prompt(_messages(sections), "", ("<|im_end|>",), budget)
    prefill = rewrite_prefill(parent.code, answers)
    if answers == 1:
        sections.append(f"Write an improved version of {name} that gets a higher score. Reply with only the code.")
        stop = _REWRITE_STOPS + (_TOP_LEVEL_STARTS if _is_one_definition(block) else ())
    else:
        sections.append(
            f"Write {answers} different improved versions of {name}, each complete, in tags "
            f"<response_1>...</response_1> up to <response_{answers}>...</response_{answers}>.")
        stop = (f"</response_{answers}>", "<|im_end|>", "\nif __name__")
    return Prompt(_messages(sections), prefill, stop, budget)


def _messages(sections: list[str]) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "\n\n".join(section for section in sections if section)}]
