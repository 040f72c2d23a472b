"""Experiments past one machine: `evolve experiment FILE --cluster ray` runs each cell as a Ray task.

Nothing here imports Ray until a cluster is asked for: `cell_executor("ray")` imports `ray_cells` (and Ray) then.
`placement.py` (what a cell asks of the cluster, which stores a cluster may write) needs no Ray.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from evolve.cluster.placement import ClusterError

if TYPE_CHECKING:
    from evolve.engine.experiment import CellExecutor

CLUSTER_KINDS = ("ray",)
__all__ = ["CLUSTER_KINDS", "ClusterError", "cell_executor", "keep_local_ray_on_loopback"]


def cell_executor(kind: str) -> CellExecutor:
    """The executor that runs an experiment's cells on the cluster `kind` (only "ray" so far)."""
    if kind != "ray":
        raise ClusterError(f"unknown cluster {kind!r}; choose one of: {', '.join(CLUSTER_KINDS)}")
    keep_local_ray_on_loopback()
    try:
        from evolve.cluster.ray_cells import RayCellExecutor
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("ray"):
            raise
        raise ClusterError("--cluster ray needs Ray: pip install -e '.[ray]'") from None
    return RayCellExecutor()


def keep_local_ray_on_loopback() -> None:
    """Without RAY_ADDRESS the driver starts a local one-machine cluster: make it listen on and talk over 127.0.0.1
    only. Ray otherwise swaps a loopback address for the machine's outward IP, so its internal traffic (GCS,
    raylet, object transfers) would leave loopback; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps 127.0.0.1. It must
    be in the environment before Ray is first imported (Ray reads it then), and the raylet and workers the driver
    starts inherit it. Set only as a default: a RAY_ADDRESS cluster may span machines, where the driver must
    advertise its real address, and a value the user set wins."""
    if not os.environ.get("RAY_ADDRESS"):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
