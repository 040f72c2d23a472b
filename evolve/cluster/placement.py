"""What a cell asks of a cluster (CPUs for its evaluations, GPUs for a model it hosts), and which stores a cluster
may write: a SQLite file only where every node is one machine."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.engine import make_url

from evolve.engine.experiment_spec import ExperimentSpec
from evolve.errors import UserError
from evolve.policy_config import (
    HFPolicySection,
    LlamaCppPolicySection,
    OpenAIPolicySection,
    PolicySection,
    VLLMPolicySection,
)
from evolve.store.connection import database_url


class ClusterError(UserError):
    """The cluster cannot run this experiment (Ray missing, unreachable, or a store its nodes cannot share)."""


@dataclass(frozen=True)
class CellResources:
    """The Ray resource request of one cell's task."""

    cpus: float
    gpus: float


def cell_resources(spec: ExperimentSpec, policy_name: str) -> CellResources:
    """A cell runs its own evaluator pool of `run.eval_workers` processes: it asks for that many CPUs. It asks for
    the GPUs of a model it hosts itself (hf on cuda: one; vllm, or an openai policy with serve = true: its
    tensor_parallel_size); a policy behind a server elsewhere asks for none."""
    policy = spec.policy(policy_name)
    gpus = 0.0
    if isinstance(policy, HFPolicySection) and policy.device.startswith("cuda"):
        gpus = 1.0
    elif isinstance(policy, VLLMPolicySection) or (isinstance(policy, OpenAIPolicySection) and policy.serve):
        gpus = float(policy.tensor_parallel_size)
    return CellResources(cpus=float(spec.run.eval_workers), gpus=gpus)


def is_sqlite(db: str) -> bool:
    return make_url(database_url(db)).get_backend_name() == "sqlite"


def refuse_sqlite_across_hosts(db: str, node_hosts: Iterable[str]) -> None:
    """ClusterError when the store is a SQLite file and the cluster's nodes are on more than one machine: SQLite
    locks do not hold across machines (nor over network file systems), so cells would corrupt it."""
    hosts = sorted(set(node_hosts))
    if len(hosts) > 1 and is_sqlite(db):
        raise ClusterError(f"the store {db} is a SQLite file but the Ray cluster spans {len(hosts)} machines "
                           f"({', '.join(hosts)}); give the experiment a server database every node reaches, "
                           "e.g. --db postgresql+psycopg://USER@HOST/DB")


def refuse_unplaceable(requests: dict[str, CellResources], nodes: list[dict[str, float]]) -> None:
    """ClusterError naming the policy when no node of the cluster (its resources: {"CPU": n, "GPU": g}) can ever
    hold one of its cells: Ray would leave such a task pending forever."""
    for policy, need in requests.items():
        if not any(node.get("CPU", 0.0) >= need.cpus and node.get("GPU", 0.0) >= need.gpus for node in nodes):
            largest = max(nodes, key=lambda node: (node.get("GPU", 0.0), node.get("CPU", 0.0)), default={})
            raise ClusterError(
                f"policy '{policy}': a cell asks for {need.cpus:g} CPUs (run.eval_workers) and {need.gpus:g} GPUs, "
                f"but the largest node of the Ray cluster has {largest.get('CPU', 0.0):g} CPUs and "
                f"{largest.get('GPU', 0.0):g} GPUs; lower run.eval_workers (--set run.eval_workers=N) or add a "
                "bigger node")


def policy_for_cell(policy: PolicySection, cpus: float) -> PolicySection:
    """The policy as a cell's task opens it: an hf or llamacpp model on the CPU with threads = 0 ("all cores") gets
    the cell's CPUs instead, so cells sharing a node do not each start a thread per core."""
    on_cpu = isinstance(policy, LlamaCppPolicySection) or (isinstance(policy, HFPolicySection)
                                                           and not policy.device.startswith("cuda"))
    if on_cpu and policy.threads == 0:  # type: ignore[union-attr]
        engines = policy.engines if isinstance(policy, LlamaCppPolicySection) else 1  # threads are each engine's
        return policy.model_copy(update={"threads": max(1, int(cpus) // engines)})
    return policy
