"""Plain records that flow through the engine: programs, evaluations, attempts, mutation requests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

FailureKind = Literal[
    "timeout",  # the candidate ran past its wall-clock or CPU limit
    "memory",  # the candidate ran past its memory cap
    "crash",  # the candidate raised, exited, or died on a signal
    "bad_output",  # the candidate's output was missing, too large, or not what the evaluator needs
    "evaluator_error",  # the trusted evaluator itself raised or returned something invalid
]

AttemptKind = Literal[
    "child",  # an answer became a child program that was evaluated and stored
    "policy_error",  # the policy call failed (server down, model error)
    "edit_failed",  # the completion could not be turned into a program
    "duplicate",  # the child's code equals its parent's or another answer's
    "eval_failed",  # the child was built but its evaluation failed
]


@dataclass(frozen=True)
class Evaluation:
    """What the trusted evaluator said about one program."""

    ok: bool
    scores: dict[str, float] = field(default_factory=dict)  # objective name -> value
    failure: FailureKind | None = None
    detail: str = ""  # the reason or feedback text, short
    artifacts: dict[str, str] = field(default_factory=dict)  # e.g. stderr, feedback for the next prompt
    wall_s: float = 0.0


@dataclass(frozen=True)
class Program:
    """A scored program in the store. Only programs whose evaluation succeeded are Programs."""

    id: int
    run_id: int
    code: str
    parent_id: int | None
    island: int
    iteration: int  # 0 for the seed program
    policy: str  # policy name, "" for the seed
    edit: str  # the answer text that produced it from its parent ("" for the seed)
    scores: dict[str, float]
    scalar: float  # the problem's reduction of `scores`, used for ranking
    solved: bool
    artifacts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProgramHeader(Program):
    """A stored program read without its code, edit and artifacts (code, edit "" and artifacts {}; scores {} too
    when its reader ranks by scalar alone): what a resume replays selection with. `code_length` and `code_key`
    stand for len(code) and code_key(code); the programs selection keeps are read whole afterwards
    (Selector.materialize)."""

    code_length: int = 0
    code_key: str = ""


def code_key(code: str) -> str:
    """The identity of a program's code for duplicate checks and caches (surrounding whitespace ignored)."""
    return hashlib.sha1(code.strip().encode()).hexdigest()


def code_length_of(program: Program) -> int:
    """len(program.code), also for a ProgramHeader (which holds the length, not the code)."""
    return program.code_length if isinstance(program, ProgramHeader) else len(program.code)


def code_key_of(program: Program) -> str:
    """code_key(program.code), also for a ProgramHeader (which holds the key, not the code)."""
    return program.code_key if isinstance(program, ProgramHeader) else code_key(program.code)


@dataclass(frozen=True)
class MutationRequest:
    """Everything the prompt builder needs for one iteration."""

    iteration: int
    island: int
    parent: Program
    inspirations: tuple[Program, ...]
    problem_description: str
    objective_names: tuple[str, ...]


@dataclass(frozen=True)
class Completion:
    """One policy reply."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = ""
