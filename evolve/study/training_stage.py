"""Stage 1 of a study: each algorithm trained from the same base, once per training seed, with `evolve train
--resume`'s semantics (rl/trainer.py); where each training run stands and how long the rest will take at the pace
of its latest steps."""

from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from evolve.study.state import State, StudyError


@dataclass(frozen=True)
class TrainingRunStatus:
    """Where one training run stands: its state and its steps logged out of those planned."""

    state: State
    steps_done: int
    steps_planned: int

    @property
    def detail(self) -> str:
        return f"{self.steps_done}/{self.steps_planned} steps"


def training_status(config: Any) -> TrainingRunStatus:  # config: TrainConfig
    from evolve.policies.provenance import PROVENANCE_FILE, TRAIN_CONFIG_FILE, TrainingProvenance
    from evolve.rl.checkpoints import STATE_FILE

    out = Path(config.out)
    if (out / TRAIN_CONFIG_FILE).is_file() or (out / STATE_FILE).is_file():
        refuse_changed_training(config)  # trained (or training) with the study file's settings, or refused
    provenance = out / "final" / PROVENANCE_FILE
    if provenance.is_file():
        steps = TrainingProvenance.model_validate_json(provenance.read_text()).steps
        if steps >= config.steps:
            return TrainingRunStatus("done", steps, config.steps)
    if (out / STATE_FILE).is_file():
        log = out / "train_log.jsonl"
        done = len(log.read_text().splitlines()) if log.is_file() else 0
        return TrainingRunStatus("partial", done, config.steps)
    return TrainingRunStatus("to do", 0, config.steps)


PACE_STEPS = 5  # the training pace is the median of this many latest steps


def training_seconds_left(configs: list[Any]) -> tuple[float, int] | None:  # configs: TrainConfig
    """The training steps still to run times the median length of the latest PACE_STEPS steps logged (by any run,
    the latest first), and how many steps that median is of: the first steps of a run, slower while its rollouts
    and caches warm up, and the time spent loading models or interrupted no longer weigh on the estimate. None
    before a step is logged."""
    from evolve.report.study_report import read_training_log

    logs = [(Path(config.out) / "train_log.jsonl", config.steps) for config in configs]
    written = [(log.stat().st_mtime if log.is_file() else 0.0, read_training_log(log), steps) for log, steps in logs]
    left = sum(max(0, steps - len(records)) for _, records, steps in written)
    recent = [float(r["seconds"]) for _, records, _ in sorted(written, key=lambda run: run[0]) for r in records
              if isinstance(r.get("seconds"), int | float)]  # the runs in the order their logs were last written
    latest = recent[-PACE_STEPS:]
    return (left * statistics.median(latest), len(latest)) if latest else None


def refuse_changed_training(config: Any) -> None:
    """A training, partial or finished, counts for the study only with the settings it ran with (steps may rise,
    threads may change)."""
    from evolve.policies.provenance import TRAIN_CONFIG_FILE
    from evolve.rl.train_config import TrainConfig

    stored_path = Path(config.out) / TRAIN_CONFIG_FILE
    if not stored_path.is_file():  # a resume state whose settings were lost (a copy, a partial sync)
        raise StudyError(f"{config.out} holds a partial training but not its {TRAIN_CONFIG_FILE}, so its settings "
                         f"cannot be checked against the study file; delete {config.out} to train it again")
    stored = TrainConfig.model_validate_json(stored_path.read_text()).model_dump()
    wanted = config.model_dump()
    changed = [f"{key} {stored[key]!r} -> {wanted[key]!r}" for key in wanted
               if key not in ("steps", "threads", "out") and stored.get(key) != wanted[key]]
    if changed:
        raise StudyError(f"{stored_path}: this training started with other settings ({'; '.join(changed)}); restore "
                         f"the study file, or delete {config.out} to train it again")


def run_training(config: Any, console: Console, held_out: tuple[str, ...] = ()) -> None:
    """Train (or resume) one algorithm to its steps; each checkpoint folder it saves carries its provenance (the
    training problems, `held_out` test problems, the hashes of its weights)."""
    from evolve.rl.checkpoints import STATE_FILE
    from evolve.rl.trainer import train

    resume = (Path(config.out) / STATE_FILE).is_file()
    if resume:
        refuse_changed_training(config)
    train(config, console, resume=resume, held_out=held_out)
    gc.collect()  # the trained model is unreachable now: give its memory back before the next one loads
    _empty_gpu_cache()


def _empty_gpu_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
