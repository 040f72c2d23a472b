"""Starts `vllm serve` for a policy, waits for its health check, and stops it (process group) at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from evolve.interpreters import module_command
from evolve.policies.base import PolicyError
from evolve.policies.vllm_engine import vllm_environment
from evolve.ports import free_port

_POLL_S = 1.0
_STOP_GRACE_S = 30.0


class VLLMServer:
    """One `vllm serve` child process on 127.0.0.1; `url` is its OpenAI-compatible base URL once started."""

    def __init__(self, model_path: Path | str, served_name: str, port: int = 0, lora: str = "",
                 dtype: str = "auto", max_model_len: int = 4096, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.85, extra_args: tuple[str, ...] = (),
                 startup_timeout_s: float = 900.0) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.served_name = served_name
        self.startup_timeout_s = startup_timeout_s
        self.command = [
            *module_command("evolve.policies.vllm_cli", "serve", str(model_path)),
            "--host", "127.0.0.1", "--port", str(self.port), "--dtype", dtype,
            "--max-model-len", str(max_model_len), "--tensor-parallel-size", str(tensor_parallel_size),
            "--gpu-memory-utilization", str(gpu_memory_utilization), "--disable-log-stats",
        ]
        if lora:  # requests name the adapter; the base model stays reachable as NAME-base
            self.command += ["--served-model-name", f"{served_name}-base", "--enable-lora", "--max-lora-rank", "64",
                             "--lora-modules", f"{served_name}={lora}"]
        else:
            self.command += ["--served-model-name", served_name]
        self.command += list(extra_args)
        self.log = Path(tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        vllm_environment()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, env=os.environ.copy())
        deadline = time.monotonic() + self.startup_timeout_s
        health = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PolicyError(f"vllm serve exited with code {self.process.returncode} while starting; "
                                  f"log {self.log}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(health, timeout=5) as response:
                    if response.status == 200:
                        return self.url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(_POLL_S)
        self.stop()
        raise PolicyError(f"vllm serve did not pass its health check in {self.startup_timeout_s:g} s; "
                          f"log {self.log}: {self.log_tail()}")

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(line.strip() for line in text[-lines:])[-600:]

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, _STOP_GRACE_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue
