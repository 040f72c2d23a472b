"""Experiments past one machine: `evolve experiment FILE --cluster ray` runs each cell as a Ray task.

Nothing here imports Ray until a cluster is asked for: `cell_executor("ray")` imports `ray_cells` (and Ray) then.
`placement.py` (what a cell asks of the cluster, which stores a cluster may write) needs no Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evolve.errors import UserError

if TYPE_CHECKING:
    from evolve.engine.experiment import CellExecutor

CLUSTER_KINDS = ("ray",)


class ClusterError(UserError):
    """The cluster cannot run this experiment (Ray missing, unreachable, or a store its nodes cannot share)."""


def cell_executor(kind: str) -> CellExecutor:
    """The executor that runs an experiment's cells on the cluster `kind` (only "ray" so far)."""
    if kind != "ray":
        raise ClusterError(f"unknown cluster {kind!r}; choose one of: {', '.join(CLUSTER_KINDS)}")
    try:
        from evolve.cluster.ray_cells import RayCellExecutor
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("ray"):
            raise
        raise ClusterError("--cluster ray needs Ray: pip install -e '.[ray]'") from None
    return RayCellExecutor()
