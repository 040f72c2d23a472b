"""ProgramStore's reads of one run's scores and attempts: the score timeline and vectors the reports re-derive, the
attempts by kind and failure, which iterations are complete, each iteration's cost, the run's active clock and when
its requests were in flight."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from sqlalchemy import case, func, select

from evolve.store.connection import GuardedSessions
from evolve.store.records import FAILURE_KINDS, TERMINAL_KINDS, AttemptInfo, IterationCost
from evolve.store.rows import frozen, score_vector
from evolve.store.scans import STREAM_BATCH
from evolve.store.tables import AttemptRow, ProgramRow, ScoreRow

IN_BATCH = 500  # run ids per IN (...) list: under the 999 bound variables of older SQLite builds


class RunReads:
    """Mixed into ProgramStore: its read sessions are `_sessions`."""

    _sessions: GuardedSessions

    def score_timeline(self, run_id: int) -> list[tuple[int, float, bool]]:
        """(iteration, scalar, solved) of every program of the run, by iteration: enough for best@k and pass@k."""
        with self._sessions() as session:
            query = (select(ProgramRow.iteration, ScoreRow.scalar, ScoreRow.solved)
                     .join(ScoreRow, ScoreRow.program_id == ProgramRow.id)
                     .where(ProgramRow.run_id == run_id).order_by(ProgramRow.iteration, ProgramRow.id))
            return [(iteration, float(scalar), bool(solved)) for iteration, scalar, solved in session.execute(query)]

    def score_vectors(self, run_id: int) -> Iterator[tuple[int, dict[str, float], float, bool]]:
        """(iteration, score vector, stored scalar, stored solved) of every program of the run, by iteration: what a
        report needs to re-derive scalar and solved under a problem's current rule. Streamed: iterate it once."""
        with self._sessions() as session:
            query = (select(ProgramRow.iteration, ScoreRow.vector_json, ScoreRow.scalar, ScoreRow.solved,
                            ProgramRow.id)
                     .join(ScoreRow, ScoreRow.program_id == ProgramRow.id)
                     .where(ProgramRow.run_id == run_id).order_by(ProgramRow.iteration, ProgramRow.id)
                     .execution_options(yield_per=STREAM_BATCH))
            for iteration, vector, scalar, solved, program_id in session.execute(query):
                yield iteration, score_vector(vector, program_id), float(scalar), bool(solved)

    def attempt_counts(self, run_id: int) -> dict[str, int]:
        """Attempts rows of the run by kind ('policy_call', 'child', 'policy_error', ...)."""
        with self._sessions() as session:
            query = select(AttemptRow.kind, func.count()).where(AttemptRow.run_id == run_id).group_by(AttemptRow.kind)
            return {kind: int(count) for kind, count in session.execute(query)}

    def completed_iterations(self, run_id: int) -> set[int]:
        """Iterations with at least one terminal attempt (TERMINAL_KINDS)."""
        with self._sessions() as session:
            query = select(AttemptRow.iteration).distinct().where(
                AttemptRow.run_id == run_id, AttemptRow.kind.in_(TERMINAL_KINDS))
            return set(session.scalars(query))

    def failure_counts(self, run_id: int) -> dict[str, int]:
        """Failed answers by 'kind: reason head' (the reason up to its first ':'), or 'kind' alone, most first."""
        with self._sessions() as session:
            rows = session.execute(select(AttemptRow.kind, AttemptRow.reason).where(
                AttemptRow.run_id == run_id, AttemptRow.kind.in_(FAILURE_KINDS)).order_by(AttemptRow.id))
            counts = Counter(f"{kind}: {reason.split(':')[0].strip()}" if reason else kind for kind, reason in rows)
            return dict(counts.most_common())

    def attempts(self, run_id: int) -> list[AttemptInfo]:
        """Every attempts row of the run, in write order."""
        with self._sessions() as session:
            rows = session.scalars(select(AttemptRow).where(AttemptRow.run_id == run_id).order_by(AttemptRow.id))
            return [frozen(AttemptInfo, row) for row in rows]

    def iteration_costs(self, run_id: int) -> list[IterationCost]:
        """What each committed iteration >= 1 spent (calls, errors, evaluations, tokens, active wall clock)."""
        calls = func.sum(case((AttemptRow.kind == "policy_call", 1), else_=0))
        errors = func.sum(case((AttemptRow.kind == "policy_error", 1), else_=0))
        evaluations = func.sum(case((AttemptRow.kind.in_(("child", "eval_failed")), 1), else_=0))
        query = (select(AttemptRow.iteration, calls, errors, evaluations, func.sum(AttemptRow.completion_tokens),
                        func.sum(AttemptRow.prompt_tokens), func.max(AttemptRow.run_elapsed_s))
                 .where(AttemptRow.run_id == run_id, AttemptRow.iteration >= 1)
                 .group_by(AttemptRow.iteration).order_by(AttemptRow.iteration))
        with self._sessions() as session:
            return [IterationCost(iteration=int(it), policy_calls=int(c or 0), policy_errors=int(e or 0),
                                  evaluations=int(n or 0), completion_tokens=int(ct or 0), prompt_tokens=int(pt or 0),
                                  elapsed_s=float(el) if el is not None else None)
                    for it, c, e, n, ct, pt, el in session.execute(query)]

    def run_elapsed_s(self, run_id: int) -> float:
        """The largest active wall clock stored for the run (0 if none): where a resumed run's clock continues."""
        with self._sessions() as session:
            query = select(func.max(AttemptRow.run_elapsed_s)).where(AttemptRow.run_id == run_id)
            return float(session.scalar(query) or 0.0)

    def runs_call_spans(self, run_ids: Iterable[int]) -> dict[int, list[tuple[float, float]]]:
        """When each of many runs had a policy request in flight: run id -> (start, end) in POSIX seconds of each
        stored request, answered or failed (end: when its iteration was stored; start: that less its latency)."""
        wanted = sorted(set(run_ids))
        spans: dict[int, list[tuple[float, float]]] = {run_id: [] for run_id in wanted}
        with self._sessions() as session:
            for start in range(0, len(wanted), IN_BATCH):
                query = (select(AttemptRow.run_id, AttemptRow.created_at, AttemptRow.latency_s)
                         .where(AttemptRow.run_id.in_(wanted[start:start + IN_BATCH]),
                                AttemptRow.kind.in_(("policy_call", "policy_error"))))
                for run_id, created_at, latency_s in session.execute(query):
                    end = created_at.timestamp()
                    spans[run_id].append((end - latency_s, end))
        return spans
