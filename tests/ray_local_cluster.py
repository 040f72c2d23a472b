"""A Ray cluster of separate processes on loopback, for tests and scripts: a head and worker nodes, each a process
of its own (its own raylet and worker processes), and a node killed the hard way (SIGKILL to its raylet, its
workers and everything else it started), as when a machine dies.

    with LocalRayCluster(head_cpus=1, env={"EVOLVE_LEASE_S": "2"}) as cluster:
        node = cluster.add_node(cpus=1)
        cluster.address          # 127.0.0.1:PORT, for RAY_ADDRESS
        cluster.kill(node)       # every process of that node, SIGKILL

The head notices a dead node within about 2 s (shortened health checks), not Ray's default 30 s.

Every Ray process listens on and connects to 127.0.0.1 only. By default Ray replaces a loopback address (the
--address, --node-ip-address, RAY_ADDRESS) by the machine's own outward address, so its traffic would leave
loopback; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (in LOOPBACK, which every node, `ray status` and a driver given
RAY_ADDRESS must all have) makes Ray keep 127.0.0.1 instead. With it, `ray start --address` refuses to start a
worker node ("multi-node clusters are not supported"), so the head is `ray start --head --block` and a worker
node is this file run as a script (`python ray_local_cluster.py worker ...`), which starts the node the way
`ray start --address --block` does (ray._private.node.Node, as ray.cluster_utils.Cluster.add_node does too).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from evolve.ports import free_port

LOOPBACK = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",  # a throwaway cluster on loopback only
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray keeps 127.0.0.1 (else it swaps in the machine's IP)
LOCALHOST = "127.0.0.1"
OBJECT_STORE_BYTES = 200 * 2**20  # cells return small reports; Ray's default takes 30% of the memory
STARTED = "Ray runtime started."  # what `ray start` logs once its node is registered with the head
RAY = str(Path(sys.executable).with_name("ray"))
CLI_FLAG = {"metrics_agent_port": "dashboard-agent-grpc-port"}
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
                      "RAY_health_check_timeout_ms": "500", "RAY_health_check_initial_delay_ms": "0"}


@dataclass
class RayNode:
    """One node's own process (`ray start --block` for the head, this file for a worker node); its raylet and
    workers are its descendants."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def pids(self) -> set[int]:
        return {process.pid for process in self.processes()}


def _distinct_port(taken: set[int]) -> int:
    """A free port other than those in `taken` (which it joins): free_port draws each at random and only checks
    that nothing holds it now, so two draws for servers not started yet can meet (seen: Ray refused a node whose
    node manager and metrics export had drawn the same port)."""
    port = free_port()
    while port in taken:
        port = free_port()
    taken.add(port)
    return port


def _node_ports(taken: set[int] | None = None) -> dict[str, int]:
    """Ports for a node's own servers, chosen here (free_port: never one an outgoing connection can take) instead
    of by Ray, whose picks come from the ephemeral range, each distinct from the others and from `taken`; keys as
    RayParams names them (CLI_FLAG: where `ray start` names one otherwise)."""
    names = ("node_manager_port", "object_manager_port", "metrics_export_port", "dashboard_agent_listen_port",
             "metrics_agent_port", "runtime_env_agent_port")
    chosen = set() if taken is None else taken
    return {name: _distinct_port(chosen) for name in names}


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # Ray's gRPC servers show 127.0.0.1 as ::ffff:127.0.0.1
    return address.is_loopback


class LocalRayCluster:
    """A head node started on entering; worker nodes added with add_node; every node stopped on leaving."""

    def __init__(self, head_cpus: int = 1, env: dict[str, str] | None = None, start_timeout_s: float = 90.0) -> None:
        self.port = free_port()
        self.address = f"{LOCALHOST}:{self.port}"
        self.env = {**os.environ, **FAST_HEALTH_CHECKS, **LOOPBACK, **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        self.folder = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
        self.start_timeout_s = start_timeout_s
        self.head_cpus = head_cpus
        self.nodes: list[RayNode] = []

    def __enter__(self) -> LocalRayCluster:
        taken = {self.port}
        client_port = _distinct_port(taken)
        self.head = self._start("head", [
            RAY, "start", "--block", "--disable-usage-stats", "--head", f"--port={self.port}",
            f"--node-ip-address={LOCALHOST}", f"--ray-client-server-port={client_port}",
            f"--num-cpus={self.head_cpus}", f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--include-dashboard=false", f"--temp-dir={self.folder / 'tmp'}",
            *(f"--{CLI_FLAG.get(name, name.replace('_', '-'))}={port}"
              for name, port in _node_ports(taken).items())])
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for node in reversed(self.nodes):
            self.kill(node)
        shutil.rmtree(self.folder, ignore_errors=True)

    def add_node(self, cpus: int = 1) -> RayNode:
        """A worker node joined to the head; returns once the cluster counts it alive."""
        return self._start(f"worker{len(self.nodes)}", [
            sys.executable, __file__, "worker", f"--address={self.address}", f"--num-cpus={cpus}",
            f"--temp-dir={self.folder / 'tmp'}"])

    def kill(self, node: RayNode) -> None:
        """SIGKILL every process of the node at once, as when its machine dies."""
        processes = node.processes()
        for process in processes:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(processes, timeout=10)
        node.process.wait(timeout=10)

    def off_loopback_sockets(self) -> list[str]:
        """Every TCP socket of every live node process that is bound or connected outside 127.0.0.0/8 (a listener
        on 0.0.0.0 or :: counts), as 'process local -> remote'; empty when the cluster keeps to loopback."""
        found = []
        for node in self.nodes:
            for process in node.processes():
                try:
                    sockets = process.net_connections(kind="tcp")
                    name = process.name()
                except psutil.NoSuchProcess:
                    continue
                for sock in sockets:
                    ends = [sock.laddr, *([sock.raddr] if sock.raddr else [])]
                    if not all(_is_loopback(end.ip) for end in ends):
                        found.append(f"{name}[{process.pid}] {sock.laddr} -> {sock.raddr or '-'} {sock.status}")
        return found

    def alive_nodes(self) -> int:
        """Nodes the head's autoscaler lists as active (`ray status`, a separate process, so this one is no driver)."""
        result = subprocess.run([RAY, "status", f"--address={self.address}"], capture_output=True, text=True,
                                env=self.env, timeout=60)
        active = result.stdout.partition("Active:")[2].partition("Pending:")[0]
        return len(re.findall(r"^\s*\d+ node_", active, re.MULTILINE))

    def _start(self, name: str, command: list[str]) -> RayNode:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                       start_new_session=True)
        node = RayNode(name, process, log)
        self.nodes.append(node)
        self._wait_for(lambda: STARTED in log.read_text(errors="replace"), f"node {name} to start")
        return node

    def _wait_for(self, condition: object, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if any(node.process.poll() is not None for node in self.nodes):
                dead = next(node for node in self.nodes if node.process.poll() is not None)
                raise RuntimeError(f"ray node {dead.name} exited while waiting for {what}: "
                                   f"{dead.log.read_text()[-2000:]}")
            if condition():  # type: ignore[operator]
                return
            time.sleep(0.2)
        raise TimeoutError(f"waited {self.start_timeout_s:.0f} s for {what}")


def run_worker_node(address: str, cpus: int, temp_dir: str) -> None:
    """A worker node joined to the head at `address`, on loopback, until this process is killed: what
    `ray start --address --block` does, which RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes it refuse."""
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    params = RayParams(gcs_address=address, node_ip_address=LOCALHOST, num_cpus=cpus, num_gpus=0,
                       object_store_memory=OBJECT_STORE_BYTES, temp_dir=temp_dir, **_node_ports())
    Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    print(STARTED, flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="run one worker node of a LocalRayCluster")
    parser.add_argument("role", choices=["worker"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--num-cpus", type=int, required=True)
    parser.add_argument("--temp-dir", required=True)
    arguments = parser.parse_args()
    run_worker_node(arguments.address, arguments.num_cpus, arguments.temp_dir)
