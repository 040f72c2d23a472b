"""GGUF export: turn a Llama-architecture Hugging Face folder (an `evolve train` checkpoint) into a GGUF file for
llama.cpp, converted once per content and cached."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evolve.policies.model_files import ModelFileError, _exclusive, default_cache_dir, find_embedded_gguf

Dtype = Literal["f32", "f16"]
_FORMAT_VERSION = b"evolve-gguf-1"  # part of the cache key: bump it when the written file changes
_USE_HF = 'use backend = "hf" for it'
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


@dataclass(frozen=True)
class GGUFExport:
    """A GGUF file ready for llama.cpp; `seconds` spent on this call, `cached` when no conversion was needed."""

    path: Path
    seconds: float
    cached: bool


@dataclass(frozen=True)
class _Tensor:
    source: Path  # the safetensors file holding it
    hf_name: str
    gguf_name: str


def hf_folder_to_gguf(folder: Path, cache_dir: Path | None = None, dtype: Dtype = "f32") -> Path:
    """The path of `folder` converted to GGUF (see export_gguf)."""
    return export_gguf(folder, cache_dir, dtype).path


def export_gguf(folder: Path, cache_dir: Path | None = None, dtype: Dtype = "f32") -> GGUFExport:
    """Convert a Llama HF folder to `<cache_dir>/gguf/<hash16>.gguf`, keyed by the content of its config, weights
    and tokenizer; a file already there is returned as is. Raises ModelFileError (one line) for what cannot convert."""
    started = time.perf_counter()
    folder = Path(folder)
    config = _read_config(folder)
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise ModelFileError(f"model folder {folder}: no *.safetensors weights to convert to GGUF; {_USE_HF}")
    out_dir = (cache_dir if cache_dir is not None else default_cache_dir()) / "gguf"
    key = _content_hash(folder, weights, dtype)
    final = out_dir / f"{key}.gguf"
    cached = _write_once(final, out_dir / f".{key}.lock", f".{key}.converting-",
                         lambda staging: _write_gguf(folder, config, weights, dtype, staging))
    return GGUFExport(final, time.perf_counter() - started, cached=cached)


def _write_once(final: Path, lock: Path, staging_prefix: str, write: Callable[[Path], None]) -> bool:
    """Have `final` written once by `write(staging)` (a temporary file beside it, then renamed: atomic), under
    `lock` so concurrent processes write it once; True if it was there already (or another process wrote it while
    this one waited). Staging files of a killed writer are removed first."""
    if final.is_file():
        return True
    final.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(lock):
        if final.is_file():
            return True
        for leftover in final.parent.glob(staging_prefix + "*"):  # from a killed writer; we hold the lock
            leftover.unlink(missing_ok=True)
        handle, staging_name = tempfile.mkstemp(prefix=staging_prefix, dir=final.parent)
        os.close(handle)
        staging = Path(staging_name)
        try:
            write(staging)
            staging.chmod(0o644)
            os.replace(staging, final)
        finally:
            staging.unlink(missing_ok=True)
    return False


Quantization = Literal["q8_0"]
_FTYPES = {"q8_0": 7}  # llama_ftype LLAMA_FTYPE_MOSTLY_Q8_0


def quantize_gguf(source: Path, kind: Quantization = "q8_0", threads: int = 0) -> GGUFExport:
    """`source` quantized by llama.cpp to `kind`, written once beside it as `<stem>.<kind>.gguf` (atomic, under the
    same lock as the export) and returned as is afterwards. Q8_0: 8-bit blocks with one scale per 32 weights, half
    the float16 file; llama.cpp decodes it faster on CPU (int8 dot products)."""
    import ctypes

    import llama_cpp

    started = time.perf_counter()
    final = source.with_name(f"{source.stem}.{kind}.gguf")

    def quantize(staging: Path) -> None:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = _FTYPES[kind]
        params.nthread = threads
        if llama_cpp.llama_model_quantize(str(source).encode(), str(staging).encode(), ctypes.byref(params)) != 0:
            raise ModelFileError(f"llama.cpp could not quantize {source} to {kind}")

    cached = _write_once(final, source.with_name(f".{final.stem}.lock"), f".{final.stem}.quantizing-", quantize)
    return GGUFExport(final, time.perf_counter() - started, cached=cached)


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelFileError(f"model folder {folder}: no config.json, so it cannot be converted to GGUF; {_USE_HF}")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"model folder {folder}: unreadable config.json ({_one_line(exc)}); {_USE_HF}") from exc
    if "LlamaForCausalLM" not in (config.get("architectures") or []) and config.get("model_type") != "llama":
        found = ", ".join(config.get("architectures") or []) or config.get("model_type") or "unknown"
        raise ModelFileError(f"model folder {folder}: architecture {found} is not Llama, the only one exported to "
                             f"GGUF; {_USE_HF}")
    missing = [key for key in _REQUIRED if key not in config]
    if missing:
        raise ModelFileError(f"model folder {folder}: config.json lacks {', '.join(missing)}; {_USE_HF}")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ModelFileError(f"model folder {folder}: rope scaling {rope.get('rope_type')} is not exported to GGUF; "
                             f"{_USE_HF}")
    return config


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _content_hash(folder: Path, weights: list[Path], dtype: Dtype) -> str:
    digest = hashlib.sha256(_FORMAT_VERSION + dtype.encode())
    for path in [folder / "config.json", *weights, folder / "tokenizer.json"]:
        if not path.is_file():
            continue
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def _gguf_name(hf_name: str, folder: Path) -> str:
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    parts = hf_name.split(".", 3)  # model, layers, N, rest
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and parts[3] in _LAYER_NAMES:
        return f"blk.{parts[2]}.{_LAYER_NAMES[parts[3]]}"
    raise ModelFileError(f"model folder {folder}: tensor {hf_name} has no place in a llama.cpp Llama model, so it "
                         f"cannot be exported to GGUF; {_USE_HF}")


def _plan(folder: Path, weights: list[Path], tied: bool) -> list[_Tensor]:
    from safetensors import safe_open

    plan = []
    for source in weights:
        try:
            with safe_open(source, framework="pt") as handle:
                names = list(handle.keys())
        except Exception as exc:
            raise ModelFileError(f"model folder {folder}: unreadable weights {source.name} ({_one_line(exc)}); "
                                 f"{_USE_HF}") from exc
        for name in names:
            if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
                continue  # inv_freq is recomputed from rope_theta; a tied head is token_embd
            plan.append(_Tensor(source, name, _gguf_name(name, folder)))
    return plan


def _arrays(plan: list[_Tensor], config: dict[str, Any], dtype: Dtype) -> Iterator[tuple[str, np.ndarray]]:
    from safetensors import safe_open

    heads = {"attn_q.weight": config["num_attention_heads"],
             "attn_k.weight": config.get("num_key_value_heads", config["num_attention_heads"])}
    for source, entries in groupby(plan, key=lambda entry: entry.source):
        with safe_open(source, framework="pt") as handle:
            for entry in entries:
                array = handle.get_tensor(entry.hf_name).float().numpy()
                suffix = entry.gguf_name.split(".", 2)[-1]
                if suffix in heads:
                    array = _permute(array, heads[suffix])
                if dtype == "f16" and array.ndim > 1:  # norms stay f32
                    array = array.astype(np.float16)
                yield entry.gguf_name, np.ascontiguousarray(array)


def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    # HF stores each head's rotary halves apart; llama.cpp wants them interleaved (as convert_hf_to_gguf.py does)
    shape = weights.shape
    return weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


@lru_cache(maxsize=1)
def _embedded_tokenizer() -> tuple[tuple[str, Any, Any, Any], ...]:
    """Every tokenizer.* key of the embedded SmolLM2 GGUF as (key, value, type, array item type)."""
    import gguf

    reader = gguf.GGUFReader(find_embedded_gguf())
    return tuple((name, field.contents(), field.types[0],
                  field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None)
                 for name, field in reader.fields.items() if name.startswith("tokenizer."))


def _folder_tokens(folder: Path) -> list[str]:
    path = folder / "tokenizer.json"
    try:
        if path.is_file():
            spec = json.loads(path.read_text())
            vocab = dict(spec["model"]["vocab"])
            vocab.update({added["content"]: added["id"] for added in spec.get("added_tokens", [])})
        else:
            from transformers import AutoTokenizer

            vocab = AutoTokenizer.from_pretrained(folder).get_vocab()
    except Exception as exc:
        raise ModelFileError(f"model folder {folder}: no readable tokenizer ({_one_line(exc)}); {_USE_HF}") from exc
    by_id = {index: token for token, index in vocab.items()}
    return [by_id.get(index, "") for index in range(max(by_id, default=-1) + 1)]


def _check_tokenizer(folder: Path, config: dict[str, Any]) -> None:
    tokens = next(value for name, value, _, _ in _embedded_tokenizer() if name == "tokenizer.ggml.tokens")
    if _folder_tokens(folder) != tokens or config.get("vocab_size", len(tokens)) != len(tokens):
        raise ModelFileError(f"model folder {folder}: its tokenizer differs from SmolLM2's; only SmolLM2-derived "
                             f"checkpoints convert to GGUF; {_USE_HF}")


def _write_gguf(folder: Path, config: dict[str, Any], weights: list[Path], dtype: Dtype, out: Path) -> None:
    import gguf

    tied = bool(config.get("tie_word_embeddings", False))
    plan = _plan(folder, weights, tied)
    _check_tokenizer(folder, config)
    writer = gguf.GGUFWriter(out, "llama")
    try:
        _add_hyperparameters(writer, config, folder.name, dtype)
        for name, value, value_type, item_type in _embedded_tokenizer():
            writer.add_key_value(name, value, value_type, sub_type=item_type)
        for name, array in _arrays(plan, config, dtype):
            writer.add_tensor(name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def _add_hyperparameters(writer: Any, config: dict[str, Any], name: str, dtype: Dtype) -> None:
    import gguf

    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rope = config.get("rope_parameters") or {}
    writer.add_name(name)
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_rope_freq_base(float(config.get("rope_theta") or rope.get("rope_theta") or 10000.0))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(head_dim)
    if head_dim * heads != config["hidden_size"]:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
