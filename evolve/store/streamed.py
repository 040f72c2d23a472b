"""ProgramStore's reads that stream a run or fetch rows by id, so that a resume and the reports of a 100,000-program
run hold a batch at a time rather than the whole run (the queries are in scans.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from evolve.records import Program, ProgramHeader
from evolve.store.choice_scans import IterationChoice, iteration_choices
from evolve.store.connection import GuardedSessions
from evolve.store.records import MAX_ID, AttemptInfo, AttemptTotals
from evolve.store.scans import (
    ancestor_ids,
    attempt_totals,
    call_completions,
    commit_order,
    commit_replay,
    parents_by_call,
    policy_calls_by_id,
    programs_by_id,
    stream_headers,
    stream_outcomes,
)


class StreamedReads:
    """Mixed into ProgramStore: its read sessions are `_sessions`."""

    _sessions: GuardedSessions

    def program_headers(self, run_id: int) -> Iterator[ProgramHeader]:
        """Every program of the run, oldest first, without code, edit or artifacts (scans.py): streamed, so a
        resume's memory does not grow with the run."""
        with self._sessions() as session:
            yield from stream_headers(session, run_id)

    def replay(self, run_id: int, with_scores: bool = True) -> Iterator[ProgramHeader | int]:
        """The run in commit order: program headers (streamed, no code; no score vectors unless `with_scores`) and,
        after each committed iteration's programs, that iteration's number: what a resume replays selection and
        migrations from."""
        with self._sessions() as session:
            order = commit_order(session, run_id)
        with self._sessions() as session:
            yield from commit_replay(stream_headers(session, run_id, with_scores), order)

    def iteration_choices(self, run_id: int) -> Iterator[IterationChoice]:
        """Each committed iteration's policy, evolved instruction, parent and best child (choice_scans.py), in commit
        order: what a resume replays an ensemble's bandit from, and what the report splits a run by."""
        with self._sessions() as session:
            yield from iteration_choices(session, run_id)

    def programs_by_id(self, ids: Iterable[int]) -> dict[int, Program]:
        """Whole programs by id (those not stored are left out)."""
        with self._sessions() as session:
            return programs_by_id(session, [one for one in ids if abs(one) <= MAX_ID])

    def lineage_programs(self, run_id: int, program_id: int) -> dict[int, Program]:
        """The program and its ancestors in the run, whole, by id (empty when the program is not in the run)."""
        if abs(run_id) > MAX_ID or abs(program_id) > MAX_ID:
            return {}
        with self._sessions() as session:
            return programs_by_id(session, ancestor_ids(session, run_id, program_id))

    def call_completions(self, run_id: int, program_ids: Iterable[int]) -> dict[int, str]:
        """program id -> the completion of the policy call that produced it, for these programs of the run."""
        with self._sessions() as session:
            return call_completions(session, run_id, program_ids)

    def outcome_batches(self, run_id: int) -> Iterator[list[AttemptInfo]]:
        """The run's answer outcomes of iterations >= 1 in write order, streamed in batches (scans.py)."""
        with self._sessions() as session:
            yield from stream_outcomes(session, run_id)

    def policy_calls_by_id(self, run_id: int, ids: Iterable[int]) -> dict[int, AttemptInfo]:
        with self._sessions() as session:
            return policy_calls_by_id(session, run_id, ids)

    def parents_by_call(self, run_id: int) -> dict[int, int]:
        """call id -> the one parent its children were edited from (scans.parents_by_call)."""
        with self._sessions() as session:
            return parents_by_call(session, run_id)

    def attempt_totals(self, run_id: int) -> AttemptTotals:
        """Calls, tokens, latencies and outcomes of the run (scans.attempt_totals), no prompt or completion read."""
        with self._sessions() as session:
            return attempt_totals(session, run_id)

