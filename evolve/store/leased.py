"""ProgramStore's run leases (lease.py holds the statements and the heartbeat, holders.py the holders' names): taking a
run's lease, taking it from a provably dead holder, renewing, releasing, and checking it in a write of the run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from evolve.store import lease as leases
from evolve.store.connection import GuardedSessions
from evolve.store.holders import holder_dead
from evolve.store.records import LeaseHeldError, LeaseInfo, LeaseLostError, RunInfo
from evolve.store.tables import LeaseRow, utc_now


class LeasedRuns:
    """Mixed into ProgramStore: `holder` names this store in leases, `_held` are the runs it drives."""

    engine: Engine
    holder: str
    _held: set[int]
    _lease_s: float
    _sessions: GuardedSessions

    if TYPE_CHECKING:  # ProgramStore's
        def get_run(self, run_id: int) -> RunInfo: ...

        def _write(self, what: str) -> AbstractContextManager[Session]: ...

    def take_lease(self, run_id: int, lease_s: float | None = None) -> None:
        """Make this store the one writer of the run (see leases.py); LeaseHeldError, one line naming the holder,
        while another process's lease is live. Taking a lease this store holds renews it."""
        lease_s = lease_s if lease_s is not None else leases.lease_seconds()
        self.get_run(run_id)  # UnknownIdError first
        now = utc_now()
        with self._write(f"the lease of run {run_id}") as session:
            if self.engine.dialect.name in leases.UPSERT_DIALECTS or session.get(LeaseRow, run_id) is None:
                session.execute(leases.ensure_row(self.engine.dialect.name, run_id))
            taken = session.execute(leases.take(run_id, self.holder, now, lease_s)).rowcount == 1
        if not taken:
            taken = self._take_from_dead(run_id, lease_s)
        if not taken:
            current = self.lease(run_id)
            holder = current.describe(utc_now()) if current else "another process"
            raise LeaseHeldError(f"run {run_id} is being driven by {holder}; one process writes a run at a time: "
                                 "wait for that one to end, or stop it (a killed one's lease lapses by itself)")
        self._lease_s = lease_s
        self._held.add(run_id)

    def _take_from_dead(self, run_id: int, lease_s: float) -> bool:
        """Take a live-looking lease whose holder is provably dead (on this host, its process gone: holders.py),
        replacing exactly that holder so that of two processes seeing it dead one wins."""
        current = self.lease(run_id)
        if current is None or not holder_dead(current.holder):
            return False
        with self._write(f"the lease of run {run_id}") as session:
            return session.execute(
                leases.take_over(run_id, current.holder, self.holder, utc_now(), lease_s)).rowcount == 1

    def renew_lease(self, run_id: int) -> bool:
        """Push the lease's expiry on; False when the lease is no longer this store's (its writes of the run then
        fail with LeaseLostError until it releases the lease)."""
        with self._write(f"the lease of run {run_id}") as session:
            return session.execute(leases.renew(run_id, self.holder, utc_now(), self._lease_s)).rowcount == 1

    def release_lease(self, run_id: int) -> None:
        """Give the run up (nothing happens if this store does not hold it)."""
        self._held.discard(run_id)
        with self._write(f"the lease of run {run_id}") as session:
            session.execute(leases.release(run_id, self.holder, utc_now()))

    def lease(self, run_id: int) -> LeaseInfo | None:
        """The run's live or lapsed lease, None when nobody has held it or it was released."""
        with self._sessions() as session:
            row = session.get(LeaseRow, run_id)
            if row is None or row.holder is None or row.renewed_at is None or row.expires_at is None:
                return None
            return LeaseInfo(run_id, row.holder, row.renewed_at, row.expires_at)

    @contextmanager
    def driving(self, run_id: int, lease_s: float | None = None) -> Iterator[None]:
        """Hold the run's lease for the block: taken on entry (LeaseHeldError if another process drives it),
        renewed every lease_s / 4 by a thread and at every commit, released on exit however the block ends."""
        self.take_lease(run_id, lease_s)
        heartbeat = leases.Heartbeat(lambda: self.renew_lease(run_id), self._lease_s / 4, f"lease-run-{run_id}")
        heartbeat.start()
        try:
            yield
        finally:
            heartbeat.stop()
            self.release_lease(run_id)

    def _check_lease(self, session: Session, run_id: int) -> None:
        """Inside a write of a run this store drives: renew the lease, or LeaseLostError (the write is rolled back)
        when another process took the run after this one's lease lapsed."""
        if run_id in self._held and session.execute(
                leases.renew(run_id, self.holder, utc_now(), self._lease_s)).rowcount != 1:
            taker = self.lease(run_id)
            raise LeaseLostError(f"run {run_id} was taken over by {taker.process if taker else 'another process'} "
                                 "after this process's lease lapsed; this process stopped writing it")
