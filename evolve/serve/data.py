"""The store read for the web view, as JSON-ready dicts: runs and experiments, a run's tree a page of programs at a
time after a known id, and one program whole (code, diff against its parent, the prompt and completion that made
it, score vector and feedback). Reads only; every error is a StoreError line (UnknownIdError: an unknown id)."""

from __future__ import annotations

import difflib
import json
import threading
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import sessionmaker

from evolve.records import Program
from evolve.store.connection import GuardedSessions, store_name
from evolve.store.program_store import FAILURE_KINDS, TERMINAL_KINDS, ProgramStore, RunInfo, StoreError, UnknownIdError
from evolve.store.tables import AttemptRow, CellRow, ExperimentRow, ProgramRow, ScoreRow, utc_now

TREE_PAGE = 2000  # programs per tree poll at most: a poll after a long absence takes several pages, never the run


class StoreView:
    """Read-only queries of one store for the web view (one per app; thread-safe, as the engine's pool is)."""

    def __init__(self, store: ProgramStore) -> None:
        self.store = store
        self._sessions = GuardedSessions(sessionmaker(store.engine), store_name(store.url))
        self._lock = threading.Lock()  # requests are served from a thread pool
        self._counts: dict[int, tuple[tuple[object, ...], dict[str, Any]]] = {}  # run id -> (its state, counts)

    def run_status(self, run: RunInfo) -> str:
        """A "running" run whose lease has lapsed (its driver died) reads "killed", as `evolve runs` lists it."""
        if run.status != "running":
            return run.status
        try:
            lease = self.store.lease(run.id)
        except StoreError:  # a store written before run leases existed
            return run.status
        return "running" if lease is not None and lease.live(utc_now()) else "killed"

    def _run_counts(self, run: RunInfo) -> dict[str, Any]:
        """Iterations done (>= 1, with an outcome), programs, best scalar and solved programs of the run. Kept until
        the run changes (its updated_at, which every commit moves, or a newer program): a poll of a finished run or
        a run between commits costs one indexed lookup, not a scan of its attempts."""
        with self._sessions() as session:
            newest = session.scalar(select(func.max(ProgramRow.id)).where(ProgramRow.run_id == run.id))
        key = (run.updated_at, run.status, newest)
        with self._lock:
            cached = self._counts.get(run.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        with self._sessions() as session:
            done = session.scalar(select(func.count(func.distinct(AttemptRow.iteration))).where(
                AttemptRow.run_id == run.id, AttemptRow.iteration >= 1, AttemptRow.kind.in_(TERMINAL_KINDS)))
            programs, best, solved = session.execute(
                select(func.count(), func.max(ScoreRow.scalar), func.sum(case((ScoreRow.solved.is_(True), 1), else_=0)))
                .where(ScoreRow.run_id == run.id)).one()
            best_id = session.scalar(select(ScoreRow.program_id).where(ScoreRow.run_id == run.id)
                                     .order_by(ScoreRow.scalar.desc(), ScoreRow.program_id).limit(1))
        failed = {kind: count for kind, count in sorted(self.store.attempt_counts(run.id).items())
                  if kind in FAILURE_KINDS and count}  # one GROUP BY on the (run, kind) index
        counts = {"iterations_done": int(done or 0), "programs": int(programs or 0), "failed": failed,
                  "best": float(best) if best is not None else None, "best_id": best_id,
                  "best_number": self._number(run.id, best_id) if best_id is not None else None,
                  "solved_programs": int(solved or 0)}
        with self._lock:
            self._counts[run.id] = (key, counts)
        return counts

    def _number(self, run_id: int, program_id: int) -> int:
        """The program's number within its run (RUN:N, as the CLI names programs)."""
        with self._sessions() as session:
            return int(session.scalar(select(func.count()).select_from(ProgramRow).where(
                ProgramRow.run_id == run_id, ProgramRow.id <= program_id)) or 0)

    def _experiment_of(self, run_id: int) -> str | None:
        with self._sessions() as session:
            return session.scalar(select(CellRow.experiment).where(CellRow.run_id == run_id))

    def run_json(self, run: RunInfo) -> dict[str, Any]:
        return {"id": run.id, "name": run.name, "problem": run.problem, "policy": run.policy, "seed": run.seed,
                "status": self.run_status(run), "iterations_target": run.iterations_target,
                "created_at": run.created_at.replace(microsecond=0).isoformat(),
                "updated_at": run.updated_at.replace(microsecond=0).isoformat(),
                "experiment": self._experiment_of(run.id),
                "stop_reason": self.store.stop_reason(run.id) if run.status != "finished" else None,
                **self._run_counts(run)}

    def runs(self) -> list[dict[str, Any]]:
        """Every run of the store, newest first."""
        return [self.run_json(run) for run in reversed(self.store.list_runs())]

    def run(self, run_id: int) -> dict[str, Any]:
        """One run's header and counts (UnknownIdError for an unknown id)."""
        run = self.store.get_run(run_id)
        return self.run_json(run) | {"islands": _islands(run.config_json)}

    def experiments(self) -> list[dict[str, Any]]:
        """Every saved experiment with its description and cells (run id, problem, policy, seed)."""
        with self._sessions() as session:
            rows = list(session.execute(select(ExperimentRow.name, ExperimentRow.spec_json)
                                        .order_by(ExperimentRow.created_at)))
        found = []
        for name, spec_json in rows:
            try:
                spec = json.loads(spec_json)
                spec.get("description")
            except (ValueError, AttributeError) as exc:
                raise StoreError(f"cannot read {store_name(self.store.url)}: experiments.spec_json of row {name!r} is "
                                 "damaged: it is not a JSON object") from exc
            cells = [{"run": cell.run_id, "problem": cell.problem, "policy": cell.policy, "seed": cell.seed}
                     for cell in self.store.experiment_cells(name)]
            found.append({"name": name, "description": spec.get("description", ""),
                          "problems": spec.get("problems", []), "policies": [p.get("name") for p in
                                                                             spec.get("policies", [])],
                          "seeds": spec.get("seeds", []), "iterations": spec.get("iterations"), "cells": cells})
        return found

    def experiment_spec(self, name: str) -> str:
        spec = self.store.experiment_spec(name)
        if spec is None:
            raise UnknownIdError(f"no experiment '{name}' in this store")
        return spec

    def tree(self, run_id: int, since: int, limit: int = TREE_PAGE) -> dict[str, Any]:
        """The run's programs with id > `since`, oldest first, at most `limit` (`more`: ask again at once), each
        as {id, parent, island, iteration, scalar, solved}; with the run's status and counts, for a live view."""
        header = self.run(run_id)
        query = (select(ProgramRow.id, ProgramRow.parent_id, ProgramRow.island, ProgramRow.iteration, ScoreRow.scalar,
                        ScoreRow.solved)
                 .join(ScoreRow, ScoreRow.program_id == ProgramRow.id)
                 .where(ProgramRow.run_id == run_id, ProgramRow.id > since).order_by(ProgramRow.id).limit(limit))
        with self._sessions() as session:
            nodes = [{"id": pid, "parent": parent, "island": island, "iteration": iteration, "scalar": float(scalar),
                      "solved": bool(solved)} for pid, parent, island, iteration, scalar, solved in
                     session.execute(query)]
        return {"run": header, "nodes": nodes, "last": nodes[-1]["id"] if nodes else since,
                "more": len(nodes) == limit}

    def check_program(self, run_id: int, program_id: int) -> Program:
        """The program, when the run has it; else UnknownIdError naming what is missing (the run, or the program)."""
        self.store.get_run(run_id)
        found = self.store.programs_by_id([program_id]).get(program_id)
        if found is None or found.run_id != run_id:
            raise UnknownIdError(f"no program {program_id} in run {run_id}")
        return found

    def program(self, run_id: int, program_id: int) -> dict[str, Any]:
        """One program of the run whole: code, unified diff against its parent (server-side), the prompt and the
        whole completion of the policy call that made it, the answer used, its score vector and artifacts. Not its
        children: programs.parent_id has no index, so finding them would scan the run (the tree page knows them)."""
        found = self.check_program(run_id, program_id)
        parent = self.store.programs_by_id([found.parent_id]).get(found.parent_id) if found.parent_id else None
        number = self._number(run_id, program_id)
        parent_number = self._number(run_id, parent.id) if parent is not None else None
        diff = ""
        if parent is not None:
            diff = "\n".join(difflib.unified_diff(parent.code.splitlines(), found.code.splitlines(),
                                                  fromfile=f"{run_id}:{parent_number} (parent)",
                                                  tofile=f"{run_id}:{number}", lineterm=""))
        with self._sessions() as session:
            call_id = session.scalar(select(ProgramRow.completion_id).where(ProgramRow.id == program_id))
            call = session.execute(select(AttemptRow.prompt, AttemptRow.completion, AttemptRow.latency_s,
                                          AttemptRow.prompt_tokens, AttemptRow.completion_tokens)
                                   .where(AttemptRow.id == call_id, AttemptRow.kind == "policy_call")).first() \
                if call_id is not None else None
        return {
            "id": found.id, "number": number, "run": run_id, "parent": found.parent_id, "parent_number": parent_number,
            "island": found.island, "iteration": found.iteration, "policy": found.policy, "scalar": found.scalar,
            "solved": found.solved,
            "scores": found.scores, "artifacts": found.artifacts, "code": found.code, "edit": found.edit,
            "diff": diff, "parent_scores": parent.scores if parent else None,
            "parent_scalar": parent.scalar if parent else None,
            "prompt": call.prompt if call else None, "completion": call.completion if call else None,
            "call": {"latency_s": call.latency_s, "prompt_tokens": call.prompt_tokens,
                     "completion_tokens": call.completion_tokens} if call else None,
        }


def _islands(config_json: str) -> int:
    """The islands of a stored run config, for the tree's layout; 1 when the stored config is damaged or lacks them."""
    try:
        selection = json.loads(config_json).get("selection", {})
        islands = selection.get("islands", 1)
    except (ValueError, AttributeError):
        return 1
    return islands if type(islands) is int and 1 <= islands <= 1000 else 1
