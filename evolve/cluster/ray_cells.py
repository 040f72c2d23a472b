"""An experiment's cells as Ray tasks: one task per unfinished cell, placed by its resource request, re-run on
another node (from its last committed iteration) when its node dies.

The driver (`evolve experiment FILE --cluster ray`) connects to the cluster named by RAY_ADDRESS, or starts a
local one, and submits every unfinished cell at once; Ray runs as many as the cluster's CPUs and GPUs allow. A
cell's task opens the experiment's store itself, opens the policy, runs its own evaluator pool and drives the
cell under the run lease, exactly as the one-process path does. When its worker or node dies, Ray runs the task
again (max_retries) on a live node: the new attempt waits for the dead holder's lease to lapse, then resumes the
run from its last committed iteration (iterations are committed whole), so no iteration is lost or doubled.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.exceptions import RayError

from evolve.cluster.placement import (
    ClusterError,
    cell_resources,
    policy_for_cell,
    refuse_sqlite_across_hosts,
    refuse_unplaceable,
)
from evolve.engine.experiment import CellProgress, ExperimentOutcome, ExperimentRunner
from evolve.engine.experiment_spec import CellKey, ExperimentSpec
from evolve.engine.run_stats import RunStats
from evolve.store.program_store import ProgramStore
from evolve.store.tables import utc_now

CELL_RETRIES = 3  # re-runs of a cell whose worker or node died (a cell that fails by itself is not re-run)
POLL_S = 1.0  # how often the driver reads the cells' progress from the store
CANCEL_WAIT_S = 60.0  # after a Ctrl-C, how long a cancelled cell has to write its status and report
LEASE_MARGIN_S = 0.5  # past a dead holder's lease expiry before taking the run


@dataclass(frozen=True)
class CellReport:
    """What a cell's task sends back: its resting status, where it ran, and the errors it met."""

    key: CellKey
    status: str
    detail: str
    run_id: int | None
    stats: RunStats | None
    errors: tuple[str, ...]
    interrupted: bool
    node_id: str
    pid: int


PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the evolve package this process imported


@contextlib.contextmanager
def working_directory(folder: str) -> Iterator[None]:
    """Run in the driver's folder where this node has it, so the experiment's relative paths (programs_dir, a
    SQLite file) mean what they mean to the driver; elsewhere relative paths are the node's own."""
    before = os.getcwd()
    if Path(folder).is_dir():
        os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def connect_ray(address: str | None) -> None:
    """ray.init from the folder this evolve is imported from: Ray puts the driver's working directory on every
    worker's sys.path ahead of site-packages, so from the user's folder a folder `evolve/` there would be the package
    the cells import. (Not a temporary folder: a local cluster's workers start in the driver's folder of this moment,
    and one removed since fails their os.getcwd().)"""
    with working_directory(str(PACKAGE_ROOT)):
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False, configure_logging=False)


def wait_for_dead_holder(store: ProgramStore, run_id: int) -> None:
    """Sleep until the run's lease as seen now has expired: a re-run of a cell whose node died finds the dead
    process's lease live for up to EVOLVE_LEASE_S. A live holder renews it meanwhile, and `driving` then refuses
    the run in one line."""
    seen = store.lease(run_id)
    if seen is None:
        return
    remaining = (seen.expires_at - utc_now()).total_seconds()
    if remaining < 0:
        return
    time.sleep(remaining + LEASE_MARGIN_S)


def run_cell(spec_json: str, workdir: str, key: CellKey) -> CellReport:
    """One cell, in a Ray worker: its run found or created in the store, driven to a resting status."""
    context = ray.get_runtime_context()
    with working_directory(workdir):
        spec = ExperimentSpec.model_validate_json(spec_json)
        runner = ExperimentRunner(spec)
        try:
            runner.load_stored_cells()
            cell = runner.cells[key]
            outcome = ExperimentOutcome({key: cell})
            if cell.status != "finished":
                if cell.run_id is not None:
                    wait_for_dead_holder(runner.store, cell.run_id)
                cpus = context.get_assigned_resources().get("CPU", 1.0)
                runner.run_policy_cells(policy_for_cell(spec.policy(key[1]), cpus), [cell], outcome)
        finally:
            runner.store.close()
    return CellReport(key=key, status=cell.status, detail=cell.detail, run_id=cell.run_id, stats=cell.stats,
                      errors=tuple(outcome.errors), interrupted=outcome.interrupted, node_id=context.get_node_id(),
                      pid=os.getpid())


class RayCellExecutor:
    """Runs an experiment's unfinished cells as Ray tasks (ExperimentRunner's CellExecutor)."""

    def __init__(self, address: str | None = None, retries: int = CELL_RETRIES) -> None:
        self.address = address if address is not None else os.environ.get("RAY_ADDRESS", "")
        self.retries = retries
        self.reports: list[CellReport] = []  # every finished task's report, in the order they came back

    def run_cells(self, runner: ExperimentRunner, todo: list[CellProgress], outcome: ExperimentOutcome) -> None:
        started_here = not ray.is_initialized()
        if started_here:
            self._connect()
        try:
            refuse_sqlite_across_hosts(runner.spec.db, node_hosts())
            refuse_unplaceable({cell.key[1]: cell_resources(runner.spec, cell.key[1]) for cell in todo},
                               [node["Resources"] for node in ray.nodes() if node.get("Alive")])
            self._run(runner, todo, outcome)
        finally:
            if started_here:
                ray.shutdown()

    def _connect(self) -> None:
        if self.address:
            refuse_unreachable(self.address)
        try:
            connect_ray(self.address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray cluster"
            raise ClusterError(f"cannot reach {where}: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None

    def _run(self, runner: ExperimentRunner, todo: list[CellProgress], outcome: ExperimentOutcome) -> None:
        spec_json = runner.spec.model_dump_json()
        workdir = os.getcwd()
        pending: dict[ray.ObjectRef, CellProgress] = {}
        remote_cell = ray.remote(run_cell)
        for cell in todo:
            resources = cell_resources(runner.spec, cell.key[1])
            task = remote_cell.options(
                num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=self.retries, retry_exceptions=False,
                name=f"evolve cell {'/'.join(map(str, cell.key))}")
            pending[task.remote(spec_json, workdir, cell.key)] = cell
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                for ref in done:
                    self._settle(runner, pending.pop(ref), ref, outcome)
                self._show_progress(runner, list(pending.values()))
        except KeyboardInterrupt:
            outcome.interrupted = True
            for ref in pending:
                ray.cancel(ref)
            for ref, cell in pending.items():
                with contextlib.suppress(KeyboardInterrupt):
                    self._settle(runner, cell, ref, outcome, interrupted=True)

    def _settle(self, runner: ExperimentRunner, cell: CellProgress, ref: ray.ObjectRef, outcome: ExperimentOutcome,
                interrupted: bool = False) -> None:
        """Take a cell's report into its progress; after a Ctrl-C, a task cancelled before it reported is
        interrupted, not failed."""
        try:
            report: CellReport = ray.get(ref, timeout=CANCEL_WAIT_S if interrupted else None)
        except RayError as exc:
            if interrupted:
                cell.status, cell.detail = "interrupted", ""
                runner.on_change(cell)
                return
            lines = [line for line in str(exc).splitlines() if line.strip()]
            cell.status, cell.detail = "failed", f"its Ray task failed: {lines[-1] if lines else type(exc).__name__}"
            outcome.errors.append(f"{'/'.join(map(str, cell.key))}: {cell.detail}")
            runner.on_change(cell)
            return
        self.reports.append(report)
        cell.status, cell.detail, cell.run_id = report.status, report.detail, report.run_id
        cell.stats = report.stats or cell.stats
        outcome.errors.extend(report.errors)
        outcome.interrupted = outcome.interrupted or report.interrupted
        runner.on_change(cell)

    def _show_progress(self, runner: ExperimentRunner, cells: list[CellProgress]) -> None:
        """The running cells' committed iterations, read from the store (the tasks write nowhere else)."""
        if not cells:
            return
        run_ids = {(c.problem, c.policy, c.seed): c.run_id for c in runner.store.experiment_cells(runner.spec.name)}
        runs = {info.id: info for info in runner.store.list_runs()}
        for cell in cells:
            run_id = run_ids.get(cell.key)
            info = runs.get(run_id) if run_id is not None else None
            if run_id is None or info is None or info.status != "running":
                continue  # waiting for a node, loading its policy, or between attempts
            done = len(runner.store.completed_iterations(run_id) - {0})
            if cell.stats is None:
                cell.stats = RunStats(iterations_target=info.iterations_target)
            if ("running", done, run_id) != (cell.status, cell.stats.iterations_done, cell.run_id):
                cell.status, cell.run_id, cell.stats.iterations_done = "running", run_id, done
                runner.on_change(cell)


def refuse_unreachable(address: str, timeout_s: float = 10.0) -> None:
    """ClusterError at once when nothing listens at a host:port address (Ray itself retries for minutes); other
    forms (ray://..., auto) are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or "/" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at RAY_ADDRESS={address}: {exc.strerror or exc}; start it "
                           "with `ray start --head` or unset RAY_ADDRESS for a local cluster") from None


def node_hosts() -> list[str]:
    """The machine (IP address) of every live node of the connected cluster."""
    return [node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")]
