"""Training checkpoints: HF folders that a policy loads, and the resume state that lets a killed `evolve train` go on.

The resume state (OUT/resume/state.pt) is written after every step, atomically (a temporary file renamed over the
old one), so a kill at any moment leaves the last finished step's state: the trainable weights (the LoRA adapter,
or every weight under full fine-tuning), the optimizer's moments, the step number and the step records of
train_log.jsonl so far (the log is rewritten from them on resume, so it never holds a step the weights lack).
Sampling seeds and VPO weights are derived from (seed, step), so a resumed run continues exactly as an unbroken one.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch

STATE_FILE = Path("resume") / "state.pt"


class ResumeError(RuntimeError):
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
    torch.save({"step": step, "trainable": trainable, "optimizer": optimizer.state_dict(), "records": records},
               partial)
    os.replace(partial, path)


def load_state(out: Path, model: Any, optimizer: torch.optim.Optimizer) -> tuple[int, list[dict[str, Any]]]:
    """Put the saved weights and optimizer state into `model` and `optimizer`; the step and records saved."""
    path = out / STATE_FILE
    if not path.is_file():
        raise ResumeError(f"{path}: no resume state (the run stopped before its first step ended); start it again")
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
