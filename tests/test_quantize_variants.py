"""check_fidelity's llama.cpp quantization variants (issue 59): a recipe gives each tensor the type it names, through
llama.cpp's own quantizer, and its file is made once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.script_modules import load_script
from tests.test_gguf_export import build_tiny_llama


def test_a_variant_keeps_the_tensors_it_names_at_f16_and_is_made_once(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    import gguf

    from evolve.policies.gguf_export import export_gguf

    fidelity = load_script("check_fidelity")
    f16 = export_gguf(build_tiny_llama(tmp_path / "model"), tmp_path / "cache", dtype="f16").path
    made = fidelity.variant_file(f16, "q8_0-f16emb-attn", threads=1)
    assert made.parent == f16.parent and made.name.startswith(f"{f16.stem}.q8_0-f16emb-attn-")
    types = {tensor.name: tensor.tensor_type.name for tensor in gguf.GGUFReader(made).tensors}
    assert types["token_embd.weight"] == types["output.weight"] == "F16"
    assert {types[f"blk.{layer}.attn_{part}.weight"] for layer in (0, 1) for part in ("q", "k", "v", "output")} == {
        "F16"}
    assert {types[f"blk.{layer}.ffn_{part}.weight"] for layer in (0, 1) for part in ("gate", "up", "down")} == {"Q8_0"}
    assert types["blk.0.attn_norm.weight"] == types["output_norm.weight"] == "F32"
    assert fidelity.tensor_types(made) == {"F16": 10, "Q8_0": 6, "F32": 5}
    written = made.stat().st_mtime_ns
    assert fidelity.variant_file(f16, "q8_0-f16emb-attn") == made and made.stat().st_mtime_ns == written
