"""Training checkpoints: HF folders that a policy loads, the resume state that lets a killed `evolve train` go on,
and the held-out list a training run was started with.

The resume state (OUT/resume/state.pt) is written after every step, atomically (a temporary file renamed over the
old one), so a kill at any moment leaves the last finished step's state: the trainable weights (the LoRA adapter,
or every weight under full fine-tuning), the optimizer's moments, the step number and the step records of
train_log.jsonl so far (the log is rewritten from them on resume, so it never holds a step the weights lack).
Sampling seeds and VPO weights are derived from (seed, step), so a resumed run continues exactly as an unbroken one.

Provenance (what a checkpoint was trained on) is evolve/policies/provenance.py's: save_checkpoint stamps it.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.errors import UserError
from evolve.policies.provenance import TrainingProvenance, stamp_checkpoint

if TYPE_CHECKING:
    import torch

STATE_FILE = Path("resume") / "state.pt"
HELD_OUT_FILE = Path("resume") / "held_out.json"  # in OUT: the test problems training was checked against


class ResumeError(UserError, RuntimeError):
    """There is nothing to resume, or the state does not fit the model; the message says what to do."""


def merged_model(model: Any) -> Any:
    """A copy of the LoRA model with its adapter merged into float32 weights: merged in bfloat16 (`dtype`), an
    update smaller than bfloat16's spacing at a weight (most of a LoRA run's) would round away. A float32 model's merge
    is unchanged by this."""
    return copy.deepcopy(model).float().merge_and_unload()


def save_checkpoint(model: Any, tokenizer: Any, folder: Path, lora: bool,
                    provenance: TrainingProvenance | None = None) -> None:
    """A full HF folder (LoRA merged into a copy of the model) plus, for LoRA, the adapter alone in adapter/; each
    folder stamped with `provenance` (its own evolve_training.json, with the hashes of its weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    if lora:
        merged_model(model).save_pretrained(folder)
        model.save_pretrained(folder / "adapter")
    else:
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if provenance is not None:
        stamp_checkpoint(folder, provenance.model_copy(update={"kind": "merged" if lora else "full"}))
        if lora:
            stamp_checkpoint(folder / "adapter", provenance.model_copy(update={"kind": "adapter"}))


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


def save_held_out(out: Path, held_out: tuple[str, ...]) -> None:
    """Keep the held-out test list beside the resume state, so a resumed run records it without being told again."""
    path = out / HELD_OUT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(list(held_out)) + "\n")


def stored_held_out(out: Path) -> tuple[str, ...] | None:
    """The held-out test list a run in OUT was started with; None when it was given none."""
    path = out / HELD_OUT_FILE
    try:
        names = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return tuple(str(name) for name in names) if isinstance(names, list) else None
