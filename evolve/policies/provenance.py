"""Each checkpoint's training provenance: which problems it was trained on, so a held-out test set stays held out.

Provenance lives inside every checkpoint folder `evolve train` writes (OUT/final, OUT/step_N and their adapter/
folders): FOLDER/evolve_training.json names the training problems, the algorithm, the seed, the base model, the
test problems training was checked against, and the sha256 of each file that makes the model (weights and configs),
so the folder is recognised wherever it is copied and a changed, missing or added weight file is detected. A merged
or fully fine-tuned folder's config.json also carries the record under "evolve_training", so a folder whose
evolve_training.json was deleted is still known to be a trained checkpoint (a LoRA adapter is trained by nature).
`inspect_checkpoint` reads all that; `held_out_refusal` is the one-line verdict experiments and studies apply.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.problems.problem import problem_key

PROVENANCE_FILE = "evolve_training.json"  # in every checkpoint folder: what the checkpoint was trained on
CONFIG_MARK = "evolve_training"  # the key of a merged folder's config.json holding the same record
# the files whose content makes the model: hashed into the provenance (tokenizer files are not)
HASHED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
HASHED_NAMES = ("config.json", "adapter_config.json", "generation_config.json")
TRAIN_CONFIG_FILE = "train_config.json"  # in OUT, written when training starts (step_N folders sit beside it)


class TrainingProvenance(BaseModel):
    """What `evolve train` wrote into a checkpoint folder about its training: the problems (their names), the
    estimator, the steps behind this checkpoint, the seed, the base model, the test problems training was checked
    against (none when it knew of none), and the sha256 of each model file of the folder (file name -> hex)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    problems: tuple[str, ...]
    algo: str = ""
    steps: int = 0
    base: str = ""
    seed: int | None = None
    held_out: tuple[str, ...] = ()
    kind: str = ""  # "merged" (LoRA merged into the base), "adapter" (the LoRA adapter alone) or "full"
    weights: dict[str, str] = {}


def write_provenance(folder: Path, provenance: TrainingProvenance) -> Path:
    """FOLDER/evolve_training.json, written atomically (a reader never sees half a record)."""
    path = folder / PROVENANCE_FILE
    partial = path.with_suffix(".partial")
    partial.write_text(provenance.model_dump_json(indent=2) + "\n")
    os.replace(partial, path)
    return path


def weight_digests(folder: Path) -> dict[str, str]:
    """The sha256 of each model file directly in `folder` (weights and configs, not tokenizer files)."""
    digests = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and (path.suffix in HASHED_SUFFIXES or path.name in HASHED_NAMES):
            digests[path.name] = _file_digest(path, path.stat().st_size, path.stat().st_mtime_ns)
    return digests


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime): a file is read once per process


def _file_digest(path: Path, size: int, mtime_ns: int) -> str:
    key = (str(path.resolve()), size, mtime_ns)
    if key not in _DIGESTS:
        with path.open("rb") as handle:
            _DIGESTS[key] = hashlib.file_digest(handle, "sha256").hexdigest()
    return _DIGESTS[key]


def stamp_checkpoint(folder: Path, provenance: TrainingProvenance) -> Path:
    """Write `provenance` into the checkpoint folder: its config.json's "evolve_training" key (a merged or full
    folder; everything but the hashes), then evolve_training.json with the hashes of the files as they are now."""
    config = folder / "config.json"
    if config.is_file():
        data = json.loads(config.read_text())
        data[CONFIG_MARK] = provenance.model_dump(mode="json", exclude={"weights"})
        partial = config.with_suffix(".partial")
        partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(partial, config)
    return write_provenance(folder, provenance.model_copy(update={"weights": weight_digests(folder)}))


def _read_provenance(path: Path) -> TrainingProvenance | None:
    try:
        return TrainingProvenance.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError):
        return None


def _config_mark(folder: Path) -> TrainingProvenance | None:
    """The record a merged or full checkpoint's config.json carries, if any."""
    config = folder / "config.json"
    try:
        mark = json.loads(config.read_text()).get(CONFIG_MARK) if config.is_file() else None
        return TrainingProvenance.model_validate(mark) if isinstance(mark, dict) else None
    except (OSError, ValueError, ValidationError):
        return None


def _training_output_record(folder: Path) -> tuple[Path, TrainingProvenance] | None:
    """The record of the training output a folder sits in (OUT/step_N or OUT/final/adapter: OUT/train_config.json,
    OUT/final/evolve_training.json): how checkpoints written before per-folder provenance are traced."""
    for path in (folder.parent / PROVENANCE_FILE, folder.parent / TRAIN_CONFIG_FILE,
                 folder.parent.parent / TRAIN_CONFIG_FILE):
        if path.is_file():
            found = _read_provenance(path)
            if found is not None:
                return path, found
    return None


def changed_weights(recorded: dict[str, str], present: dict[str, str]) -> str:
    """'' when the files match their recorded hashes, else what differs (changed, missing, added), as a clause."""
    parts = []
    for what, names in (("changed", [n for n in recorded if n in present and present[n] != recorded[n]]),
                        ("missing", [n for n in recorded if n not in present]),
                        ("added", [n for n in present if n not in recorded])):
        if names:
            parts.append(f"{', '.join(sorted(names))} {what}")
    return "; ".join(parts)


@dataclass(frozen=True)
class CheckpointCheck:
    """What a local model folder says about its training. `provenance` is the record found (in the folder, its
    config.json, or the training output around it), None when there is none; `source` is the file it came from;
    `unverified` is '' when the folder's own evolve_training.json matches its files, else why not (a clause)."""

    folder: Path
    provenance: TrainingProvenance | None
    source: Path | None
    unverified: str


def inspect_checkpoint(model: str | Path) -> CheckpointCheck | None:
    """The training record of a checkpoint folder, verified against its files; None for anything that shows no
    sign of training (the embedded model, a served model's name, a base model's folder)."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    own = folder / PROVENANCE_FILE
    if own.is_file():
        provenance = _read_provenance(own)
        if provenance is None:
            return CheckpointCheck(folder, _config_mark(folder), own, f"its {PROVENANCE_FILE} is unreadable")
        if not provenance.weights:
            return CheckpointCheck(folder, provenance, own, f"its {PROVENANCE_FILE} holds no weight hashes "
                                   "(written by an older evolve train)")
        changed = changed_weights(provenance.weights, weight_digests(folder))
        return CheckpointCheck(folder, provenance, own, f"its files differ from those it was trained to: {changed}"
                               if changed else "")
    missing = f"it has no {PROVENANCE_FILE}"
    marked = _config_mark(folder)
    if marked is not None:
        return CheckpointCheck(folder, marked, folder / "config.json", f"{missing} (deleted? its config.json says "
                               "evolve train wrote it)")
    around = _training_output_record(folder)
    if around is not None:
        return CheckpointCheck(folder, around[1], around[0], f"{missing} of its own (only {around[0]} beside it)")
    if (folder / "adapter_config.json").is_file():
        return CheckpointCheck(folder, None, None, f"it is a LoRA adapter and {missing}, so what it was trained on "
                               "is unknown")
    return None


def checkpoint_provenance(model: str | Path) -> tuple[Path, TrainingProvenance] | None:
    """Where a checkpoint's training record was found, and the record (verified or not); None when there is none."""
    check = inspect_checkpoint(model)
    if check is None or check.provenance is None or check.source is None:
        return None
    return check.source, check.provenance


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


def held_out_refusal(model: str | Path, test_problems: Iterable[str], tests_of: str,
                     allow_unverified: bool = False) -> str:
    """Why a policy may not use checkpoint `model` on `test_problems` (of `tests_of`, e.g. 'experiment x'), as the
    rest of a sentence starting with the checkpoint's name; '' when it may. Trained on any test problem is refused
    always; a checkpoint whose provenance is missing or does not match its files unless `allow_unverified`."""
    check = inspect_checkpoint(model)
    if check is None:
        return ""
    if check.provenance is not None and check.source is not None:
        overlap = sorted(problem_keys(check.provenance.problems) & problem_keys(test_problems))
        if overlap:
            return (f"was trained on test problems of {tests_of}: {', '.join(overlap)} (see {check.source}); "
                    "evaluate it on problems it was not trained on")
    if check.unverified and not allow_unverified:
        return (f"is unverified: {check.unverified}; the held-out guard cannot check it. Use a checkpoint as "
                "evolve train wrote it, or set allow_unverified_checkpoint = true to use it anyway")
    return ""
