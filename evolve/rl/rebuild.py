"""A LoRA checkpoint's merged weights rebuilt from its adapter, so a study moves between machines without them.

`evolve train` saves OUT/final/ as the base with the LoRA adapter merged in (model.safetensors: the whole model,
~0.5 GB for the embedded one in float32) and the adapter alone in OUT/final/adapter/ (~20 MB). A study committed in
pieces (scripts/study/study.sh) keeps everything of final/ but its top-level weights; here they are made again
exactly as the trainer made them (the training config's base and dtype, the same LoRA wrapping, the adapter's
weights, the same merge), then checked against the sha256 that final/evolve_training.json recorded when training
saved them. A rebuild that differs is removed and refused: the checkpoint's provenance would no longer describe its
weights.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from evolve.errors import UserError
from evolve.policies.provenance import PROVENANCE_FILE, TRAIN_CONFIG_FILE, TrainingProvenance, weight_digests

MERGED_WEIGHTS = "model.safetensors"


class RebuildError(UserError, RuntimeError):
    """The merged weights cannot be made again, or differ from what the provenance recorded; one line."""


def needs_rebuild(final: Path) -> bool:
    """True for a LoRA checkpoint folder that has its provenance and adapter but not its merged weights."""
    return ((final / PROVENANCE_FILE).is_file() and (final / "adapter" / "adapter_model.safetensors").is_file()
            and not (final / MERGED_WEIGHTS).is_file())


def rebuild_merged(final: Path) -> Path:
    """Write FINAL/model.safetensors from FINAL/adapter and the base its training config names, verified against
    FINAL/evolve_training.json's hashes; the path written. RebuildError (one line) when anything is missing or
    the result differs."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from evolve.rl.checkpoints import merged_model
    from evolve.rl.train_config import TrainConfig
    from evolve.rl.trainer import load_model

    provenance = TrainingProvenance.model_validate_json((final / PROVENANCE_FILE).read_text())
    recorded = provenance.weights.get(MERGED_WEIGHTS)
    if provenance.kind != "merged" or recorded is None:
        raise RebuildError(f"{final}: its {PROVENANCE_FILE} records no merged {MERGED_WEIGHTS} (kind "
                           f"{provenance.kind or 'unknown'}), so there is nothing to rebuild it against")
    config_path = final.parent / TRAIN_CONFIG_FILE
    if not config_path.is_file():
        raise RebuildError(f"{final}: no {config_path.name} beside it (the training's settings: base, dtype, LoRA)")
    config = TrainConfig.model_validate_json(config_path.read_text()).model_copy(update={"device": "cpu"})
    _, model, _ = load_model(config)
    adapter = load_file(str(final / "adapter" / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, adapter)
    if getattr(result, "unexpected_keys", None):
        raise RebuildError(f"{final}/adapter does not fit the LoRA settings of {config_path} "
                           f"(unexpected: {', '.join(result.unexpected_keys[:3])})")
    with torch.no_grad(), tempfile.TemporaryDirectory(dir=final) as staging:
        merged_model(model).save_pretrained(staging)
        made = Path(staging) / MERGED_WEIGHTS
        digest = weight_digests(Path(staging)).get(MERGED_WEIGHTS)
        if digest != recorded:
            raise RebuildError(f"{final}: the weights rebuilt from its adapter differ from those training saved "
                               f"(sha256 {str(digest)[:12]} != {recorded[:12]}); train it again, or restore "
                               f"{MERGED_WEIGHTS} from where it was made")
        os.replace(made, final / MERGED_WEIGHTS)
    return final / MERGED_WEIGHTS


def rebuild_all(folders: list[Path]) -> list[Path]:
    """Rebuild every folder of `folders` that `needs_rebuild`; the weights written."""
    return [rebuild_merged(final) for final in folders if needs_rebuild(final)]

