"""Run leases: at most one process drives (writes) a run at a time, on SQLite and PostgreSQL alike.

A lease is a run_leases row: holder (host:pid:random token;start=...;pidns=..., holders.py), renewed_at and
expires_at, all from the holder's clock in UTC. Taking it is one conditional UPDATE (`... WHERE run_id = ? AND
(holder IS NULL OR expires_at < now OR holder = me)`) whose row count says who won, so two processes racing for a
run cannot both get it. The holder renews it every lease_s / 4 seconds from a thread (an iteration may take longer
than the lease) and with every iteration it commits; a process killed with -9 stops renewing, so after lease_s its
run can be taken over by a process on another host. A holder that is provably dead (on this host, and its pid gone
or reused: holders.holder_dead) is free at once: `take_over` replaces exactly that holder, so two processes seeing
it dead still cannot both win.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from sqlalchemy import Insert, Update, insert, or_, update
from sqlalchemy.dialects import postgresql, sqlite

from evolve.store.records import StoreError
from evolve.store.tables import LeaseRow

DEFAULT_LEASE_S = 30.0
LEASE_ENV = "EVOLVE_LEASE_S"  # seconds a lease lasts without renewal; tests make it short
UPSERT_DIALECTS = ("sqlite", "postgresql")  # INSERT ... ON CONFLICT DO NOTHING


def lease_seconds(environ: Mapping[str, str] = os.environ) -> float:
    """How long a lease lasts unrenewed: EVOLVE_LEASE_S, else 30 s."""
    raw = environ.get(LEASE_ENV, "").strip()
    if not raw:
        return DEFAULT_LEASE_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0.5 <= seconds <= 86_400:
        raise StoreError(f"{LEASE_ENV}={raw!r}: write the lease's length in seconds, from 0.5 to 86400")
    return seconds


def ensure_row(dialect: str, run_id: int) -> Insert:
    """An empty lease row for the run unless it has one (INSERT ... ON CONFLICT DO NOTHING)."""
    if dialect == "sqlite":
        return sqlite.insert(LeaseRow).values(run_id=run_id).on_conflict_do_nothing(index_elements=["run_id"])
    if dialect == "postgresql":
        return postgresql.insert(LeaseRow).values(run_id=run_id).on_conflict_do_nothing(index_elements=["run_id"])
    return insert(LeaseRow).values(run_id=run_id)  # elsewhere a duplicate raises; the caller checks first


def take(run_id: int, holder: str, now: datetime, lease_s: float) -> Update:
    """The lease for `holder` if nobody holds it, it expired, or `holder` has it already; one row updated or none."""
    return (update(LeaseRow)
            .where(LeaseRow.run_id == run_id,
                   or_(LeaseRow.holder.is_(None), LeaseRow.expires_at < now, LeaseRow.holder == holder))
            .values(holder=holder, renewed_at=now, expires_at=now + timedelta(seconds=lease_s)))


def take_over(run_id: int, dead: str, holder: str, now: datetime, lease_s: float) -> Update:
    """The lease for `holder` if it is still held by `dead` (a holder found dead); one row updated or none."""
    return (update(LeaseRow).where(LeaseRow.run_id == run_id, LeaseRow.holder == dead)
            .values(holder=holder, renewed_at=now, expires_at=now + timedelta(seconds=lease_s)))


def renew(run_id: int, holder: str, now: datetime, lease_s: float) -> Update:
    """A later expiry for `holder`'s lease; no row updated when another process took the run."""
    return (update(LeaseRow).where(LeaseRow.run_id == run_id, LeaseRow.holder == holder)
            .values(renewed_at=now, expires_at=now + timedelta(seconds=lease_s)))


def release(run_id: int, holder: str, now: datetime) -> Update:
    return (update(LeaseRow).where(LeaseRow.run_id == run_id, LeaseRow.holder == holder)
            .values(holder=None, renewed_at=now, expires_at=None))


class Heartbeat:
    """A daemon thread calling `renew` every `every_s` seconds until stopped, or until `renew` returns False (the
    lease was lost; the next commit of the run then fails with LeaseLostError). A store error (a locked database)
    is retried at the next beat."""

    def __init__(self, renew_lease: Callable[[], bool], every_s: float, name: str) -> None:
        self._renew, self._every_s = renew_lease, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=name, daemon=True)
        self.lost = False

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                if not self._renew():
                    self.lost = True
                    return
            except StoreError:
                continue
