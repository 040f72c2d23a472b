"""A Ray cluster of separate processes on loopback, for tests and scripts: a head and worker nodes, each a real
`ray start --block` (its own raylet and worker processes), and a node killed the hard way (SIGKILL to its raylet,
its workers and everything else it started), as when a machine dies.

    with LocalRayCluster(head_cpus=1, env={"EVOLVE_LEASE_S": "2"}) as cluster:
        node = cluster.add_node(cpus=1)
        cluster.address          # 127.0.0.1:PORT, for RAY_ADDRESS
        cluster.kill(node)       # every process of that node, SIGKILL

The head notices a dead node within about 2 s (shortened health checks), not Ray's default 30 s. Clients reach
the head at 127.0.0.1; Ray itself advertises the machine's own address (it replaces a loopback --node-ip-address).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

LOOPBACK = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # a throwaway cluster on loopback only
OBJECT_STORE_BYTES = 200 * 2**20  # cells return small reports; Ray's default takes 30% of the memory
STARTED = "Ray runtime started."  # what `ray start` logs once its node is registered with the head
RAY = str(Path(sys.executable).with_name("ray"))
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
                      "RAY_health_check_timeout_ms": "500", "RAY_health_check_initial_delay_ms": "0"}


@dataclass
class RayNode:
    """One `ray start --block` process; its raylet and workers are its descendants."""

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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalRayCluster:
    """A head node started on entering; worker nodes added with add_node; every node stopped on leaving."""

    def __init__(self, head_cpus: int = 1, env: dict[str, str] | None = None, start_timeout_s: float = 90.0) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, **FAST_HEALTH_CHECKS, **LOOPBACK, **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        self.folder = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
        self.start_timeout_s = start_timeout_s
        self.head_cpus = head_cpus
        self.nodes: list[RayNode] = []

    def __enter__(self) -> LocalRayCluster:
        self.head = self._start("head", ["--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}",
                                         "--include-dashboard=false", f"--temp-dir={self.folder / 'tmp'}"])
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for node in reversed(self.nodes):
            self.kill(node)
        shutil.rmtree(self.folder, ignore_errors=True)

    def add_node(self, cpus: int = 1) -> RayNode:
        """A worker node joined to the head; returns once the cluster counts it alive."""
        return self._start(f"worker{len(self.nodes)}", [f"--address={self.address}", f"--num-cpus={cpus}"])

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

    def alive_nodes(self) -> int:
        """Nodes the head's autoscaler lists as active (`ray status`, a separate process, so this one is no driver)."""
        result = subprocess.run([RAY, "status", f"--address={self.address}"], capture_output=True, text=True,
                                env=self.env, timeout=60)
        active = result.stdout.partition("Active:")[2].partition("Pending:")[0]
        return len(re.findall(r"^\s*\d+ node_", active, re.MULTILINE))

    def _start(self, name: str, arguments: list[str]) -> RayNode:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", f"--object-store-memory={OBJECT_STORE_BYTES}",
                                        *arguments], stdout=out, stderr=subprocess.STDOUT,
                                       env=self.env, start_new_session=True)
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
