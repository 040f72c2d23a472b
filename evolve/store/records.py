"""The store's records and errors: what its methods take (AttemptRecord, ChildRecord) and give back (RunInfo,
CellInfo, AttemptInfo, IterationCost, LeaseInfo), the kinds and statuses it accepts, and StoreError (one line)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, get_args

from evolve.errors import UserError
from evolve.records import AttemptKind
from evolve.store.holders import holder_dead

RunStatus = Literal["running", "finished", "failed", "interrupted"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
OpenMode = Literal["create", "existing", "read"]
MAX_ID = 2**63 - 1  # ids are signed 64-bit integers: a larger one (a URL's, a flag's) names no row
TERMINAL_KINDS: tuple[str, ...] = get_args(AttemptKind)  # an iteration with one of these is complete
FAILURE_KINDS: tuple[str, ...] = tuple(kind for kind in TERMINAL_KINDS if kind != "child")
ATTEMPT_KINDS: tuple[str, ...] = ("policy_call", *TERMINAL_KINDS)


class StoreError(UserError):
    """A store problem the user can act on (unknown run, unwritable or locked database), worded as one line."""


class UnknownIdError(StoreError, KeyError):
    """No run or program with that id; a KeyError too, so lookups can be caught either way (UserError's str keeps
    KeyError from quoting the message)."""


@dataclass(frozen=True)
class RunInfo:
    id: int
    name: str
    problem: str
    policy: str
    seed: int
    config_json: str
    status: str
    iterations_target: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class CellInfo:
    """One cell of an experiment: the run that evolves `problem` with `policy` from `seed`."""

    run_id: int
    experiment: str
    problem: str
    policy: str
    seed: int


@dataclass(frozen=True)
class AttemptInfo:
    """One stored attempts row."""

    id: int
    run_id: int
    iteration: int
    kind: str
    reason: str | None
    policy: str
    prompt: str | None
    completion: str | None
    child_code: str | None
    program_id: int | None
    call_id: int | None
    parent_id: int | None
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    created_at: datetime
    run_elapsed_s: float | None = None  # the run's active wall clock at the commit; None in stores from before


@dataclass(frozen=True)
class IterationCost:
    """What one committed iteration spent."""

    iteration: int
    policy_calls: int  # requests that returned a completion
    policy_errors: int  # requests that failed
    evaluations: int  # children sent to the evaluator (valid children + eval_failed), not duplicates/edit failures
    completion_tokens: int  # generated tokens, summed over the iteration's calls
    prompt_tokens: int
    elapsed_s: float | None  # the run's active wall clock (seconds since the run started, excluding time it lay
    # killed) when this iteration was committed; None for iterations stored before this column


@dataclass(frozen=True)
class AttemptTotals:
    """A run's attempts summed up (ProgramStore.attempt_totals), read as a stream rather than as AttemptInfos."""

    policy_calls: int
    prompt_tokens: int  # of the policy calls
    completion_tokens: int
    generation_s: float  # the calls' latencies summed in write order
    outcomes: dict[str, int]  # outcomes of iterations >= 1 by kind, every TERMINAL_KINDS kind present
    iterations_with_child: int  # iterations >= 1 with at least one 'child' row


@dataclass(frozen=True)
class AttemptRecord:
    """An attempt to write: a policy call, or an answer's outcome that did not become a program."""

    kind: str  # 'policy_call' or an AttemptKind other than 'child' (children are ChildRecords)
    reason: str | None = None
    prompt: str | None = None
    completion: str | None = None
    child_code: str | None = None  # the built code of a duplicate or a failed evaluation, if any
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ATTEMPT_KINDS or self.kind == "child":
            allowed = ", ".join(kind for kind in ATTEMPT_KINDS if kind != "child")
            raise ValueError(f"attempt kind {self.kind!r} is not one of {allowed} (a child is a ChildRecord)")


@dataclass(frozen=True)
class ChildRecord:
    """A scored program to write, with its 'child' attempt."""

    code: str
    parent_id: int | None
    island: int
    policy: str  # "" for the seed
    edit: str  # the answer text that produced it
    scores: dict[str, float]
    scalar: float
    solved: bool
    artifacts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if math.isnan(self.scalar):
            raise ValueError("a child's scalar is NaN")

    @property
    def kind(self) -> str:
        return "child"


class LeaseHeldError(StoreError):
    """Another live process drives the run: its lease has not expired."""


class LeaseLostError(StoreError):
    """This process's lease on a run lapsed and another process took the run; this one must stop writing it."""


@dataclass(frozen=True)
class LeaseInfo:
    """Who drives a run: `holder` is host:pid:token, renewed at `renewed_at`, void after `expires_at` (UTC)."""

    run_id: int
    holder: str
    renewed_at: datetime
    expires_at: datetime

    @property
    def process(self) -> str:
        """host:pid, without the random token that tells two stores of one process apart."""
        return self.holder.rsplit(":", 1)[0]

    def live(self, now: datetime) -> bool:
        """Unexpired, and its holder not provably dead (a process of this host that is gone: holders.py)."""
        return self.expires_at >= now and not holder_dead(self.holder)

    def describe(self, now: datetime) -> str:
        renewed = max(0.0, (now - self.renewed_at).total_seconds())
        expires = max(0.0, (self.expires_at - now).total_seconds())
        return f"{self.process} (lease renewed {renewed:.0f} s ago, expires in {expires:.0f} s)"
