"""Training rollouts sampled in a process of their own: llama.cpp and the tokenizer its stop strings are read with.

Why a process: in the trainer's process llama.cpp's threads share the interpreter and the allocator with torch's
forward and backward passes, and generation there is slower after a backward pass: 1.15x at equal threads in
scripts/bench/bench_rollout_process.py (2 rounds, 16 requests of up to 256 tokens after a backward over 2,400 tokens,
2026-11-28), more in the CPU study's steps (23-41 generated tokens/s a step in the trainer's process with one
thread on 2026-11-27, 75-94 in a process of its own with two on 2026-11-28). The trainer keeps what needs its
torch model (writing the adapter as GGUF, llamacpp_rollouts.py) and sends this process only token ids, stop strings
and seeds.

`RolloutProcess` starts `python -m evolve.rl.rollout_process FD` (a fresh interpreter, not multiprocessing's spawn,
which re-runs the caller's main module: a user's unguarded training script would start training again in it) and
talks to it over a socket pair, one length-prefixed pickle each way per call. The process ignores Ctrl-C (the
trainer's clean-up closes it), is killed by the kernel when the trainer dies (PR_SET_PDEATHSIG), and a process that
cannot load its model or dies mid-call is one `RolloutEngineError` line, never a hang.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.interpreters import module_command
from evolve.policies.base import cut_at_stop
from evolve.policies.engine_pool import start_engines
from evolve.policies.llama_engine import GenerationRequest, GenerationResult
from evolve.seeds import ROLLOUT_SAMPLING, derive

_HEADER = struct.Struct("!Q")
_CLOSE_WAIT_S = 10.0


class RolloutEngineError(UserError, RuntimeError):
    """The llama.cpp rollout engine cannot run this training (no LoRA, a module it cannot map, its process died)."""


@dataclass(frozen=True)
class RolloutPrompt:
    """What the engine needs of a training prompt: its token ids, the per-completion token cap and how it stops."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    stops: tuple[str, ...]
    prefill: str


Sampled = list[list[tuple[list[int], str]]]  # per prompt, per row: (token ids, text cut at its stop string)


class EngineRollouts:
    """llama.cpp on the base GGUF (`engines` engines sharing the slots and cores: evolve/policies/engine_pool.py)
    plus the tokenizer that decodes for stop strings: G completions of each prompt."""

    def __init__(self, gguf: Path | str, tokenizer: Any, slots: int, context: int, threads: int,
                 engines: int = 1) -> None:
        self.tokenizer = tokenizer
        self.engine = start_engines(gguf, slots, context, threads, engines)

    def set_lora(self, path: Path | str | None, scale: float = 1.0) -> None:
        self.engine.set_lora(path, scale)

    def close(self) -> None:
        self.engine.close()

    def sample(self, prompts: Sequence[RolloutPrompt], group_size: int, seeds: Sequence[int],
               temperature: float = 1.0) -> Sampled:
        """G completions of each prompt, all in flight at once: the full distribution (no top-p/top-k); row r of
        prompt i draws from derive(seeds[i], ROLLOUT_SAMPLING, r)."""
        results: dict[tuple[int, int], GenerationResult | Exception] = {}
        finished = threading.Semaphore(0)

        def done(key: tuple[int, int]):  # noqa: ANN202
            def finish(outcome: GenerationResult | Exception) -> None:
                results[key] = outcome
                finished.release()
            return finish

        for index, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            def stop(tokens: Sequence[int], stops: tuple[str, ...] = prompt.stops,
                     prefill: str = prompt.prefill) -> bool:
                return bool(stops) and cut_at_stop(prefill, self.decode(tokens), stops)[1]

            for row in range(group_size):
                request = GenerationRequest(prompt.prompt_ids, prompt.max_new_tokens, temperature, 1.0,
                                            derive(seed, ROLLOUT_SAMPLING, row, bits=32), stop)
                self.engine.submit(request, done((index, row)))
        for _ in range(len(prompts) * group_size):
            finished.acquire()
        sampled: Sampled = []
        for index, prompt in enumerate(prompts):
            rows = []
            for row in range(group_size):
                outcome = results[(index, row)]
                if isinstance(outcome, Exception):
                    raise RolloutEngineError(f"--rollouts llamacpp: {outcome}")
                text = cut_at_stop(prompt.prefill, self.decode(outcome.tokens), prompt.stops)[0]
                rows.append((list(outcome.tokens), text))
            sampled.append(rows)
        return sampled

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=True))


# ---- the trainer's side -------------------------------------------------------------------------------------------

def _send(connection: socket.socket, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    connection.sendall(_HEADER.pack(len(data)) + data)


def _receive(connection: socket.socket) -> Any:
    """The next message; EOFError when the other side is gone."""
    header = _read_exactly(connection, _HEADER.size)
    return pickle.loads(_read_exactly(connection, _HEADER.unpack(header)[0]))


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = connection.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class RolloutProcess:
    """EngineRollouts in a child interpreter: the same calls (set_lora, sample, close), each a round trip."""

    def __init__(self, gguf: Path | str, tokenizer_path: Path | str, slots: int, context: int, threads: int,
                 engines: int = 1) -> None:
        ours, theirs = socket.socketpair()
        self._connection = ours
        self._lock = threading.Lock()  # one call at a time; close() does not wait for it
        self._closed = False
        try:
            self._process = subprocess.Popen(module_command("evolve.rl.rollout_process", str(theirs.fileno())),
                                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        try:
            self._call(("start", str(gguf), str(tokenizer_path), slots, context, threads, engines))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> RolloutProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        return self._process.pid

    def set_lora(self, path: Path | str | None, scale: float = 1.0) -> None:
        self._call(("lora", None if path is None else str(path), scale))

    def sample(self, prompts: Sequence[RolloutPrompt], group_size: int, seeds: Sequence[int],
               temperature: float = 1.0) -> Sampled:
        return self._call(("sample", list(prompts), group_size, list(seeds), temperature))

    def close(self) -> None:
        """End the process: asked to stop when idle, killed at once when a call is in flight. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                _send(self._connection, ("close",))
            except OSError:
                pass
            finally:
                self._lock.release()
            try:
                self._process.wait(_CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._connection.close()

    def _call(self, message: tuple[Any, ...]) -> Any:
        with self._lock:
            if self._closed:
                raise RolloutEngineError("the rollout process is closed")
            try:
                _send(self._connection, message)
                status, value = _receive(self._connection)
            except (OSError, EOFError):
                raise RolloutEngineError(f"the rollout process ended ({self._exit_text()})") from None
        if status == "error":
            raise RolloutEngineError(value)
        return value

    def _exit_text(self) -> str:
        try:
            code = self._process.wait(_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        return f"exit code {code}"


# ---- the rollout process's side -----------------------------------------------------------------------------------

def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the trainer dies (Linux; strictly, when the thread that started it ends: the trainer
    starts it from its main thread); elsewhere only a trainer already gone is noticed."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the trainer died before the call above
        os._exit(1)


def _serve(connection: socket.socket) -> None:
    rollouts: EngineRollouts | None = None
    try:
        while True:
            try:
                message = _receive(connection)
            except EOFError:
                return
            kind = message[0]
            if kind == "close":
                return
            try:
                if kind == "start":
                    from transformers import AutoTokenizer
                    from transformers.utils import logging as transformers_logging

                    transformers_logging.set_verbosity_error()
                    gguf, tokenizer_path, slots, context, threads, engines = message[1:]
                    rollouts = EngineRollouts(gguf, AutoTokenizer.from_pretrained(tokenizer_path), slots, context,
                                              threads, engines)
                    reply: Any = None
                elif rollouts is None:
                    raise RolloutEngineError("the rollout process was not started")
                elif kind == "lora":
                    rollouts.set_lora(message[1], message[2])
                    reply = None
                elif kind == "sample":
                    reply = rollouts.sample(*message[1:])
                else:
                    raise RolloutEngineError(f"the rollout process got an unknown call {kind!r}")
            except Exception as exc:  # one line back to the trainer, and the process stays usable
                _send(connection, ("error", f"--rollouts llamacpp: {exc}" if not isinstance(exc, UserError)
                                   else str(exc)))
                continue
            _send(connection, ("ok", reply))
    finally:
        if rollouts is not None:
            rollouts.close()


def main(argv: Sequence[str]) -> int:
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's: it closes this process
    _die_with_parent(parent)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    connection = socket.socket(fileno=int(argv[0]))
    try:
        _serve(connection)
    finally:
        connection.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
