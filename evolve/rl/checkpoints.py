"""Training checkpoints: HF folders that a policy loads, the resume state that lets a killed `evolve train` go on,
and each checkpoint's training provenance (which problems it was trained on), so a held-out test set stays held out.

The resume state (OUT/resume/state.pt) is written after every step, atomically (a temporary file renamed over the
old one), so a kill at any moment leaves the last finished step's state: the trainable weights (the LoRA adapter,
or every weight under full fine-tuning), the optimizer's moments, the step number and the step records of
train_log.jsonl so far (the log is rewritten from them on resume, so it never holds a step the weights lack).
Sampling seeds and VPO weights are derived from (seed, step), so a resumed run continues exactly as an unbroken one.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.errors import UserError
from evolve.problems.problem import problem_key

if TYPE_CHECKING:
    import torch

STATE_FILE = Path("resume") / "state.pt"
PROVENANCE_FILE = "evolve_training.json"  # in OUT/final: what the checkpoint was trained on
TRAIN_CONFIG_FILE = "train_config.json"  # in OUT, written when training starts (step_N folders sit beside it)


class ResumeError(UserError, RuntimeError):
    """There is nothing to resume, or the state does not fit the model; the message says what to do."""


def save_checkpoint(model: Any, tokenizer: Any, folder: Path, lora: bool) -> None:
    """A full HF folder (LoRA merged into a copy of the model) plus, for LoRA, the adapter alone in adapter/."""
    folder.mkdir(parents=True, exist_ok=True)
    if lora:
        copy.deepcopy(model).merge_and_unload().save_pretrained(folder)
        model.save_pretrained(folder / "adapter")
    else:
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def save_state(out: Path, model: Any, optimizer: torch.optim.Optimizer, step: int,
               records: list[dict[str, Any]]) -> None:
    path = out / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    trainable = {name: p.detach().cpu() for name, p in model.named_parameters() if p.requires_grad}
    partial = path.with_suffix(".partial")
    import torch  # here, not at the top: evolve experiment reads provenance without importing torch

    torch.save({"step": step, "trainable": trainable, "optimizer": optimizer.state_dict(), "records": records},
               partial)
    os.replace(partial, path)


def load_state(out: Path, model: Any, optimizer: torch.optim.Optimizer) -> tuple[int, list[dict[str, Any]]]:
    """Put the saved weights and optimizer state into `model` and `optimizer`; the step and records saved."""
    path = out / STATE_FILE
    if not path.is_file():
        raise ResumeError(f"{path}: no resume state (the run stopped before its first step ended); start it again")
    import torch

    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:
        raise ResumeError(f"{path}: unreadable resume state ({type(exc).__name__}: {exc})") from exc
    names = {name for name, p in model.named_parameters() if p.requires_grad}
    if set(state["trainable"]) != names:
        raise ResumeError(f"{path}: the saved weights do not fit this model (LoRA settings or base model changed)")
    model.load_state_dict(state["trainable"], strict=False)
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"]), list(state["records"])


class TrainingProvenance(BaseModel):
    """What `evolve train` wrote into a checkpoint folder about its training: the problems (their names), the
    estimator, the step budget and the base model."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    problems: tuple[str, ...]
    algo: str = ""
    steps: int = 0
    base: str = ""


def write_provenance(folder: Path, provenance: TrainingProvenance) -> Path:
    path = folder / PROVENANCE_FILE
    path.write_text(provenance.model_dump_json(indent=2) + "\n")
    return path


def checkpoint_provenance(model: str | Path) -> tuple[Path, TrainingProvenance] | None:
    """Where a checkpoint says what it was trained on, and what: FOLDER/evolve_training.json, else the training
    output it sits in (OUT/step_N or OUT/final/adapter: OUT/train_config.json, OUT/final/evolve_training.json).
    None for anything else (the embedded model, a served model's name, a folder no `evolve train` wrote)."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    candidates = [folder / PROVENANCE_FILE, folder.parent / PROVENANCE_FILE, folder.parent / TRAIN_CONFIG_FILE,
                  folder.parent.parent / TRAIN_CONFIG_FILE]
    for path in candidates:
        if path.is_file():
            try:
                return path, TrainingProvenance.model_validate(json.loads(path.read_text()))
            except (ValueError, ValidationError):
                continue  # not ours, or unreadable: look further up
    return None


def problem_keys(names: Iterable[str]) -> set[str]:
    """Names to compare problems by: a name, or a folder path's last part ('programs/humaneval/he_001' -> 'he_001')."""
    return {problem_key(name) for name in names if name.strip()}


def trained_on(model: str | Path, test_problems: Iterable[str]) -> tuple[Path, list[str]] | None:
    """The provenance file and the test problems a checkpoint was trained on, or None when it was trained on none."""
    found = checkpoint_provenance(model)
    if found is None:
        return None
    path, provenance = found
    overlap = sorted(problem_keys(provenance.problems) & problem_keys(test_problems))
    return (path, overlap) if overlap else None
